"""JAX's own collective tests with one import swapped: what passes with ``jax.lax`` must pass
with ``jaxcoll.lax`` (not a test; JAX's test files are not part of this project).

    pip install absl-py          # JAX's tests are absltest modules
    git clone --branch jax-v0.10.2 https://github.com/jax-ml/jax   # the tests of your jax
    python bench/jax_tests.py --tests jax/tests [--modules shard_map_test,batching_test,pmap_test]

Each module is copied twice into a scratch folder: as written, and with the single change
``from jax import lax`` -> ``from jaxcoll import lax``. Both copies run under pytest on 8 fake
CPU devices, restricted to the test functions whose source calls a collective through that
name (``lax.psum``, ``lax.all_to_all``, ...: the only calls the swap changes). The report lists
every test that passes as written and fails swapped, with its error's first line.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

COLLECTIVES = {"psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "all_to_all",
               "ragged_all_to_all", "pbroadcast"}
SWAP = re.compile(r"^from jax import lax[ \t]*$", re.M)


def calls_a_collective(fn: ast.AST) -> bool:
    """True if the function's source has ``lax.<collective>`` (the name the swap changes)."""
    return any(isinstance(node, ast.Attribute) and node.attr in COLLECTIVES
               and isinstance(node.value, ast.Name) and node.value.id == "lax"
               for node in ast.walk(fn))


def selected_tests(source: str) -> list[str]:
    """The names of the test methods (and functions) that call a collective through ``lax``."""
    return sorted({node.name for node in ast.walk(ast.parse(source))
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                   and node.name.startswith("test") and calls_a_collective(node)})


def run(folder: Path, names: list[str], junit: Path, workers: int) -> None:
    """pytest on ``folder``'s modules, only tests whose names start with one of ``names``."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAXCOLL_CALIBRATE": "0",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    keyword = " or ".join(names)
    command = [sys.executable, "-m", "pytest", str(folder), "-q", "-p", "no:cacheprovider",
               "-k", keyword, f"--junitxml={junit}", "-n", str(workers)]
    subprocess.run(command, env=env, cwd=folder, stdout=subprocess.DEVNULL, check=False)


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> "passed", "skipped" or the first line of its failure."""
    found = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        problem = next((child for child in case if child.tag in ("failure", "error")), None)
        skipped = any(child.tag == "skipped" for child in case)
        found[test] = ("skipped" if skipped else "passed" if problem is None else
                       (problem.get("message") or "failed").splitlines()[0][:200])
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", required=True, type=Path, help="jax's tests/ folder")
    parser.add_argument("--modules", default="shard_map_test,batching_test,pmap_test")
    parser.add_argument("-n", "--workers", type=int, default=2)
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="jax_tests_"))
    names, results = set(), {}
    for variant in ("lax", "jaxcoll"):
        folder = scratch / variant
        folder.mkdir()
        for module in args.modules.split(","):
            source = (args.tests / f"{module}.py").read_text()
            names |= set(selected_tests(source))
            if variant == "jaxcoll":
                source, swapped = SWAP.subn("from jaxcoll import lax", source)
                print(f"{module}: {swapped} import swapped, {len(selected_tests(source))} "
                      "tests call a collective through it")
            (folder / f"{module}.py").write_text(source)
        for helper in args.tests.glob("*_helpers.py"):  # modules the tests import, if any
            shutil.copy(helper, folder)
        run(folder, sorted(names), scratch / f"{variant}.xml", args.workers)
        results[variant] = outcomes(scratch / f"{variant}.xml")
    lax, ours = results["lax"], results["jaxcoll"]
    passing = [test for test, outcome in lax.items() if outcome == "passed"]
    broken = {test: ours.get(test, "missing") for test in passing if ours.get(test) != "passed"}
    print(f"{len(lax)} tests ran; {len(passing)} pass with jax.lax; "
          f"{len(passing) - len(broken)} of those pass with jaxcoll.lax")
    for test, outcome in sorted(broken.items()):
        print(f"  FAILS with jaxcoll.lax: {test}: {outcome}")
    print(f"(the copies and pytest's junit XML: {scratch})")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
