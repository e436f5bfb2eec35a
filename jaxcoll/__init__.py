"""jaxcoll: collective communication algorithms written with nothing but ``lax.ppermute``."""

from jaxcoll.collectives import (BUCKET_BYTES, OPS, algorithms, allgather, allreduce,
                          allreduce_with_feedback, alltoall,
                          broadcast, gather, reduce, reduce_scatter, ring_allgather, ring_allreduce,
                          ring_reduce_scatter, schedule, scatter, tree_allreduce, tree_broadcast)
from jaxcoll import lax  # lax's collectives by lax's names: `from jaxcoll import lax`
from jaxcoll.ir import msccl  # MSCCL's XML algorithms in and out
from jaxcoll.lowering.pallas_kernel import Pallas  # executor=Pallas(interpret=...): the second executor
from jaxcoll.overlap import allgather_fold, allgather_matmul, matmul_reduce_scatter, reduce_scatter_from
from jaxcoll.analysis.compression import Compress
from jaxcoll.analysis.model import (Bounds, Calibration, Cost, bounds, calibration, choose, cost, explain,
                    set_calibration)
from jaxcoll.tools.pictures import draw
from jaxcoll.ragged import ragged_alltoall
from jaxcoll.ir.schedules import Round, Schedule, Symmetry, Transfer
from jaxcoll.ir.symbolic import ScheduleError, verify
from jaxcoll.analysis.synthesize import Synthesis, synthesize
from jaxcoll.tools.timing import calibrate
from jaxcoll.analysis.topology import Simulation, Topology, simulate

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
