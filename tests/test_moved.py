"""The import paths the fourth edition moved (docs/guide/layout.md's table) work again, as
aliases that warn once with a DeprecationWarning naming the new path and the version that
removes them (CHANGELOG.md); ``python -m`` of the old module names too."""

import importlib
import subprocess
import sys
import warnings

import pytest

import jaxcoll
from jaxcoll import _moved

OLD = sorted(set(_moved.MOVED) - _moved.STILL_PUBLIC)


def _forget(old: str) -> None:
    """As in a fresh process: the alias not imported, its warning not given."""
    for name in [m for m in sys.modules if m == f"jaxcoll.{old}" or
                 m.startswith(f"jaxcoll.{old}.")]:
        del sys.modules[name]
    if isinstance(jaxcoll.__dict__.get(old), _moved.Alias):
        del jaxcoll.__dict__[old]
    _moved._warned.difference_update({w for w in _moved._warned
                                      if w.startswith(f"jaxcoll.{old}")})


@pytest.mark.parametrize("old", OLD)
def test_an_old_module_path_imports_and_warns_once(old):
    new = _moved.MOVED[old]
    _forget(old)
    with pytest.warns(DeprecationWarning, match=f"jaxcoll.{old} moved to {new}; .* removed in "
                      f"jaxcoll {_moved.REMOVED_IN}"):
        alias = importlib.import_module(f"jaxcoll.{old}")
    public = next(name for name in dir(importlib.import_module(new)) if not name.startswith("_")
                  and name not in _moved.NAMES_MOVED.get(old, {}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: the second import and every name are quiet
        assert getattr(alias, public) is getattr(importlib.import_module(new), public)
        importlib.import_module(f"jaxcoll.{old}")


def test_the_old_names_that_moved_elsewhere_and_the_package_attribute():
    for old, names in _moved.NAMES_MOVED.items():
        _forget(old)
        for name, where in names.items():
            with pytest.warns(DeprecationWarning, match=f"jaxcoll.{old}.{name} moved to "
                              f"{where}.{name}"):
                value = getattr(importlib.import_module(f"jaxcoll.{old}"), name)
            assert value is getattr(importlib.import_module(where), name)
    _forget("topology")
    with pytest.warns(DeprecationWarning, match="jaxcoll.topology moved"):
        assert jaxcoll.topology.switch is jaxcoll.analysis.topology.switch
    _forget("families")
    with pytest.warns(DeprecationWarning, match="jaxcoll.families.ring moved to "
                      "jaxcoll.ir.families.ring"):
        importlib.import_module("jaxcoll.families.ring")


def test_an_old_module_path_never_replaces_a_public_name_it_shares():
    """``jaxcoll.synthesize`` was a module's name and is the public function's: importing the
    old module leaves the function in its place (Python sets an imported submodule as its
    package's attribute)."""
    function = jaxcoll.synthesize
    _forget("synthesize")
    with pytest.warns(DeprecationWarning, match="jaxcoll.synthesize moved"):
        alias = importlib.import_module("jaxcoll.synthesize")
    assert jaxcoll.synthesize is function and alias.Synthesis is jaxcoll.Synthesis


def test_a_public_name_that_did_not_move_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module("jaxcoll.msccl") is jaxcoll.ir.msccl is jaxcoll.msccl
    with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
        jaxcoll.nosuch


@pytest.mark.subprocess_jax
@pytest.mark.parametrize("old, new", [("bench", "jaxcoll.tools.bench"),
                                      ("launch", "jaxcoll.tools.launch")])
def test_python_dash_m_of_an_old_module_runs_the_new_one_and_warns(old, new):
    result = subprocess.run([sys.executable, "-m", f"jaxcoll.{old}", "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and f"usage: python -m {new}" in result.stdout
    assert f"DeprecationWarning: jaxcoll.{old} moved to {new}" in result.stderr
