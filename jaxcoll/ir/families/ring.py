"""Ring algorithms (the seed's section 3.1-3.2; Gloo's allreduce_ring.h, Baidu's ring allreduce).

Ranks form the ring 0 -> 1 -> ... -> n-1 -> 0 and the buffer is cut into n chunks. Every round
each rank sends one chunk to its right neighbour, so every link is busy every round.

- reduce_scatter: n-1 rounds. In round ``step`` rank r sends chunk (r - step - 1) % n and its
  neighbour adds it into its own copy. The seed sends (r - step) % n, which leaves rank r owning
  chunk r + 1; starting one chunk earlier leaves rank r owning chunk r, as ``psum_scatter`` does.
- allgather: n-1 rounds. Rank r starts with chunk r; in round ``step`` it forwards chunk
  (r - step) % n, which its neighbour copies.
- allreduce: reduce_scatter followed by allgather: 2(n-1) rounds, 2(n-1)/n of the data sent per
  rank, whatever n.
- bidirectional_ring: the data is split in two and one ring runs each way at once, so both
  directions of every link carry data (NCCL's rings use both directions the same way). Same
  rounds and bytes per rank; on full-duplex links each direction carries half.

Each is written as what rank r sends in a step; every rank does rank 0's moved r ranks on, which
the rounds store once (:mod:`jaxcoll.ir.per_rank`).
"""

from jaxcoll.ir.per_rank import rounds
from jaxcoll.ir.schedules import Schedule, Transfer


def reduce_scatter(n: int) -> Schedule:
    """Ring reduce-scatter: rank r ends with chunk r reduced over all ranks."""
    def sends(r, step):  # chunk (r - step - 1) % n to the right, where it is added
        return [Transfer(r, (r + 1) % n, (r - step - 1) % n, reduce=True)]

    return Schedule.build("ring reduce_scatter", n, n_chunks=n,
                          rounds=rounds(n, range(n - 1), sends, symmetry="rotate"))


def allgather(n: int) -> Schedule:
    """Ring allgather: rank r starts with chunk r and ends with every chunk."""
    def sends(r, step):  # chunk (r - step) % n to the right, where it is copied
        return [Transfer(r, (r + 1) % n, (r - step) % n, reduce=False)]

    return Schedule.build("ring allgather", n, n_chunks=n,
                          rounds=rounds(n, range(n - 1), sends, symmetry="rotate"))


def allreduce(n: int) -> Schedule:
    """Ring allreduce = ring reduce_scatter + ring allgather."""
    return reduce_scatter(n) + allgather(n)


def _both_ways(name: str, n: int, first: int, reduce: bool) -> Schedule:
    """Two rings at once on 2n chunks: block c of the buffer is chunks 2c (it goes clockwise,
    as the ring above) and 2c + 1 (counter-clockwise, the mirror image: rank r sends block
    (r + step - first) % n to r - 1). ``first``: -1 for the reduce-scatter, 0 the allgather."""
    def sends(r, step):
        return [Transfer(r, (r + 1) % n, 2 * ((r - step + first) % n), reduce),
                Transfer(r, (r - 1) % n, 2 * ((r + step - first) % n) + 1, reduce)]

    return Schedule.build(name, n, n_chunks=2 * n,
                          rounds=rounds(n, range(n - 1), sends, symmetry="rotate", name=name))


def bidirectional_reduce_scatter(n: int) -> Schedule:
    """Half of every block goes round each way: n-1 rounds of two sends per rank."""
    return _both_ways("bidirectional_ring reduce_scatter", n, first=-1, reduce=True)


def bidirectional_allgather(n: int) -> Schedule:
    """Half of every block goes round each way: n-1 rounds of two sends per rank."""
    return _both_ways("bidirectional_ring allgather", n, first=0, reduce=False)


def bidirectional_allreduce(n: int) -> Schedule:
    """Bidirectional reduce_scatter + bidirectional allgather: 2(n-1) rounds, both directions
    of every link busy, each carrying half of the ring's bytes."""
    return bidirectional_reduce_scatter(n) + bidirectional_allgather(n)
