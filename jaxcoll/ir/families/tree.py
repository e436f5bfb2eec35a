"""Binary-tree algorithms (the seed's section 3.3, completed) and NCCL's double binary tree.

The seed's tree is a binary heap: rank r's parent is (r - 1) // 2 and its children are 2r + 1
and 2r + 2. It is rooted anywhere by relabelling: virtual rank v = (r - root) % n.

Every tree algorithm here is a *fan-out* (broadcast), and its mirror image in time is the
*fan-in* (reduce: the same transfers, reversed and turned around, reducing). The fan-out is
pipelined: the message is cut into ``pieces`` chunks and each rank forwards piece p as soon as
it has it, one send per round, children in order — so a rank sends piece p to its children
while piece p + 1 is still on its way to it.

Rounds, one send per rank per round, pieces = 1: a heap tree's broadcast takes at most
2 x depth rounds (depth = floor(log2 n)): a left child hears one round after its parent, a right
child two rounds after. Each extra piece adds two rounds (the root sends every piece twice).
"""

from __future__ import annotations

from typing import Callable

from jaxcoll.ir.per_rank import as_soon_as_held
from jaxcoll.ir.schedules import Schedule, Transfer


def heap_children(v: int, n: int) -> list[int]:
    """The seed's binary heap: children 2v+1 and 2v+2 (those below n), left first."""
    return [c for c in (2 * v + 1, 2 * v + 2) if c < n]


def fan_out(name: str, n: int, children: Callable[[int], list[int]], real: Callable[[int], int],
            pieces: list[int]) -> list[list[Transfer]]:
    """Pipelined broadcast rounds down a tree of virtual ranks 0..n-1 rooted at 0.

    What rank v does, as NCCL's tree loop writes it: for each piece, receive it, then send it
    to each of its children (``children(v)``, in order); each send goes as soon as v holds the
    piece, one a round (:func:`~jaxcoll.ir.per_rank.as_soon_as_held`). ``real(v)`` maps a
    virtual rank to a real one; each of ``pieces`` is one chunk.
    """
    def program(v):
        return [(piece, child) for piece in pieces for child in children(v)]

    return as_soon_as_held(n, program, real, pieces, name)


def relabel(n: int, root: int) -> Callable[[int], int]:
    """Virtual rank v (the root is 0) -> real rank (v + root) % n."""
    return lambda v: (v + root) % n


def rooted_broadcast(name: str, n: int, root: int, pieces: int,
                     children: Callable[[int, int], list[int]]) -> Schedule:
    """A broadcast from ``root`` down the tree ``children(v, n)`` (virtual ranks, root 0),
    pipelined in ``pieces`` chunks."""
    rounds = fan_out(name, n, lambda v: children(v, n), relabel(n, root), list(range(pieces)))
    return Schedule.build(name, n, n_chunks=pieces, rounds=rounds)


def broadcast(n: int, root: int = 0, pieces: int = 1) -> Schedule:
    """Heap-tree broadcast from ``root``, pipelined in ``pieces`` chunks."""
    return rooted_broadcast("tree broadcast", n, root, pieces, heap_children)


def reduce(n: int, root: int = 0, pieces: int = 1) -> Schedule:
    """Heap-tree reduce into ``root``: the broadcast reversed, reducing."""
    return broadcast(n, root, pieces).reversed("tree reduce", reduce=True)


def allreduce(n: int, pieces: int = 1) -> Schedule:
    """Tree allreduce = tree reduce into rank 0 + tree broadcast from rank 0."""
    return reduce(n, 0, pieces) + broadcast(n, 0, pieces)


def _zip_rounds(a: list[list[Transfer]], b: list[list[Transfer]]) -> list[list[Transfer]]:
    """Two schedules' rounds run side by side (the executor splits any rank's double send)."""
    longest = max(len(a), len(b))
    a, b = a + [[]] * (longest - len(a)), b + [[]] * (longest - len(b))
    return [ra + rb for ra, rb in zip(a, b)]


def double_tree_allreduce(n: int, pieces: int = 1) -> Schedule:
    """Two heap trees, each reducing then broadcasting half of the data (NCCL's double tree).

    Tree A is the heap on ranks 0..n-1 (root 0); tree B the heap on the mirrored ranks
    n-1..0 (root n-1). A's interior ranks are r < n // 2 and B's are r >= n - n // 2: no rank
    is interior in both, so each rank is a leaf in at least one tree and the forwarding work is
    shared out. Tree A carries chunks 0..pieces-1, tree B chunks pieces..2*pieces-1.
    """
    children = lambda v: heap_children(v, n)  # noqa: E731
    tree_a = fan_out("double_tree", n, children, lambda v: v, list(range(pieces)))
    tree_b = fan_out("double_tree", n, children, lambda v: n - 1 - v,
                     list(range(pieces, 2 * pieces)))
    down = Schedule.build("double_tree broadcast", n, n_chunks=2 * pieces,
                          rounds=_zip_rounds(tree_a, tree_b))
    return down.reversed("double_tree reduce", reduce=True) + down
