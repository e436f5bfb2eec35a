"""Two-level algorithms for a tuple axis ``(outer, inner)`` such as ``("node", "gpu")``.

JAX numbers the ranks of a tuple axis row-major: rank (o, i) is ``o * inner + i``. Fast links
join the ranks of one outer group (a node's GPUs); slow links join the groups. Each level runs
a ring inside its groups, all groups at once, so only 1/inner of the data crosses slow links:

- reduce_scatter: ring reduce_scatter inside each node over "super-blocks" (super-block i =
  the blocks o * inner + i of every node o), then ring reduce_scatter across nodes among the
  ranks with the same i. Rank (o, i) ends with block o * inner + i. Same bytes as one flat ring,
  but (inner - 1) + (outer - 1) rounds instead of n - 1.
- allgather: the reduce_scatter's mirror: ring allgather across nodes, then inside each node.
- allreduce: reduce_scatter then allgather, i.e. reduce_scatter inside nodes, allreduce across
  nodes, allgather inside nodes (the scheme of Horovod's and NCCL's hierarchical allreduce).

The schedule is an ordinary schedule on n = outer * inner ranks: it is verified, costed and
drawn like any other, and the executor runs it over the tuple axis.
"""

from __future__ import annotations

from typing import Callable

from ..schedules import Schedule, Transfer
from . import ring


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


def _levels(shape: tuple[int, int]):
    """(inner rounds, outer rounds) lifters for an (outer, inner) mesh: each maps an
    inner- (outer-) rank ring schedule to rounds on all n ranks and n chunks."""
    outer, inner = shape
    rank = lambda o, i: o * inner + i  # noqa: E731
    nodes = [[rank(o, i) for i in range(inner)] for o in range(outer)]
    columns = [[rank(o, i) for o in range(outer)] for i in range(inner)]
    in_node = lambda s: _lifted(s, nodes, lambda _, i: [rank(o, i) for o in range(outer)])  # noqa: E731
    across = lambda s: _lifted(s, columns, lambda i, o: [rank(o, i)])  # noqa: E731
    return in_node, across


def _build(name: str, shape: tuple[int, int], rounds: list[list[Transfer]]) -> Schedule:
    n = shape[0] * shape[1]
    return Schedule.build(f"hierarchical {name} {shape[0]}x{shape[1]}", n, n_chunks=n,
                          rounds=rounds)


def reduce_scatter(shape: tuple[int, int]) -> Schedule:
    """Ring reduce_scatter inside nodes, then across them; rank r ends with block r."""
    in_node, across = _levels(shape)
    outer, inner = shape
    rounds = in_node(ring.reduce_scatter(inner)) + across(ring.reduce_scatter(outer))
    return _build("reduce_scatter", shape, rounds)


def allgather(shape: tuple[int, int]) -> Schedule:
    """Ring allgather across nodes, then inside them."""
    in_node, across = _levels(shape)
    outer, inner = shape
    rounds = across(ring.allgather(outer)) + in_node(ring.allgather(inner))
    return _build("allgather", shape, rounds)


def allreduce(shape: tuple[int, int]) -> Schedule:
    """Hierarchical reduce_scatter + hierarchical allgather: 2(inner-1) + 2(outer-1) rounds."""
    return reduce_scatter(shape) + allgather(shape)
