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
drawn like any other, and the executor runs it over the tuple axis. Every rank runs rank 0's
rings moved by its coordinates, level by level: the rounds are stored as rank 0's sends and a
"grid" symmetry of the levels' sizes (:class:`~jaxcoll.ir.schedules.Symmetry`), derived and
checked by :func:`~jaxcoll.ir.per_rank.rounds`, so 4,096 nodes of 8 GPUs are cheap.
"""

from __future__ import annotations

from math import prod

import numpy as np

from jaxcoll.ir.per_rank import rounds
from jaxcoll.ir.schedules import Schedule, Transfer

Shape = tuple[int, ...]  # the levels' sizes, outermost first


def _level(shape: Shape, level: int, reduce: bool) -> list:
    """The ring of ``level`` run along every line of it at once (the module docstring): the
    reduce-scatter's rounds (``reduce``) or the allgather's."""
    outer, size, inner = prod(shape[:level]), shape[level], prod(shape[level + 1:])
    ranks = np.arange(prod(shape)).reshape(outer, size, inner)  # rank (p, c, q): c in the line

    def sends(r, step):  # the ring's chunk (c - step - 1) % size, or (c - step) % size, as the
        p, c, q = np.unravel_index(r, ranks.shape)  # super-block of blocks (any p', that c, q)
        ring_chunk = (c - step - 1) % size if reduce else (c - step) % size
        return [Transfer(r, int(ranks[p, (c + 1) % size, q]), ranks[:, ring_chunk, q].tolist(),
                         reduce)]

    # every rank is rank 0 moved coordinate by coordinate; written out, the rounds list the
    # ranks line by line, (p, q), then along each line
    return rounds(prod(shape), range(size - 1), sends, symmetry="grid", sizes=tuple(shape))


def _build(name: str, shape: Shape, rounds_: list) -> Schedule:
    n = prod(shape)
    return Schedule.build(f"hierarchical {name} {'x'.join(map(str, shape))}", n, n_chunks=n,
                          rounds=rounds_)


def reduce_scatter(shape: Shape) -> Schedule:
    """A ring reduce_scatter per level, innermost first; rank r ends with block r."""
    rounds_ = [round_ for level in reversed(range(len(shape)))
               for round_ in _level(shape, level, reduce=True)]
    return _build("reduce_scatter", shape, rounds_)


def allgather(shape: Shape) -> Schedule:
    """A ring allgather per level, outermost first."""
    rounds_ = [round_ for level in range(len(shape))
               for round_ in _level(shape, level, reduce=False)]
    return _build("allgather", shape, rounds_)


def allreduce(shape: Shape) -> Schedule:
    """Hierarchical reduce_scatter + hierarchical allgather: 2·sum(s_l - 1) rounds."""
    return reduce_scatter(shape) + allgather(shape)
