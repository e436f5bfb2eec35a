"""The algorithm registry: for each primitive, the schedule builders by algorithm name.

Each builder takes the rank count ``n`` (and ``root`` if the algorithm is rooted, ``pieces`` if
it is pipelined) and returns a :class:`~jaxcoll.ir.schedules.Schedule`. ``xla`` (the ``lax``
built-in) and ``auto`` (the library's choice) are not schedules; they are handled in
:mod:`jaxcoll.collectives`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Callable

from jaxcoll.ir import _renamed
from jaxcoll.ir.families import (
    binomial,
    bruck,
    chain,
    composite,
    hierarchical,
    naive,
    pat,
    recursive,
    ring,
    swing,
    tree,
    two_shot,
)
from jaxcoll.ir.schedules import Schedule

# Pipelined trees cut messages into pieces of about this size, at most MAX_PIECES. Each piece
# costs the tree's rounds again in latency (α), so pieces are large: only big messages
# pipeline (the measurement: bench/RESULTS.md, "Numbers that were in code comments").
PIECE_BYTES = 16 << 20
MAX_PIECES = 8


@dataclass(frozen=True)
class Algorithm:
    build: Callable[..., Schedule]
    rooted: bool = False  # build(n, root)
    pipelined: bool = False  # build(..., pieces=k)
    # build((s_0, ..., s_k-1)): needs a tuple axis, one name per level (any number of levels)
    two_level: bool = False
    # auto considers it; two_shot and pairwise only for compressed data (uncompressed they are
    # the ring's bytes and rounds), chain never yet: measured slower than scatter_allgather
    # where it should pipeline, which no calibration of it tells auto (bench/RESULTS.md)
    auto: bool = True
    auto_when_compressed: bool = True  # auto considers it for compressed data (auto or not)
    model_pieces: bool = False  # pipelined in as many pieces as the model finds fastest


_ROOTED = dict(rooted=True)
_PIPELINED = dict(rooted=True, pipelined=True)
_CHAIN = dict(rooted=True, pipelined=True, model_pieces=True, auto=False)

SCHEDULES: dict[str, dict[str, Algorithm]] = {
    "allreduce": {"ring": Algorithm(ring.allreduce), "naive": Algorithm(naive.allreduce),
                  "tree": Algorithm(tree.allreduce, pipelined=True),
                  "double_tree": Algorithm(tree.double_tree_allreduce, pipelined=True),
                  "recursive_doubling": Algorithm(recursive.allreduce),
                  "halving_doubling": Algorithm(recursive.halving_doubling_allreduce),
                  "bidirectional_ring": Algorithm(ring.bidirectional_allreduce),
                  "hierarchical": Algorithm(hierarchical.allreduce, two_level=True),
                  "two_shot": Algorithm(two_shot.allreduce, auto=False),
                  "swing": Algorithm(swing.allreduce)},
    "reduce_scatter": {"ring": Algorithm(ring.reduce_scatter),
                       "naive": Algorithm(naive.reduce_scatter),
                       "halving_doubling": Algorithm(recursive.reduce_scatter),
                       "bidirectional_ring": Algorithm(ring.bidirectional_reduce_scatter),
                       "pairwise": Algorithm(two_shot.pairwise_reduce_scatter, auto=False),
                       "pat": Algorithm(pat.reduce_scatter),
                       "hierarchical": Algorithm(hierarchical.reduce_scatter, two_level=True)},
    "allgather": {"ring": Algorithm(ring.allgather), "naive": Algorithm(naive.allgather),
                  "recursive_doubling": Algorithm(recursive.allgather),
                  "halving_doubling": Algorithm(recursive.allgather),  # its doubling half
                  "bruck": Algorithm(bruck.allgather),
                  "pat": Algorithm(pat.allgather),
                  "bidirectional_ring": Algorithm(ring.bidirectional_allgather),
                  "hierarchical": Algorithm(hierarchical.allgather, two_level=True)},
    "alltoall": {"naive": Algorithm(naive.alltoall), "bruck": Algorithm(bruck.alltoall)},
    "broadcast": {"naive": Algorithm(naive.broadcast, **_ROOTED),
                  "tree": Algorithm(tree.broadcast, **_PIPELINED),
                  "binomial": Algorithm(binomial.broadcast, **_ROOTED),
                  "scatter_allgather": Algorithm(composite.scatter_allgather_broadcast,
                                                 **_ROOTED),
                  "chain": Algorithm(chain.broadcast, **_CHAIN)},
    "reduce": {"naive": Algorithm(naive.reduce, **_ROOTED),
               "tree": Algorithm(tree.reduce, **_PIPELINED),
               "binomial": Algorithm(binomial.reduce, **_ROOTED),
               "reduce_scatter_gather": Algorithm(composite.reduce_scatter_gather_reduce,
                                                  **_ROOTED),
               "chain": Algorithm(chain.reduce, **_CHAIN)},
    "gather": {"naive": Algorithm(naive.gather, **_ROOTED),
               "binomial": Algorithm(binomial.gather, **_ROOTED)},
    "scatter": {"naive": Algorithm(naive.scatter, **_ROOTED),
                "binomial": Algorithm(binomial.scatter, **_ROOTED)},
}
COLLECTIVES = tuple(SCHEDULES)  # the collectives that have schedules, in the registry's order
# PRIMITIVES, its name before 0.5.0, reads it with a DeprecationWarning
__getattr__ = _renamed.module_getattr(__name__, {"PRIMITIVES": "COLLECTIVES"}, globals())


def pipeline_pieces(nbytes: int) -> int:
    """Pieces a pipelined tree cuts an ``nbytes`` message into: ceil(nbytes / 16 MiB),
    between 1 and 8.

    Binomial trees take ``pieces`` too but are not pipelined by default: the root must send
    every piece to each of its ceil(log2 n) children, so its traffic stays ceil(log2 n)·N
    whatever the piece count, and each extra piece only adds latency.
    """
    return min(MAX_PIECES, max(1, -(-nbytes // PIECE_BYTES)))


def two_level(primitive: str, algorithm: str) -> bool:
    """True if the algorithm runs on a tuple axis, one name per level, and is built from the
    levels' sizes."""
    entry = SCHEDULES[primitive].get(algorithm)
    return bool(entry and entry.two_level)


@lru_cache(maxsize=None)
def build_schedule(primitive: str, algorithm: str, n: int | tuple[int, ...], root: int = 0,
                   pieces: int = 1) -> Schedule:
    """The schedule of ``algorithm`` for ``primitive`` on ``n`` ranks (cached), labelled with
    the primitive and root it serves. ``n`` is the levels' sizes, outermost first, for a
    hierarchical one."""
    entry = SCHEDULES[primitive][algorithm]
    kwargs = {}
    if entry.rooted:
        kwargs["root"] = root
    if entry.pipelined:
        kwargs["pieces"] = pieces
    return replace(entry.build(n, **kwargs), collective=primitive, root=root)
