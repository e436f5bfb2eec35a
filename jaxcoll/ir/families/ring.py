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
"""

from jaxcoll.ir.schedules import Schedule, Transfer, rotating


def _ring_rounds(n: int, first_chunk: int, reduce: bool, direction: int = 1,
                 chunk_id=lambda c: c) -> list[list[Transfer]]:
    """The ring's rounds, as rank 0's transfers (every rank r does the same moved by r).
    Clockwise (direction 1), in round ``step`` rank r sends chunk (r - step + first_chunk) % n
    to rank r + 1. Counter-clockwise (-1) is its mirror image (rank r -> -r, chunk c -> -c):
    rank r sends chunk (r + step - first_chunk) % n to r - 1. ``chunk_id`` maps the ring's
    chunk c to the buffer's."""
    return [[Transfer(0, direction % n, chunk_id((-direction * (step - first_chunk)) % n),
                      reduce)]
            for step in range(n - 1)]


def reduce_scatter(n: int) -> Schedule:
    """Ring reduce-scatter: rank r ends with chunk r reduced over all ranks."""
    rounds = rotating(_ring_rounds(n, first_chunk=-1, reduce=True), n)
    return Schedule.build("ring reduce_scatter", n, n_chunks=n, rounds=rounds)


def allgather(n: int) -> Schedule:
    """Ring allgather: rank r starts with chunk r and ends with every chunk."""
    rounds = rotating(_ring_rounds(n, first_chunk=0, reduce=False), n)
    return Schedule.build("ring allgather", n, n_chunks=n, rounds=rounds)


def allreduce(n: int) -> Schedule:
    """Ring allreduce = ring reduce_scatter + ring allgather."""
    return reduce_scatter(n) + allgather(n)


def _both_ways(name: str, n: int, first_chunk: int, reduce: bool) -> Schedule:
    """Two rings at once on 2n chunks: clockwise on chunks 2c, counter-clockwise on 2c + 1
    (block c of the buffer is chunks 2c and 2c + 1)."""
    clockwise = _ring_rounds(n, first_chunk, reduce, 1, lambda c: 2 * c)
    counter = _ring_rounds(n, first_chunk, reduce, -1, lambda c: 2 * c + 1)
    rounds = rotating([cw + ccw for cw, ccw in zip(clockwise, counter)], n, stride=2)
    return Schedule.build(name, n, n_chunks=2 * n, rounds=rounds)


def bidirectional_reduce_scatter(n: int) -> Schedule:
    """Half of every block goes round each way: n-1 rounds of two sends per rank."""
    return _both_ways("bidirectional_ring reduce_scatter", n, first_chunk=-1, reduce=True)


def bidirectional_allgather(n: int) -> Schedule:
    """Half of every block goes round each way: n-1 rounds of two sends per rank."""
    return _both_ways("bidirectional_ring allgather", n, first_chunk=0, reduce=False)


def bidirectional_allreduce(n: int) -> Schedule:
    """Bidirectional reduce_scatter + bidirectional allgather: 2(n-1) rounds, both directions
    of every link busy, each carrying half of the ring's bytes."""
    return bidirectional_reduce_scatter(n) + bidirectional_allgather(n)
