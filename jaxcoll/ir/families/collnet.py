"""CollNet: allreduce reduced inside the network's switches (InfiniBand SHARP), as NCCL's
CollNet Direct runs it across nodes. Not registered: no XLA or Pallas lowering can reduce
inside a switch, so jaxcoll's executors refuse it
(:meth:`~jaxcoll.Schedule.refuse_in_switch`); :func:`~jaxcoll.verify`, :func:`~jaxcoll.cost`,
:func:`~jaxcoll.simulate` (both runtimes, on a topology whose fabric reduces:
:func:`jaxcoll.analysis.topology.nodes` or :func:`jaxcoll.analysis.systems.cluster` with
``sharp=True``) and the pictures take it.

NCCL (src/device/all_reduce.h, ``runCollNetDirect``): inside a node the GPUs scatter the
buffer to each other directly, each GPU adding up its share of the node's data; each GPU
sends its share through its NIC into the fabric, whose switches add the shares of every node
and send the total back down to each of them (SHARP); the GPUs then gather the totals inside
the node. Across nodes each NIC carries its share once each way, whatever the node count:
the network's part takes one step, not a ring's 2(nodes − 1) or a tree's 2·log2(nodes).
"""

from __future__ import annotations

from jaxcoll.ir.schedules import Round, Schedule, ThroughSwitch, Transfer


def allreduce(n_nodes: int, gpus: int) -> Schedule:
    """CollNet Direct allreduce: a direct reduce-scatter in each node, each GPU's share
    reduced across nodes in the fabric's switches, a direct allgather in each node.

    Rank ``node·gpus + g``; chunk g is GPU g's share. Round 0: every GPU sends every other
    GPU of its node that one's share, which it adds. Round 1: for every g, the GPUs g of all
    nodes send share g up into the fabric, which adds them and sends the total back down to
    each (:class:`~jaxcoll.ir.schedules.ThroughSwitch`). Round 2: every GPU sends its
    share's total to every other GPU of its node.

    Args:
      n_nodes: the nodes, an int >= 1, whose NICs' fabric reduces.
      gpus: the GPUs of a node, an int >= 1, each with its NIC's way into the fabric.

    Returns:
      The three-round :class:`~jaxcoll.Schedule` on ``n_nodes·gpus`` ranks of ``gpus``
      chunks, collective ``"allreduce"``.

    Examples:
      >>> import jaxcoll
      >>> direct = allreduce(2, 2)
      >>> print(direct)  # doctest: +NORMALIZE_WHITESPACE
      collnet allreduce: 4 ranks, 2 chunks, 3 rounds   (src->dst [chunks],
      {senders}->switch->{receivers}, '+' reduce, '=' copy)
        round 0 | 0->1 [1]+  1->0 [0]+  2->3 [1]+  3->2 [0]+
        round 1 | {0,2}->switch->{0,2} [0]+  {1,3}->switch->{1,3} [1]+
        round 2 | 0->1 [0]=  1->0 [1]=  2->3 [0]=  3->2 [1]=
      >>> jaxcoll.verify(direct)
    """
    nodes = [range(k * gpus, (k + 1) * gpus) for k in range(n_nodes)]
    scatter = [Transfer(r, node[g], g, reduce=True)
               for node in nodes for r in node for g in range(gpus) if node[g] != r]
    through = [ThroughSwitch([node[g] for node in nodes], g, [node[g] for node in nodes])
               for g in range(gpus)]
    gather = [Transfer(node[g], r, g, reduce=False)
              for node in nodes for g in range(gpus) for r in node if node[g] != r]
    return Schedule("collnet allreduce", n_nodes * gpus, gpus,
                    (Round(scatter), Round([], switched=through), Round(gather)),
                    collective="allreduce")
