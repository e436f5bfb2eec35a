"""The intersphinx inventories the site links JAX's, NumPy's and Python's names with, written
here instead of downloaded: the build reads no network (docs/conf.py points intersphinx at the
files beside this one, with each project's real site as the base of its links).

Each inventory lists exactly the names the pages refer to (tests/test_docs.py holds it);
a page that refers to another adds it here, then: ``python docs/_inventories/inventories.py``.
"""

import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

# project: (its name, the base of its links, {name: (Sphinx's object type, page)}); a page
# ending in "#" takes the name as its anchor, as Sphinx's own inventories write it.
JAX_PAGE = "_autosummary/{}.html#"
PROJECTS = {
    "jax": ("JAX", "https://docs.jax.dev/en/latest/", {
        "jax.lax": ("py:module", "jax.lax.html#module-jax.lax"),
        "jax.distributed": ("py:module", "jax.distributed.html#module-jax.distributed"),
        **{name: ("py:function", JAX_PAGE.format(name)) for name in (
            "jax.distributed.initialize", "jax.grad", "jax.jit", "jax.jvp",
            "jax.lax.all_gather", "jax.lax.all_to_all", "jax.lax.pmax", "jax.lax.pmean",
            "jax.lax.ppermute", "jax.lax.psum", "jax.lax.psum_scatter",
            "jax.lax.ragged_all_to_all", "jax.linear_transpose", "jax.shard_map", "jax.vjp",
            "jax.vmap")},
    }),
    "numpy": ("NumPy", "https://numpy.org/doc/stable/", {
        "numpy.can_cast": ("py:function", "reference/generated/numpy.can_cast.html#"),
    }),
    "python": ("Python", "https://docs.python.org/3/", {
        "importlib.metadata.version": ("py:function", "library/importlib.metadata.html#"),
        "DeprecationWarning": ("py:exception", "library/exceptions.html#"),
    }),
}


def inventory(project: str) -> bytes:
    """``project``'s inventory in Sphinx's version 2 format (a zlib-compressed body)."""
    title, _, names = PROJECTS[project]
    header = (f"# Sphinx inventory version 2\n# Project: {title}\n# Version: \n"
              "# The remainder of this file is compressed using zlib.\n")
    body = "".join(f"{name} {kind} 1 {page.replace('#', '#$') if page.endswith('#') else page} -\n"
                   for name, (kind, page) in sorted(names.items()))
    return header.encode() + zlib.compress(body.encode(), 9)


def path(project: str) -> Path:
    """Where ``project``'s inventory is shipped."""
    return HERE / f"{project}.inv"


if __name__ == "__main__":
    for name in PROJECTS:
        path(name).write_bytes(inventory(name))
        print(path(name))
