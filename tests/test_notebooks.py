"""Every tutorial runs top to bottom in a fresh kernel, and its .ipynb matches its .py source.

The notebooks assert their own claims (jaxcoll equals psum, round counts, byte counts), so a
regression in the library fails here as an error in the notebook's cell.
"""

import sys
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
pytest.importorskip("nbclient")

TUTORIALS = Path(__file__).resolve().parent.parent / "tutorials"
sys.path.insert(0, str(TUTORIALS))
import build  # noqa: E402  (tutorials/build.py: how notebooks are executed)

SOURCES = build.sources()


def _code_and_markdown(notebook) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source.strip()) for cell in notebook.cells]


def test_there_are_tutorials():
    # 05 in two halves: choosing on paper, and what auto picks on this machine
    assert [source.stem[:2] for source in SOURCES] == [
        "01", "02", "03", "04", "05", "05", "06", "07", "08", "09", "10", "11", "12", "13"]


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.stem)
def test_notebook_is_at_most_4000_words(source):
    """Every word of its cells, markdown and code (comments included) counts."""
    words = sum(len(cell.source.split()) for cell in jupytext.read(source).cells)
    assert words <= 4000, f"{source.name}: {words} words"


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.stem)
def test_notebook_prints_the_same_on_every_machine(source):
    """Run by hand, not by build.py, a notebook still ranks auto's algorithms with the shipped
    calibrations, never this machine's cache (nor stops to measure one): it says so itself,
    in its first code cell, before JAX starts."""
    first = next(cell.source for cell in jupytext.read(source).cells if cell.cell_type == "code")
    setting = 'os.environ["JAXCOLL_CALIBRATE"] = "0"'
    assert setting in first and first.index(setting) < first.index("import jax"), source.name


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.stem)
def test_notebook_matches_its_source(source):
    paired = source.with_suffix(".ipynb")
    assert paired.exists(), f"{paired.name} missing: run python tutorials/build.py {source.name}"
    assert _code_and_markdown(jupytext.read(paired)) == _code_and_markdown(jupytext.read(source)), (
        f"{paired.name} is out of date with {source.name}: run python tutorials/build.py "
        f"{source.name}")


@pytest.mark.subprocess_jax
@pytest.mark.notebook  # run on both of CI's jax versions: what the notebooks teach must hold
@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.stem)
def test_notebook_runs(source):
    build.execute(source)  # raises CellExecutionError (with the failing cell) on any error
