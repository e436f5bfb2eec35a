"""The documentation site: built by Sphinx from docs/ with every warning an error (a broken
cross-reference, a docstring docutils cannot read), no link of its pages leading nowhere, and its
index, an API page, a tutorial and the step-through pages opened in headless Chromium offline,
with no console error and no request leaving the machine."""

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
# One Sphinx process that imports jaxcoll and renders every notebook: CI's first pass only.
pytestmark = pytest.mark.subprocess_jax


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built as the README says (-W: warnings are errors), into a fresh folder."""
    for module in ("sphinx", "myst_nb", "sphinx_book_theme"):
        pytest.importorskip(module, reason="the docs need pip install -e '.[test]' (or '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(out / "doctrees"), str(ROOT / "docs"), str(out / "html")],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"sphinx failed:\n{done.stdout[-3000:]}\n{done.stderr[-8000:]}"
    return out / "html"


class _Links(HTMLParser):
    """Every href and src of a page, and every id it defines."""

    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.links.append(value)
            elif name == "id" and value:
                self.ids.add(value)


def _parsed(path: Path) -> _Links:
    links = _Links()
    links.feed(path.read_text(encoding="utf-8", errors="replace"))
    return links


def test_the_site_has_its_pages(site):
    for page in ("index.html", "api/jaxcoll.html", "api/lax.html", "guide/api.html",
                 "tutorials/index.html", "tutorials/01_ring_allreduce.html", "sharp_bits.html",
                 "bench/results.html", "bench/model.html", "pages/allreduce_ring_8.html"):
        assert (site / page).exists(), page
    api = (site / "api/jaxcoll.html").read_text(encoding="utf-8")
    import jaxcoll
    missing = [name for name in jaxcoll.__all__ if f'id="jaxcoll.{name}"' not in api
               and name not in ("lax", "msccl")]  # modules: pages of their own
    assert missing == []
    notebook = (site / "tutorials/01_ring_allreduce.html").read_text(encoding="utf-8")
    assert "collective-permute" in notebook and "<img" in notebook  # outputs, not re-run


def test_every_internal_link_leads_somewhere(site):
    pages = {path: _parsed(path) for path in site.rglob("*.html")
             if "_static" not in path.relative_to(site).parts}  # the theme's templates
    broken = []
    for path, parsed in pages.items():
        for link in parsed.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith(("//", "mailto:", "javascript:", "data:")):
                continue
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if not target.exists():
                broken.append(f"{path.relative_to(site)}: {link}")
            elif parts.fragment and target.suffix == ".html" and target in pages:
                if parts.fragment not in pages[target].ids:
                    broken.append(f"{path.relative_to(site)}: {link} (no such anchor)")
    assert broken == []


def _open(browser, path: Path):
    """``path`` in a fresh tab, every request off this machine aborted; (tab, errors, sent)."""
    tab, errors, sent = browser.new_page(viewport={"width": 1280, "height": 900}), [], []
    tab.on("console", lambda message: message.type == "error" and errors.append(message.text))
    tab.on("pageerror", lambda error: errors.append(str(error)))

    def route(request_route):
        if request_route.request.url.startswith("file://"):
            request_route.continue_()
        else:
            sent.append(request_route.request.url)
            request_route.abort()

    tab.route("**/*", route)
    tab.goto(path.as_uri())
    tab.wait_for_load_state("load")
    return tab, errors, sent


@pytest.mark.parametrize("page", ["index.html", "api/jaxcoll.html",
                                  "tutorials/01_ring_allreduce.html", "pages.html"])
def test_pages_load_offline_without_console_errors(site, browser, page, tmp_path):
    tab, errors, sent = _open(browser, site / page)
    try:
        assert tab.title() and "jaxcoll" in tab.title()
        assert errors == [] and sent == []
        if page == "pages.html":  # the step-through pages run inside the site
            frames = [frame for frame in tab.frames if frame.url.endswith("_8.html")]
            assert len(frames) == 3
            for frame in frames:
                frame.wait_for_selector("g.cell")
        tab.screenshot(path=str(tmp_path / (re.sub(r"\W", "_", page) + ".png")), full_page=False)
    finally:
        tab.close()
