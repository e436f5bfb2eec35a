"""The README's quickstart runs as pasted and prints what the README says; its table of
algorithms is the registry's; its links lead somewhere."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).parent.parent / "README.md").read_text()


def _python_blocks():
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


@pytest.mark.subprocess_jax  # a fresh process: the quickstart starts JAX's devices itself
def test_the_quickstart_runs_as_pasted_and_prints_what_the_readme_says(tmp_path):
    """Its code, run as a file from an empty folder, prints the README's output: the ring's
    mean within float rounding of pmean's (the printed weights may differ in their last
    digits on another CPU), the schedule exactly; and it writes the page."""
    code, shown = re.search(r"<!-- quickstart start -->\n```python\n(.*?)```.*?```text\n(.*?)```",
                            README, flags=re.S).groups()
    (tmp_path / "quickstart.py").write_text(code)
    result = subprocess.run([sys.executable, "quickstart.py"], cwd=tmp_path, text=True,
                            capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr
    first, *rest = result.stdout.splitlines()
    want_first, *want_rest = shown.splitlines()
    pattern = r"8 devices; w = \[[-0-9. e]+\]; ring vs pmean: max difference (\S+)"
    assert re.fullmatch(pattern, first) and re.fullmatch(pattern, want_first), first
    assert float(re.fullmatch(pattern, first).group(1)) < 1e-5
    assert rest == want_rest
    assert (tmp_path / "ring.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_algorithm_table_matches_registry():
    import jaxcoll

    table = README[README.index("| primitive | algorithms"):].split("\n\n")[0]
    listed = {}
    for row in table.splitlines()[2:]:
        primitives, names = row.strip("|").split("|")
        for primitive in primitives.split(","):
            listed[primitive.strip()] = set(re.findall(r"`(\w+)`", names)) | {"auto", "xla"}
    assert listed == {p: set(jaxcoll.algorithms(p)) for p in listed}
    assert set(listed) == set(jaxcoll.ir.families.COLLECTIVES)


def test_readme_is_a_front_page():
    assert len(README.splitlines()) <= 150


def test_readme_links_lead_somewhere():
    """Every relative link of the front page names a file of the repository."""
    root = Path(__file__).parent.parent
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not target.startswith(("http://", "https://")):
            assert (root / target).exists(), target
