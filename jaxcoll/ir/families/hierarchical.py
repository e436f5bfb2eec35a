"""Hierarchical algorithms for a tuple axis of k levels, outermost first: ``("node", "gpu")``,
``("pod", "node", "gpu")``, or the axes of a 3-D torus (the TPU's ring per dimension).

JAX numbers the ranks of a tuple axis row-major: on levels of sizes (s_0, ..., s_{k-1}), rank
(c_0, ..., c_{k-1}) is c_0·s_1···s_{k-1} + ... + c_{k-1}. A *line* of level l is the s_l ranks
that differ in coordinate l only (a node's GPUs, for the inner level of ("node", "gpu")). Each
level runs a ring inside each of its lines, all lines at once, on "super-blocks": ring chunk c
of a line is every block whose coordinate l is c and whose coordinates at the levels inside l
are the line's own (the outer ones take every value).

- reduce_scatter: a ring reduce_scatter per level, innermost first, each on what the previous
  one left: after level l a rank holds the blocks whose coordinates l..k-1 are its own, and
  after the outermost, rank r holds block r. Only 1/(s_{l+1}···s_{k-1}) of the data crosses
  level l's links. Same bytes as one flat ring, but sum(s_l - 1) rounds instead of n - 1.
- allgather: the reduce_scatter's mirror: a ring allgather per level, outermost first.
- allreduce: reduce_scatter then allgather. Two levels: reduce_scatter inside nodes, allreduce
  across nodes, allgather inside nodes (Horovod's and NCCL's hierarchical allreduce); one
  level: the ring.

The schedule is an ordinary schedule on n = s_0···s_{k-1} ranks: it is verified, costed and
drawn like any other, and the executor runs it over the tuple axis.
"""

from __future__ import annotations

from math import prod
from typing import Callable

import numpy as np

from jaxcoll.ir.families import ring
from jaxcoll.ir.schedules import Schedule, Transfer

Shape = tuple[int, ...]  # the levels' sizes, outermost first


def _lifted(schedule: Schedule, groups: list[list[int]],
            chunks_of: Callable[[int, int], list[int]]) -> list[list[Transfer]]:
    """``schedule`` run by every group at once: in group g, local rank j is ``groups[g][j]``
    and local chunk c is the chunks ``chunks_of(g, c)``."""
    def lift(g: int, t: Transfer) -> Transfer:
        chunks = [b for c in t.chunks for b in chunks_of(g, c)]
        into = [b for c in t.into for b in chunks_of(g, c)]
        return Transfer(groups[g][t.src], groups[g][t.dst], chunks, t.reduce, into=into)

    return [[lift(g, t) for g in range(len(groups)) for t in round_]
            for round_ in schedule.rounds]


def _level(shape: Shape, level: int, ring_schedule: Schedule) -> list[list[Transfer]]:
    """``ring_schedule`` (on shape[level] ranks) run along every line of ``level`` at once, on
    all n ranks and n chunks (see the module docstring)."""
    outer, inner = prod(shape[:level]), prod(shape[level + 1:])
    ranks = np.arange(prod(shape)).reshape(outer, shape[level], inner)  # rank (p, c, q)
    lines = [ranks[p, :, q].tolist() for p in range(outer) for q in range(inner)]
    return _lifted(ring_schedule, lines, lambda line, c: ranks[:, c, line % inner].tolist())


def _build(name: str, shape: Shape, rounds: list[list[Transfer]]) -> Schedule:
    n = prod(shape)
    return Schedule.build(f"hierarchical {name} {'x'.join(map(str, shape))}", n, n_chunks=n,
                          rounds=rounds)


def reduce_scatter(shape: Shape) -> Schedule:
    """A ring reduce_scatter per level, innermost first; rank r ends with block r."""
    rounds = [round_ for level in reversed(range(len(shape)))
              for round_ in _level(shape, level, ring.reduce_scatter(shape[level]))]
    return _build("reduce_scatter", shape, rounds)


def allgather(shape: Shape) -> Schedule:
    """A ring allgather per level, outermost first."""
    rounds = [round_ for level in range(len(shape))
              for round_ in _level(shape, level, ring.allgather(shape[level]))]
    return _build("allgather", shape, rounds)


def allreduce(shape: Shape) -> Schedule:
    """Hierarchical reduce_scatter + hierarchical allgather: 2·sum(s_l - 1) rounds."""
    return reduce_scatter(shape) + allgather(shape)
