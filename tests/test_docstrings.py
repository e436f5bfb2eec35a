"""Public docstrings in JAX's style: every public function and class of ``jaxcoll``,
``jaxcoll.lax`` and ``jaxcoll.msccl``, and the analysis and IR names the API reference shows
(docs/api/analysis.md, docs/api/schedules.md), has a one-line summary, ``Args:`` for what it takes,
``Returns:`` for what a function gives back, and ``Raises:`` where the main functions refuse a
user's mistake; the ``>>>`` examples in them run as doctests (on the tests' 8 fake CPU
devices) and print what they say."""

import doctest
import importlib
import inspect
import re

import pytest

import jaxcoll
import jaxcoll.lax
from jaxcoll.ir import msccl

# the main functions, whose docstrings also show an example and say what they refuse
MAIN = ("allreduce", "reduce_scatter", "allgather", "alltoall", "broadcast", "reduce",
        "gather", "scatter", "schedule", "verify", "cost", "simulate", "synthesize")

# the names docs/api/analysis.md and docs/api/schedules.md show for these modules: the listed
# ``:members:``, or for a bare ``:members:`` the module's public functions and classes less its
# ``:exclude-members:``
API_PAGES = {
    "jaxcoll.analysis.model": ("shipped", "use_defaults", "default_calibration", "ranking",
                               "schedule_for", "chain_pieces"),
    "jaxcoll.analysis.topology": ("chunk_bytes", "switch", "shared", "fully_connected", "ring",
                                  "torus", "nodes"),
    "jaxcoll.analysis.pipelined": ("default_slices", "run"),
    "jaxcoll.analysis.protocols": ("Protocol", "named"),
    "jaxcoll.analysis.systems": ("dgx", "mi300x", "Gpu", "System", "cluster", "Published",
                                 "validation"),
    "jaxcoll.analysis.nccl": ("predict", "Prediction"),
    "jaxcoll.analysis.compression": ("compress_arg", "error_bound", "sum_of_block_maxima",
                                     "result_bound"),
    "jaxcoll.ir.per_rank": ("rounds", "as_soon_as_held"),
    "jaxcoll.ir.families.nvls": ("allreduce", "reduce_scatter", "allgather"),
    "jaxcoll.ir.schedules": ("ThroughSwitch",),
}


def _public():
    """(qualified name, object) of every public function and class to hold to the style."""
    found = [(f"jaxcoll.{name}", getattr(jaxcoll, name)) for name in jaxcoll.__all__]
    found += [(f"jaxcoll.lax.{name}", getattr(jaxcoll.lax, name)) for name in jaxcoll.lax.__all__]
    found += [(f"jaxcoll.msccl.{name}", getattr(msccl, name))
              for name in ("load", "dump", "parse", "MscclError", "MscclWarning")]
    for module, names in API_PAGES.items():
        loaded = importlib.import_module(module)
        found += [(f"{module}.{name}", getattr(loaded, name)) for name in names]
    return [(name, obj) for name, obj in found
            if inspect.isfunction(inspect.unwrap(obj)) or inspect.isclass(obj)]


def _takes_arguments(obj) -> bool:
    try:
        parameters = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False
    return any(name not in ("self", "cls") for name in parameters)


def _problems(name: str, obj) -> list[str]:
    doc = inspect.getdoc(obj) or ""
    lines = doc.splitlines()
    problems = []
    if not lines or not lines[0].strip() or len(lines) > 1 and lines[1].strip():
        problems.append("no one-line summary followed by a blank line")
    exception = inspect.isclass(obj) and issubclass(obj, BaseException)
    if _takes_arguments(obj) and not exception and not re.search(r"^(Args|Attributes):$",
                                                                  doc, re.M):
        problems.append("no Args:")
    if inspect.isfunction(obj) and inspect.signature(obj).return_annotation not in (
            None, "None") and not re.search(r"^(Returns|Yields):$", doc, re.M):
        problems.append("no Returns:")
    short = name.rsplit(".", 1)[1]
    if short in MAIN and name.count(".") == 1:
        if not re.search(r"^Raises:$", doc, re.M):
            problems.append("no Raises:")
        if ">>>" not in doc:
            problems.append("no example")
    return problems


def test_public_docstrings_have_a_summary_args_and_returns():
    bad = {name: problems for name, obj in _public() if (problems := _problems(name, obj))}
    assert not bad, f"{len(bad)} public names: " + "; ".join(
        f"{name}: {', '.join(problems)}" for name, problems in sorted(bad.items()))


MODULES = sorted({inspect.getmodule(obj).__name__ for _, obj in _public()})


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples_run(module):
    found = doctest.testmod(__import__(module, fromlist=["_"]), optionflags=(
        doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE), raise_on_error=False, verbose=False)
    assert found.failed == 0, f"{module}: {found.failed} of {found.attempted} examples failed"
