"""Naive algorithms through one root, one rank at a time (the seed's "Reduce then Broadcast").

The root talks to every other rank in turn, so there are n-1 rounds per phase and the root's
link carries all of the traffic. This is the baseline the seed's "ring is ~4x faster" is
measured against. The unrooted collectives go through rank 0. AllToAll has no root: its naive
form is the pairwise exchange, each rank sending to each other rank directly, one per round.
"""

from jaxcoll.ir.per_rank import rounds
from jaxcoll.ir.schedules import Schedule, Transfer


def _in_turn(transfer, n: int, root: int = 0) -> list[list[Transfer]]:
    """The root's loop: one round per rank k other than ``root``, in rank order, holding
    ``transfer(k)`` (the root's send to k, or k's to the root)."""
    return [[transfer(k)] for k in range(n) if k != root]


def broadcast(n: int, root: int = 0) -> Schedule:
    """Naive broadcast: ``root`` sends the whole message to each rank in turn (n-1 rounds)."""
    rounds = _in_turn(lambda r: Transfer(root, r, 0, reduce=False), n, root)
    return Schedule.build("naive broadcast", n, n_chunks=1, rounds=rounds)


def reduce(n: int, root: int = 0) -> Schedule:
    """Naive reduce: each rank in turn reduces its message into ``root`` (n-1 rounds)."""
    rounds = _in_turn(lambda r: Transfer(r, root, 0, reduce=True), n, root)
    return Schedule.build("naive reduce", n, n_chunks=1, rounds=rounds)


def gather(n: int, root: int = 0) -> Schedule:
    """Naive gather: each rank r in turn sends its chunk r to ``root`` (n-1 rounds)."""
    rounds = _in_turn(lambda r: Transfer(r, root, r, reduce=False), n, root)
    return Schedule.build("naive gather", n, n_chunks=n, rounds=rounds)


def scatter(n: int, root: int = 0) -> Schedule:
    """Naive scatter: ``root`` sends chunk r to each rank r in turn (n-1 rounds)."""
    rounds = _in_turn(lambda r: Transfer(root, r, r, reduce=False), n, root)
    return Schedule.build("naive scatter", n, n_chunks=n, rounds=rounds)


def allreduce(n: int) -> Schedule:
    """Naive allreduce = naive reduce into rank 0 + naive broadcast from rank 0."""
    return reduce(n) + broadcast(n)


def reduce_scatter(n: int) -> Schedule:
    """Naive reduce_scatter: all ranks reduce every chunk into rank 0, then it scatters them."""
    everything = tuple(range(n))  # one tuple that every transfer shares
    reduce_all = _in_turn(lambda r: Transfer(r, 0, everything, reduce=True), n)
    return Schedule.build("naive reduce", n, n_chunks=n, rounds=reduce_all) + scatter(n)


def allgather(n: int) -> Schedule:
    """Naive allgather: rank 0 gathers chunk r from each rank r, then sends all chunks to each."""
    everything = tuple(range(n))
    send_all = _in_turn(lambda r: Transfer(0, r, everything, reduce=False), n)
    return gather(n) + Schedule.build("naive broadcast", n, n_chunks=n, rounds=send_all)


def alltoall(n: int) -> Schedule:
    """Pairwise alltoall: in round k (1..n-1) rank r sends its block for rank r + k straight
    there, into the chunk kept for data from r (the 2n-chunk layout of symbolic.py)."""
    def sends(r, k):  # its block for rank r + k, into the chunk kept for data from r
        return [Transfer(r, (r + k) % n, (r + k) % n, False, into=n + r)]

    return Schedule.build("naive alltoall", n, n_chunks=2 * n,
                          rounds=rounds(n, range(1, n), sends, symmetry="rotate"))
