"""The import paths the fourth edition moved (docs/guide/layout.md), kept working as aliases
that warn.

``import jaxcoll.topology``, ``from jaxcoll.records import RECORDS``, ``jaxcoll.model.cost``
and ``python -m jaxcoll.bench`` work as they did before the package took its layer folders;
each old path issues one :class:`DeprecationWarning` naming its new one, and goes away in
version :data:`REMOVED_IN` (CHANGELOG.md). An alias is a module of its own that reads every
name through from the module that moved (and the few names that moved elsewhere from where
they went), so the new modules carry nothing for the old paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings

from jaxcoll.ir._renamed import REMOVED_IN  # and the names 0.5.0 renamed

MOVED = {  # old module under jaxcoll -> where it is now
    **{name: f"jaxcoll.ir.{name}" for name in ("records", "schedules", "symbolic", "msccl",
                                                "families")},
    **{name: f"jaxcoll.analysis.{name}" for name in ("model", "topology", "systems",
                                                      "synthesize", "compression")},
    **{name: f"jaxcoll.lowering.{name}" for name in (
        "plan", "ids", "validate", "execute", "stream", "primitives", "pallas_kernel",
        "traced_ids", "codec", "references")},
    **{name: f"jaxcoll.tools.{name}" for name in ("bench", "check", "timing",
                                                   "calibration_cache", "launch",
                                                   "distributed", "pictures")},
}
NAMES_MOVED = {  # old module -> {name: the module it is in now}
    "model": {"calibration": "jaxcoll.tools.auto", "set_calibration": "jaxcoll.tools.auto",
              "transport": "jaxcoll.tools.distributed"},
    "records": {"Layout": "jaxcoll.lowering.layout"},
    "bench": {name: "jaxcoll.tools.console" for name in ("parse_size", "format_size",
                                                         "Progress")},
}
STILL_PUBLIC = {"msccl"}  # jaxcoll.msccl is a public name today: its import path stays

_warned: set[str] = set()


def new_path(fullname: str) -> str | None:
    """Where ``jaxcoll.OLD[.rest]`` is now, or None if it is not an old path."""
    parts = fullname.split(".")
    if len(parts) < 2 or parts[0] != "jaxcoll" or parts[1] not in MOVED:
        return None
    return ".".join([MOVED[parts[1]], *parts[2:]])


def warn(old: str, new: str, *, main: bool = False, stacklevel: int = 3) -> None:
    """One DeprecationWarning per old path and process, attributed to the caller
    ``stacklevel`` frames up (importlib's own frames not counted); ``main``: to ``__main__``,
    so Python's default filters show it for ``python -m OLD``."""
    if old in _warned:
        return
    _warned.add(old)
    message = (f"{old} moved to {new}; the old path is deprecated and will be removed in "
               f"jaxcoll {REMOVED_IN}")
    if main:
        warnings.warn_explicit(message, DeprecationWarning, "<python -m>", 0, module="__main__")
    else:
        warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)


class Alias(types.ModuleType):
    """``jaxcoll.OLD``: every name read through from the module that moved (names that moved
    elsewhere from their new module, with their own warning)."""

    def __init__(self, old: str, new: str):
        super().__init__(old, f"Deprecated alias of {new} (jaxcoll {REMOVED_IN} removes it).")
        self._new = new

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        moved_to = NAMES_MOVED.get(self.__name__.split(".")[1], {}).get(name)
        if moved_to is not None and self.__name__.count(".") == 1:
            warn(f"{self.__name__}.{name}", f"{moved_to}.{name}")
            return getattr(importlib.import_module(moved_to), name)
        return getattr(importlib.import_module(self._new), name)

    def __dir__(self):
        return sorted(set(dir(importlib.import_module(self._new)))
                      | set(NAMES_MOVED.get(self.__name__.split(".")[1], {})))


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``jaxcoll.OLD`` (and below it) where nothing else does: an :class:`Alias`, or,
    for ``python -m jaxcoll.OLD``, the new module's code."""

    def find_spec(self, fullname, path=None, target=None):
        new = new_path(fullname)
        if new is None:
            return None
        found = importlib.util.find_spec(new)
        if found is None:
            return None
        return importlib.machinery.ModuleSpec(
            fullname, self, is_package=found.submodule_search_locations is not None)

    def create_module(self, spec):
        new = new_path(spec.name)
        if spec.name in {f"jaxcoll.{name}" for name in STILL_PUBLIC}:
            return importlib.import_module(new)  # the same module as the attribute
        warn(spec.name, new)
        return Alias(spec.name, new)

    def exec_module(self, module) -> None:
        """Nothing to run: the alias reads through."""

    def get_code(self, fullname):
        """What ``python -m jaxcoll.OLD`` runs: the new module's code."""
        new = new_path(fullname)
        warn(fullname, new, main=True)
        return importlib.util.find_spec(new).loader.get_code(new)


FINDER = Finder()


class Package(types.ModuleType):
    """``jaxcoll``'s module type: an alias never takes the place of a public name it shares
    (importing ``jaxcoll.synthesize``, the old module, leaves ``jaxcoll.synthesize`` the
    function; Python sets a submodule as its package's attribute once it is imported)."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, Alias) and name in self.__dict__:
            return
        super().__setattr__(name, value)


def install(package: types.ModuleType) -> None:
    """Put the finder after Python's own (once), so only paths nothing else finds reach it,
    and keep ``package``'s public names from its aliases (:class:`Package`)."""
    if FINDER not in sys.meta_path:
        sys.meta_path.append(FINDER)
    package.__class__ = Package


def attribute(name: str):
    """``jaxcoll.OLD`` read as an attribute of the package (``jaxcoll.topology.switch``)."""
    if name not in MOVED:
        raise AttributeError(f"module 'jaxcoll' has no attribute {name!r}")
    warn(f"jaxcoll.{name}", MOVED[name], stacklevel=4)  # the caller of jaxcoll.__getattr__
    return importlib.import_module(f"jaxcoll.{name}")
