"""Rebuild the tutorial notebooks from their reviewed sources.

Each ``tutorials/NN_name.py`` (jupytext percent format) is the source; this script executes it
top to bottom in a fresh kernel and writes ``NN_name.ipynb`` with the outputs, so the notebooks
read well on GitHub. Run it after editing a ``.py`` file (tests/test_notebooks.py fails while a
pair is out of sync):

    python tutorials/build.py                 # every notebook
    python tutorials/build.py 01_ring_allreduce.py
"""

import os
import sys
import time
from pathlib import Path

import jupytext
import nbclient

HERE = Path(__file__).resolve().parent


def sources() -> list[Path]:
    """The tutorial sources, in reading order."""
    return sorted(path for path in HERE.glob("[0-9][0-9]_*.py"))


def execute(source: Path, timeout: int = 600):
    """Run ``source`` as a notebook in a fresh kernel (in the tutorials folder); return it run.

    ``auto`` there uses the calibrations shipped with jaxcoll (JAXCOLL_CALIBRATE=0), so the
    notebooks print the same choices on every machine and never stop to time algorithms."""
    os.environ.setdefault("JAXCOLL_CALIBRATE", "0")  # the kernel inherits it
    notebook = jupytext.read(source)
    client = nbclient.NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(HERE)}})
    client.execute()
    return notebook


def main(argv: list[str]) -> int:
    chosen = [HERE / name for name in argv] or sources()
    for source in chosen:
        start = time.perf_counter()
        notebook = execute(source)
        jupytext.write(notebook, source.with_suffix(".ipynb"))
        print(f"{source.name}: executed in {time.perf_counter() - start:.0f} s "
              f"-> {source.with_suffix('.ipynb').name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
