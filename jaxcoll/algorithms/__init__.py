"""The algorithm registry: for each primitive, the schedule builders by algorithm name.

Each builder takes the rank count ``n`` and returns a :class:`~jaxcoll.schedule.Schedule`.
``xla`` (the ``lax`` built-in) and ``auto`` (the library's choice) are not schedules; they are
handled in :mod:`jaxcoll.collectives`.
"""

from functools import lru_cache

from ..schedule import Schedule
from . import naive, ring

PRIMITIVES = ("allreduce", "reduce_scatter", "allgather")

SCHEDULES = {
    "allreduce": {"ring": ring.allreduce, "naive": naive.allreduce},
    "reduce_scatter": {"ring": ring.reduce_scatter, "naive": naive.reduce_scatter},
    "allgather": {"ring": ring.allgather, "naive": naive.allgather},
}


@lru_cache(maxsize=None)
def build_schedule(primitive: str, algorithm: str, n: int) -> Schedule:
    """The schedule of ``algorithm`` for ``primitive`` on ``n`` ranks (cached)."""
    return SCHEDULES[primitive][algorithm](n)
