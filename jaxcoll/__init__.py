"""jaxcoll: collective communication algorithms written with nothing but ``lax.ppermute``."""

from .collectives import (BUCKET_BYTES, OPS, algorithms, allgather, allreduce,
                          allreduce_with_feedback, alltoall,
                          broadcast, gather, reduce, reduce_scatter, ring_allgather, ring_allreduce,
                          ring_reduce_scatter, schedule, scatter, tree_allreduce, tree_broadcast)
from . import lax  # lax's collectives by lax's names: `from jaxcoll import lax`
from . import msccl  # MSCCL's XML algorithms in and out
from .pallas_kernel import Pallas  # executor=Pallas(interpret=...): the second executor
from .overlap import allgather_fold, allgather_matmul, matmul_reduce_scatter, reduce_scatter_from
from .compression import Compress
from .model import (Bounds, Calibration, Cost, bounds, calibration, choose, cost, explain,
                    set_calibration)
from .pictures import draw
from .ragged import ragged_alltoall
from .schedules import Round, Schedule, Symmetry, Transfer
from .symbolic import ScheduleError, verify
from .synthesize import Synthesis, synthesize
from .timing import calibrate
from .topology import Simulation, Topology, simulate

__version__ = "0.1.0"

__all__ = [
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
