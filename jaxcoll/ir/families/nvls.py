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
"""

from __future__ import annotations

from jaxcoll.ir.schedules import Round, Schedule, ThroughSwitch


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
