"""``auto``'s policy: which calibration prices a call given none, and which one ``auto`` ranks
a collective's algorithms with.

The one :func:`set_calibration` gave for this process's transport, else this machine's (timed
once and cached: jaxcoll/tools/calibration_cache.py), else the one shipped with jaxcoll. The
cost model sits below the code that measures and never imports it: importing jaxcoll installs
this policy into it (``model.use_defaults``).
"""

from __future__ import annotations

from jaxcoll.analysis import model
from jaxcoll.analysis.model import Calibration, shipped
from jaxcoll.tools import calibration_cache
from jaxcoll.tools.distributed import transport

_current: dict[str, Calibration] = {}  # set_calibration's, per backend


def calibration(backend: str | None = None) -> Calibration:
    """The calibration that prices a call given none, for ``backend``.

    The one set by :func:`set_calibration`, else this machine's cached one, else the one
    shipped with jaxcoll (cpu, gloo, gpu). Nothing is measured here; ``auto`` may measure
    first (:func:`for_auto`).

    Args:
      backend: ``"cpu"``, ``"gloo"``, ``"gpu"``, ... (default None: this process's
        transport, :func:`~jaxcoll.tools.distributed.transport`).

    Returns:
      The :class:`~jaxcoll.Calibration` — α, β, γ and the per-algorithm factors that
      :func:`jaxcoll.cost`, :func:`jaxcoll.choose` and ``auto`` price with.

    >>> calibration("cpu").backend
    'cpu'
    """
    backend = transport() if backend is None else backend
    if backend in _current:
        return _current[backend]
    return calibration_cache.cached(backend) or shipped(backend)


def for_auto(primitive: str, n: int) -> Calibration:
    """What ``auto`` ranks ``primitive`` on n ranks with.

    The one set by :func:`set_calibration`, else this machine's (measured now if it has none
    yet).

    Args:
      primitive: the collective,
        e.g. ``"allreduce"``.
      n: the number of ranks
        it runs on.

    Returns:
      The :class:`~jaxcoll.Calibration`.
    """
    backend = transport()
    if backend in _current:
        return _current[backend]
    return calibration_cache.for_auto(primitive, n)


def set_calibration(calibration_: Calibration) -> None:
    """Price calls given no calibration, and rank ``auto``'s algorithms, with this one.

    From now on, in this process, for the calibration's backend (``calibration_.backend``).

    Args:
      ``calibration_``: a :class:`~jaxcoll.Calibration`, e.g. the result of
        :func:`~jaxcoll.calibrate`.
    """
    _current[calibration_.backend] = calibration_


model.use_defaults(calibration, for_auto)
