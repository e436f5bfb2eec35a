"""The names 0.5.0 renamed so that each says what it is (issue 48), kept working as aliases
that warn.

Each old name issues a :class:`DeprecationWarning` naming its new one (CHANGELOG.md's
"Deprecated"), and goes away in version :data:`REMOVED_IN`, with the import paths that 0.4.0
moved (``jaxcoll/_moved.py``).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Callable

REMOVED_IN = "0.6.0"  # the version that removes the deprecated names and import paths


def warn(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is now ``new``.

    Args:
      old: the deprecated name,
        as a user writes it.
      new: the name to write instead.
      stacklevel: the frame the warning is attributed to, counted from this function's
        (3: the caller of the function that calls this one); past it, frames of
        :mod:`dataclasses` (``dataclasses.replace`` calling the constructor) are skipped too.
    """
    frame = sys._getframe(stacklevel - 1)
    while frame is not None and frame.f_globals.get("__name__") == "dataclasses":
        frame, stacklevel = frame.f_back, stacklevel + 1
    warnings.warn(f"{old} is renamed {new}; the old name is deprecated and will be removed in "
                  f"jaxcoll {REMOVED_IN}", DeprecationWarning, stacklevel=stacklevel)


def module_getattr(module: str, renamed: dict[str, str],
                   namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module's ``__getattr__`` (PEP 562) that reads each old name as its new one, and warns.

    Args:
      module: the module's name,
        for the warning and the error.
      renamed: each old name,
        and the new name in ``namespace`` it reads.
      namespace: the module's globals.

    Returns:
      The function to assign to the module's ``__getattr__``; it raises AttributeError for a
      name that is neither.
    """
    def __getattr__(name: str) -> Any:
        new = renamed.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warn(f"{module}.{name}", f"{module}.{new}")
        return namespace[new]

    return __getattr__
