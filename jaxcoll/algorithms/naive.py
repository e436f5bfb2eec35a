"""Naive algorithms through one root (the seed's "Reduce then Broadcast").

Everyone sends to rank 0 one after another, rank 0 combines, then rank 0 sends the result to
everyone one after another: 2(n-1) rounds, and rank 0's link carries all of the traffic. This is
the baseline the seed's "ring is ~4x faster" is measured against.
"""

from ..schedule import Schedule, Transfer

ROOT = 0


def _in_turn(transfer, n: int) -> list[list[Transfer]]:
    """One round per non-root rank, in rank order: round k holds transfer(k-th rank)."""
    return [[transfer(rank)] for rank in range(n) if rank != ROOT]


def allreduce(n: int) -> Schedule:
    """Naive allreduce: all ranks reduce into rank 0 in turn, then rank 0 sends to each."""
    everything = range(1)
    rounds = (_in_turn(lambda r: Transfer(r, ROOT, everything, reduce=True), n)
              + _in_turn(lambda r: Transfer(ROOT, r, everything, reduce=False), n))
    return Schedule.build("naive allreduce", n, n_chunks=1, rounds=rounds)


def reduce_scatter(n: int) -> Schedule:
    """Naive reduce_scatter: all ranks reduce every chunk into rank 0, which sends chunk r to r."""
    everything = range(n)
    rounds = (_in_turn(lambda r: Transfer(r, ROOT, everything, reduce=True), n)
              + _in_turn(lambda r: Transfer(ROOT, r, r, reduce=False), n))
    return Schedule.build("naive reduce_scatter", n, n_chunks=n, rounds=rounds)


def allgather(n: int) -> Schedule:
    """Naive allgather: rank 0 collects chunk r from each rank r, then sends all chunks to each."""
    everything = range(n)
    rounds = (_in_turn(lambda r: Transfer(r, ROOT, r, reduce=False), n)
              + _in_turn(lambda r: Transfer(ROOT, r, everything, reduce=False), n))
    return Schedule.build("naive allgather", n, n_chunks=n, rounds=rounds)
