"""jaxcoll: collective communication algorithms written with nothing but ``lax.ppermute``."""

from .collectives import (OPS, algorithms, allgather, allreduce, broadcast, gather, reduce,
                          reduce_scatter, ring_allgather, ring_allreduce, ring_reduce_scatter,
                          scatter, tree_allreduce, tree_broadcast)
from .schedule import Round, Schedule, Transfer

__version__ = "0.1.0"

__all__ = [
    "OPS", "Round", "Schedule", "Transfer", "algorithms", "allgather", "allreduce", "broadcast",
    "gather", "reduce", "reduce_scatter", "ring_allgather", "ring_allreduce",
    "ring_reduce_scatter", "scatter", "tree_allreduce", "tree_broadcast",
]
