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


# ----------------------------------------------------------------------------- cross-links

GUIDE = ROOT / "docs" / "guide"
# Pages of the guide whose text is another's to link: executors.md all of it, msccl.md above
# the section that shows the shipped sample file.
LINKED_FROM = {"executors.md": None, "msccl.md": "## The format, on a shipped file"}
ROLE = re.compile(r"\{py:(\w+)\}`([^`]+)`")
SPAN = re.compile(r"(?<![`}])`([^`]+)`(?!`)")


def _linked_text(page: Path) -> str:
    """The page's text that must link the names it mentions, without its code blocks."""
    text = page.read_text(encoding="utf-8")
    if page.name in LINKED_FROM:
        start = LINKED_FROM[page.name]
        text = "" if start is None else text[text.index(start):]
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _guide_pages() -> list[Path]:
    return sorted(GUIDE.glob("*.md"))


def _role_target(body: str) -> str:
    """A role's target: ``title <target>`` or the body itself, less a call's parentheses."""
    match = re.fullmatch(r"(.*?)\s*<([^<>]+)>", body, flags=re.S)
    return (match.group(2) if match else body).removesuffix("()")


def _documented(site: Path) -> set[str]:
    """Every Python name the site documents (its own objects.inv), and jaxcoll's public
    names as ``jaxcoll.<name>`` (``jaxcoll.msccl`` is documented as ``jaxcoll.ir.msccl``)."""
    from sphinx.util.inventory import InventoryFile

    inventory = InventoryFile.loads((site / "objects.inv").read_bytes(), uri="")
    data = getattr(inventory, "data", inventory)  # an Inventory object, or the older dict
    import jaxcoll
    return ({name for kind, items in data.items() if kind.startswith("py:") for name in items}
            | {f"jaxcoll.{name}" for name in jaxcoll.__all__})


def _inventories():
    """docs/_inventories/inventories.py, imported from its path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "inventories", ROOT / "docs" / "_inventories" / "inventories.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_guide_pages_link_every_public_name_they_mention(site):
    """A `jaxcoll.` name in backticks that the API reference documents is a cross-reference
    role, not plain code; every role of a guide page is a link in the built page."""
    documented, plain = _documented(site), []
    for page in _guide_pages():
        for span in SPAN.findall(ROLE.sub("", _linked_text(page))):
            name = re.match(r"jaxcoll(?:\.\w+)+", span)
            if name and name.group(0) in documented:
                plain.append(f"{page.name}: `{span}`")
    assert plain == [], "write these as {py:func}`...` (or class, mod, data) roles"
    for page in _guide_pages():
        html = (site / "guide" / page.with_suffix(".html").name).read_text(encoding="utf-8")
        unlinked = re.findall(r'(?<!">)<code class="xref py[^"]*"><span class="pre">([^<]*)',
                              html)
        assert unlinked == [], f"{page.name}: roles that lead nowhere: {unlinked}"


def test_external_names_link_to_their_sites_from_shipped_inventories(site):
    """JAX's, NumPy's and Python's names link to docs.jax.dev, numpy.org and docs.python.org
    through the inventories in docs/_inventories/, which list exactly the names the guide
    refers to, are what inventories.py writes, and are files: the build fetches nothing."""
    inventories = _inventories()
    listed = {name: inventories.PROJECTS[project][1]
              for project, (_, _, names) in inventories.PROJECTS.items() for name in names}
    referred = {_role_target(body) for page in _guide_pages()
                for _, body in ROLE.findall(_linked_text(page))}
    assert {name for name in referred if not name.startswith("jaxcoll")} == set(listed)
    for project in inventories.PROJECTS:
        assert inventories.path(project).read_bytes() == inventories.inventory(project), (
            "run python docs/_inventories/inventories.py")
    mapping = _conf_assignment("intersphinx_mapping")
    assert {name: base for name, (base, _) in mapping.items()} == {
        project: base for project, (_, base, _) in inventories.PROJECTS.items()}
    for _, location in mapping.values():
        assert "://" not in location and (ROOT / "docs" / location).is_file()
    hrefs = {href for page in _guide_pages()
             for href in re.findall(r'href="(https://[^"]+)"', (
                 site / "guide" / page.with_suffix(".html").name).read_text(encoding="utf-8"))}
    for name, base in listed.items():
        assert any(href.startswith(base) and href.endswith("#" + name) or
                   href.startswith(base) and href.endswith("#module-" + name)
                   for href in hrefs), name


def _conf_assignment(name: str):
    """The value docs/conf.py assigns to ``name``, evaluated alone (conf.py itself writes
    files when it runs)."""
    import ast

    tree = ast.parse((ROOT / "docs" / "conf.py").read_text(encoding="utf-8"))
    node = next(node for node in tree.body if isinstance(node, ast.Assign)
                and [target.id for target in node.targets] == [name])
    return eval(compile(ast.Expression(node.value), "conf.py", "eval"), {})


def test_the_site_shows_the_version(site):
    import jaxcoll

    index = (site / "index.html").read_text(encoding="utf-8")
    assert f"Version {jaxcoll.__version__}." in index
    assert f"<title>jaxcoll &#8212; jaxcoll {jaxcoll.__version__}</title>" in index
    assert _conf_assignment("html_theme_options")["use_repository_button"] is False


# ----------------------------------------------------------------------------- the sample

SAMPLE = ROOT / "docs" / "examples" / "allreduce_allpairs_4.xml"


def _sample_section() -> str:
    text = (GUIDE / "msccl.md").read_text(encoding="utf-8")
    return text[text.index(LINKED_FROM["msccl.md"]):]


def test_the_shipped_msccl_file_loads_and_verifies():
    import warnings

    import jaxcoll

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no MscclWarning either
        schedule = jaxcoll.ir.msccl.load(SAMPLE)
    jaxcoll.verify(schedule)
    assert (schedule.collective, schedule.n_ranks, schedule.n_chunks) == ("allreduce", 4, 4)
    assert len(schedule.rounds) == 2  # the sends into scratch, then the local adds


def test_the_msccl_guide_shows_and_loads_the_shipped_file(monkeypatch, capsys):
    """Its excerpt is the file's own lines, its download link and its example's path are the
    shipped file, and the example runs as written from the repository's root."""
    section = _sample_section()
    excerpt = re.search(r"```xml\n(.*?)```", section, flags=re.S).group(1)
    lines = set(SAMPLE.read_text(encoding="utf-8").splitlines())
    shown = [line for line in excerpt.splitlines() if not line.strip().startswith("<!--")]
    assert len(shown) > 8 and [line for line in shown if line not in lines] == []
    assert "<../examples/allreduce_allpairs_4.xml>" in section
    example = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    paths = re.findall(r'"([^"]+\.xml)"', example)
    assert paths and all((ROOT / path).resolve() == SAMPLE for path in paths)
    monkeypatch.chdir(ROOT)
    exec(example, {})
    assert "2 rounds" in capsys.readouterr().out
