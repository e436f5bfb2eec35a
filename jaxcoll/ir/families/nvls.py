"""NVLS: collectives reduced inside the NVSwitch (NVLink SHARP), as NCCL's NVLS algorithm runs
them on one node. Not registered: no XLA or Pallas lowering can reduce inside a switch, so
jaxcoll's executors refuse these schedules (:meth:`~jaxcoll.Schedule.refuse_in_switch`);
:func:`~jaxcoll.verify`, :func:`~jaxcoll.cost`, :func:`~jaxcoll.simulate` (both runtimes, on a
topology whose switch reduces: :func:`jaxcoll.analysis.systems.dgx` on H100 and later) and the
pictures take them.

NCCL (src/device/all_reduce.h, ``runRing`` beside ``runNvls``): each rank owns chunk ``r`` of
the buffer; with ``multimem.ld_reduce`` it loads chunk ``r`` from every rank, added up in the
switch (a reduce-scatter through the switch); with ``multimem.st`` it stores the sum to every
rank at once (an allgather by multicast), slice by slice. Each rank's port carries its whole
buffer up and one chunk of sums down, then that chunk up and every sum down: (n + 1)/n·N each
way, against the ring's 2(n − 1)/n·N, in one step instead of 2(n − 1).

Across nodes, NCCL's NVLS_TREE (src/device/all_reduce.h, ``runTreeSplit`` over the NVLS
connections): each node reduces through its own switch, GPU g loading share g of the node's
sum; the GPUs g of all nodes add their shares up and back down a double binary tree of nodes,
each over its own NIC; each GPU g stores the total of its share to its node's GPUs by
multicast (:func:`tree_allreduce`).
"""

from __future__ import annotations

from jaxcoll.ir.families.tree import _zip_rounds, heap_children
from jaxcoll.ir.schedules import Round, Schedule, ThroughSwitch, Transfer


def reduce_scatter(n: int) -> Schedule:
    """Reduce-scatter through the switch: rank r loads chunk r, reduced from every rank.

    Args:
      n: the number of ranks (the GPUs on one NVSwitch), an int >= 1.

    Returns:
      The one-round :class:`~jaxcoll.Schedule` of ``n`` chunks, collective
      ``"reduce_scatter"``.
    """
    ranks = range(n)
    load = Round([], switched=[ThroughSwitch(ranks, r, r) for r in ranks])  # multimem.ld_reduce
    return Schedule("nvls reduce_scatter", n, n, (load,), collective="reduce_scatter")


def allgather(n: int) -> Schedule:
    """Allgather by multicast: rank r stores its chunk r to every rank at once.

    Args:
      n: the number of ranks (the GPUs on one NVSwitch), an int >= 1.

    Returns:
      The one-round :class:`~jaxcoll.Schedule` of ``n`` chunks, collective ``"allgather"``.
    """
    ranks = range(n)
    store = Round([], switched=[ThroughSwitch(r, r, ranks) for r in ranks])  # multimem.st
    return Schedule("nvls allgather", n, n, (store,), collective="allgather")


def allreduce(n: int) -> Schedule:
    """Allreduce through the switch, as NCCL's NVLS kernel runs it: one round.

    Rank r loads chunk r added up in the switch and stores the sum to every rank at once
    (``multimem.ld_reduce`` then ``multimem.st`` on each slice, back to back: the sum passes
    through rank r, ``via=r``): :func:`reduce_scatter` and :func:`allgather` fused, each port
    carrying (n + 1)/n of the buffer each way.

    Args:
      n: the number of ranks (the GPUs on one NVSwitch), an int >= 1.

    Returns:
      The one-round :class:`~jaxcoll.Schedule` of ``n`` chunks, collective ``"allreduce"``.

    Examples:
      >>> import jaxcoll
      >>> nvls = allreduce(4)
      >>> print(nvls)  # doctest: +NORMALIZE_WHITESPACE
      nvls allreduce: 4 ranks, 4 chunks, 1 rounds   (src->dst [chunks],
      {senders}->switch->{receivers}, '+' reduce, '=' copy)
        round 0 | {0,1,2,3}->switch->0->switch->{0,1,2,3} [0]+
      {0,1,2,3}->switch->1->switch->{0,1,2,3} [1]+  {0,1,2,3}->switch->2->switch->{0,1,2,3} [2]+
      {0,1,2,3}->switch->3->switch->{0,1,2,3} [3]+
      >>> jaxcoll.verify(nvls)
    """
    ranks = range(n)
    both = Round([], switched=[ThroughSwitch(ranks, r, ranks, via=r) for r in ranks])
    return Schedule("nvls allreduce", n, n, (both,), collective="allreduce")


