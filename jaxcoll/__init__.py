"""jaxcoll: collective communication algorithms written with nothing but ``lax.ppermute``.

The package in layers, each importing only those before it (tests/test_layers.py holds them to
it): ``ir`` (schedules and what they must do), ``analysis`` (their costs on paper, no JAX),
``lowering`` (schedules run as JAX programs), the public API here at the top (``collectives``,
``packing``, ``sharded``, ``lax``, ``ragged``, ``overlap``), ``tools`` (what measures, checks, draws and runs commands).
This module gathers the public names.
"""

import sys as _sys  # the namespace holds the public names only
from importlib import metadata as _metadata

from jaxcoll import _moved  # the import paths the fourth edition moved, as warning aliases
from jaxcoll import lax  # lax's collectives by lax's names: `from jaxcoll import lax`
from jaxcoll.analysis.compression import Compress
from jaxcoll.analysis.model import Bounds, Calibration, Cost, bounds, choose, cost, explain
from jaxcoll.analysis.synthesize import Synthesis, synthesize
from jaxcoll.analysis.topology import Simulation, Topology, simulate
from jaxcoll.collectives import (
                          BUCKET_BYTES,
                          OPS,
                          algorithms,
                          allgather,
                          allreduce,
                          allreduce_with_feedback,
                          alltoall,
                          broadcast,
                          gather,
                          reduce,
                          reduce_scatter,
                          ring_allgather,
                          ring_allreduce,
                          ring_reduce_scatter,
                          scatter,
                          schedule,
                          tree_allreduce,
                          tree_broadcast,
)
from jaxcoll.ir import msccl  # MSCCL's XML algorithms in and out
from jaxcoll.ir.schedules import Round, Schedule, Symmetry, Transfer
from jaxcoll.ir.symbolic import ScheduleError, verify
from jaxcoll.lowering.pallas_kernel import (
                          Pallas,  # executor=Pallas(interpret=...): the second executor
)
from jaxcoll.overlap import (
                          allgather_fold,
                          allgather_matmul,
                          matmul_reduce_scatter,
                          reduce_scatter_from,
)
from jaxcoll.ragged import ragged_alltoall
from jaxcoll.tools.auto import calibration, set_calibration  # and installs auto's policy
from jaxcoll.tools.pictures import draw
from jaxcoll.tools.timing import calibrate


def _version() -> str:
    """The installed distribution's version (``"0+unknown"`` for a source tree never
    installed)."""
    try:
        return _metadata.version("jaxcoll")
    except _metadata.PackageNotFoundError:
        return "0+unknown"


#: jaxcoll's version (PEP 440), read from the package's metadata; CHANGELOG.md says what each
#: version changed.
__version__ = _version()

__all__ = [
    "__version__",
    "BUCKET_BYTES", "OPS", "algorithms", "allgather", "allgather_fold", "allgather_matmul",
    "allreduce", "allreduce_with_feedback", "alltoall", "broadcast", "Compress",
    "Bounds", "bounds", "calibrate", "Calibration",
    "calibration", "choose", "Cost", "cost", "draw", "explain", "gather", "lax",
    "matmul_reduce_scatter", "msccl", "Pallas",
    "reduce", "reduce_scatter", "reduce_scatter_from", "ring_allgather", "ring_allreduce",
    "ring_reduce_scatter", "ragged_alltoall", "Round",
    "scatter", "Schedule", "schedule", "ScheduleError", "set_calibration", "Simulation",
    "simulate", "Symmetry", "Synthesis", "synthesize", "Topology", "Transfer",
    "tree_allreduce", "tree_broadcast", "verify",
]

_moved.install(_sys.modules[__name__])


def __getattr__(name: str):
    """``jaxcoll.topology`` and the other modules the fourth edition moved, as warning aliases
    (``jaxcoll._moved``)."""
    return _moved.attribute(name)
