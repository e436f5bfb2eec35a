"""Every Python example of the user guide runs as written: a page's ```python blocks, in order,
in one fresh process started in the repository's root (8 fake CPU devices, as a reader's
script would start them), ``>>>`` blocks compared with their printed output as doctests. A
block whose first line is ``# needs a GPU`` is only compiled. (The README's quickstart, which
the docs' index includes, is run by tests/test_readme.py.)"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs" / "guide").glob("*.md")) + [ROOT / "docs" / "sharp_bits.md"]
GPU = "# needs a GPU"

RUNNER = '''
import doctest, sys
import jax
jax.config.update("jax_num_cpu_devices", 8)
namespace = {"__name__": "__main__"}
for number, block in enumerate(BLOCKS):
    if block.startswith(GPU):
        compile(block, f"block {number}", "exec")
    elif block.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(block, namespace, f"block {number}", None, 0)
        runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
        runner.run(test, out=sys.stderr.write)
        if runner.failures:
            sys.exit(f"block {number}: {runner.failures} doctest failures")
    else:
        exec(compile(block, f"block {number}", "exec"), namespace)
'''


def blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)


@pytest.mark.subprocess_jax
@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=lambda p: p.name)
def test_a_guide_pages_examples_run_as_written(page):
    script = f"BLOCKS = {blocks(page)!r}\nGPU = {GPU!r}\n" + RUNNER
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, text=True,
                            capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
