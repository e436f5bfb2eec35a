"""Sphinx configuration of jaxcoll's site: MyST pages, myst-nb for the executed notebooks (never
run again here), autodoc for the API. Build: python -m sphinx -W -b html docs docs/_build/html"""

import os
from pathlib import Path

os.environ.setdefault("JAXCOLL_CALIBRATE", "0")  # the shipped calibrations: the same site anywhere

import jaxcoll  # noqa: E402
from jaxcoll.analysis.systems import dgx  # noqa: E402
from jaxcoll.tools import pictures  # noqa: E402

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
GENERATED = DOCS / "_generated"  # made by this file at every build; not in git

project = "jaxcoll"
author = "the jaxcoll authors"
release = jaxcoll.__version__
extensions = ["myst_nb", "sphinx.ext.autodoc"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # the notebooks are executed in CI by tests/test_notebooks.py
exclude_patterns = ["_build", "tutorials/README.md"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
html_theme = "sphinx_book_theme"
html_title = "jaxcoll"
html_context = {"default_mode": "light"}  # else the theme reads an empty mode off file:// and logs an error
html_theme_options = {"repository_url": "", "use_repository_button": False,
                      "show_toc_level": 2}
html_extra_path = [str(GENERATED / "extra")]
html_static_path = []
suppress_warnings = ["myst.header"]  # notebooks start at their own heading levels

# The step-through pages (jaxcoll.tools.pictures.html) embedded in pages.md.
# name: (primitive, algorithm, n, the DGX nodes it is placed on, if any)
PAGES = {"allreduce_ring_8": ("allreduce", "ring", 8, 0),
         "broadcast_binomial_8": ("broadcast", "binomial", 8, 0),
         "allgather_recursive_doubling_8": ("allgather", "recursive_doubling", 8, 0),
         "allreduce_ring_16_on_2_dgx": ("allreduce", "ring", 16, 2)}


# Links a notebook makes from tutorials/ (as GitHub shows it) and where they lead on the site.
SITE_LINKS = {"](../docs/": "](../", "](../bench/RESULTS.md": "](../bench/results.md",
              "](../bench/MODEL.md": "](../bench/model.md"}


def _copy_tutorials() -> None:
    """The executed notebooks beside docs/tutorials/index.md, their links to the repository's
    pages turned into the site's."""
    target = DOCS / "tutorials"
    for old in target.glob("*.ipynb"):
        old.unlink()
    for notebook in sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.ipynb")):
        text = notebook.read_text(encoding="utf-8")
        for repository, site in SITE_LINKS.items():
            text = text.replace(repository, site)
        (target / notebook.name).write_text(text, encoding="utf-8")


def _write_pages() -> None:
    out = GENERATED / "extra" / "pages"
    out.mkdir(parents=True, exist_ok=True)
    for name, (primitive, algorithm, n, nodes) in PAGES.items():
        pictures.html(jaxcoll.schedule(primitive, algorithm, n), out / f"{name}.html",
                      topology=dgx("h100", nodes) if nodes else None)


_copy_tutorials()
_write_pages()
