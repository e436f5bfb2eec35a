"""jaxcoll: collective communication algorithms written with nothing but ``lax.ppermute``."""

from .collectives import (OPS, algorithms, allgather, allreduce, broadcast, gather, reduce,
                          reduce_scatter, ring_allgather, ring_allreduce, ring_reduce_scatter,
                          schedule, scatter, tree_allreduce, tree_broadcast)
from .model import Cost, cost
from .pictures import draw
from .schedules import Round, Schedule, Transfer
from .symbolic import ScheduleError, verify

__version__ = "0.1.0"

__all__ = [
    "OPS", "Cost", "Round", "Schedule", "ScheduleError", "Transfer", "algorithms", "allgather",
    "allreduce", "broadcast", "cost", "draw", "gather", "reduce", "reduce_scatter", "ring_allgather",
    "ring_allreduce", "ring_reduce_scatter", "scatter", "schedule", "tree_allreduce",
    "tree_broadcast", "verify",
]
