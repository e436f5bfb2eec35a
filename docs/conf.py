"""Sphinx configuration of jaxcoll's site: MyST pages, myst-nb for the executed notebooks (never
run again here), autodoc for the API. Build: python -m sphinx -W -b html docs docs/_build/html"""

import os
from pathlib import Path

from sphinx import addnodes

os.environ.setdefault("JAXCOLL_CALIBRATE", "0")  # the shipped calibrations: the same site anywhere

import jaxcoll  # noqa: E402
from jaxcoll.analysis.systems import dgx  # noqa: E402
from jaxcoll.tools import pictures  # noqa: E402

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
GENERATED = DOCS / "_generated"  # made by this file at every build; not in git

project = "jaxcoll"
author = "the jaxcoll authors"
release = jaxcoll.__version__  # the installed package's metadata: pyproject.toml's version
version = ".".join(release.split(".")[:2])
extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.intersphinx", "sphinx.ext.napoleon"]
myst_enable_extensions = ["colon_fence", "substitution"]
myst_substitutions = {"release": release}  # {{ release }} on a page
myst_heading_anchors = 3
nb_execution_mode = "off"  # the notebooks are executed in CI by tests/test_notebooks.py
exclude_patterns = ["_build", "tutorials/README.md"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
html_theme = "sphinx_book_theme"
html_title = f"jaxcoll {release}"  # the version above every page's navigation
html_context = {"default_mode": "light"}  # else the theme reads an empty mode off file:// and logs an error
# No repository button: the project has no public URL to point it at yet.
html_theme_options = {"repository_url": "", "use_repository_button": False,
                      "show_toc_level": 2}
html_extra_path = [str(GENERATED / "extra")]
html_static_path = []
suppress_warnings = ["myst.header"]  # notebooks start at their own heading levels

# JAX's, NumPy's and Python's names link to their sites through inventories shipped in
# _inventories/ (docs/_inventories/inventories.py writes them): the build fetches nothing.
intersphinx_mapping = {
    name: (base, f"_inventories/{name}.inv")
    for name, base in (("jax", "https://docs.jax.dev/en/latest/"),
                          ("numpy", "https://numpy.org/doc/stable/"),
                          ("python", "https://docs.python.org/3/"))}
GUIDE = ("guide/", "index")  # pages whose every cross-reference must lead somewhere

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


def _warn_unresolved(app, doctree) -> None:
    """A cross-reference on a guide page that leads nowhere warns, so it is an error under -W
    (Sphinx is silent about them by default, which autodoc's type hints need elsewhere)."""
    if app.env.docname.startswith(GUIDE):
        for node in doctree.findall(addnodes.pending_xref):
            node["refwarn"] = True


def _document_version(app, what, name, obj, skip, options):
    """``jaxcoll.__version__`` is in ``__all__``: documented with the other names."""
    return False if name == "__version__" and what == "module" else None


def setup(app):
    app.connect("doctree-read", _warn_unresolved)
    app.connect("autodoc-skip-member", _document_version)


_copy_tutorials()
_write_pages()