def tree_allreduce(n_nodes: int, gpus: int, pieces: int = 1) -> Schedule:
    """NVLS tree allreduce, as NCCL's NVLS_TREE runs it across nodes: inside each node through
    its switch, across nodes a double binary tree per GPU's share.

    Rank ``node·gpus + g``; GPU g's share of the buffer is its ``2·pieces`` chunks from
    ``2·pieces·g``. Round 0: in every node, GPU g loads its share reduced over the node's GPUs
    through the node's switch (:func:`reduce_scatter`'s ``multimem.ld_reduce``, on shares).
    Then, for every g at once, the GPUs g of all nodes reduce the share's first ``pieces``
    chunks up the heap tree of nodes rooted at node 0 and the other ``pieces`` up the mirrored
    one rooted at the last node (NCCL's double binary tree,
    :func:`jaxcoll.ir.families.tree.double_tree_allreduce` with nodes for ranks), pipelined
    piece by piece, and broadcast the totals back down. Last round: GPU g stores its share's
    total to its node's GPUs by multicast (:func:`allgather`'s ``multimem.st``). On one node
    the trees are empty: the reduce-scatter and the allgather, not fused as
    :func:`allreduce` is.

    Args:
      n_nodes: the nodes, an int >= 1, each with its own switch that reduces.
      gpus: the GPUs of a node (on its switch), an int >= 1.
      pieces: the pieces each tree cuts its half of a share into, an int >= 1 (as the
        registered trees' ``pieces``: a tree forwards piece p while p + 1 is on its way).

    Returns:
      The :class:`~jaxcoll.Schedule` on ``n_nodes·gpus`` ranks of ``2·pieces·gpus``
      chunks, collective ``"allreduce"``.

    Examples:
      >>> import jaxcoll
      >>> tree = tree_allreduce(2, 2)
      >>> print(tree)  # doctest: +NORMALIZE_WHITESPACE
      nvls_tree allreduce: 4 ranks, 4 chunks, 4 rounds   (src->dst [chunks],
      {senders}->switch->{receivers}, '+' reduce, '=' copy)
        round 0 | {0,1}->switch->{0} [0,1]+  {0,1}->switch->{1} [2,3]+
      {2,3}->switch->{2} [0,1]+  {2,3}->switch->{3} [2,3]+
        round 1 | 2->0 [0]+  0->2 [1]+  3->1 [2]+  1->3 [3]+
        round 2 | 0->2 [0]=  2->0 [1]=  1->3 [2]=  3->1 [3]=
        round 3 | {0}->switch->{0,1} [0,1]=  {1}->switch->{0,1} [2,3]=
      {2}->switch->{2,3} [0,1]=  {3}->switch->{2,3} [2,3]=
      >>> jaxcoll.verify(tree)
    """
    n, half = n_nodes * gpus, pieces
    nodes = [range(k * gpus, (k + 1) * gpus) for k in range(n_nodes)]
    shares = [range(2 * half * g, 2 * half * (g + 1)) for g in range(gpus)]
    load = Round([], switched=[ThroughSwitch(node, shares[g], k * gpus + g)
                               for k, node in enumerate(nodes) for g in range(gpus)])
    down = []  # every g's two trees of nodes broadcasting, side by side
    for g in range(gpus):
        tree_a = _down_levels(n_nodes, lambda v, g=g: v * gpus + g, shares[g][:half])
        tree_b = _down_levels(n_nodes, lambda v, g=g: (n_nodes - 1 - v) * gpus + g,
                              shares[g][half:])
        down = _zip_rounds(down, _zip_rounds(tree_a, tree_b))
    broadcast = Schedule.build("nvls_tree broadcast", n, n_chunks=2 * half * gpus, rounds=down)
    across = broadcast.reversed("nvls_tree reduce", reduce=True) + broadcast
    store = Round([], switched=[ThroughSwitch(k * gpus + g, shares[g], node)
                                for k, node in enumerate(nodes) for g in range(gpus)])
    return Schedule("nvls_tree allreduce", n, 2 * half * gpus, (load, *across.rounds, store),
                    collective="allreduce")


def _down_levels(n: int, real, pieces) -> list[list[Transfer]]:
    """A heap tree of n virtual ranks (root 0) broadcasting ``pieces`` (chunk ids) as NCCL's
    tree loop does: a rank sends each piece to all its children at once, one piece a round,
    piece j at depth d in round d + j; ``real(v)`` is the rank virtual rank v is."""
    depth = [(v + 1).bit_length() - 1 for v in range(n)]
    rounds = [[] for _ in range(max(depth, default=0) + len(pieces))]
    for v in range(n):
        for j, piece in enumerate(pieces):
            rounds[depth[v] + j] += [Transfer(real(v), real(c), piece, reduce=False)
                                     for c in heap_children(v, n)]
    return [r for r in rounds if r]
