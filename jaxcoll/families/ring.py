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
"""

from ..schedules import Schedule, Transfer


def _ring(name: str, n: int, first_chunk: int, reduce: bool) -> Schedule:
    # In round `step`, rank r sends chunk (r - step + first_chunk) % n to rank r + 1.
    rounds = [[Transfer(r, (r + 1) % n, (r - step + first_chunk) % n, reduce) for r in range(n)]
              for step in range(n - 1)]
    return Schedule.build(name, n, n_chunks=n, rounds=rounds)


def reduce_scatter(n: int) -> Schedule:
    """Ring reduce-scatter: rank r ends with chunk r reduced over all ranks."""
    return _ring("ring reduce_scatter", n, first_chunk=-1, reduce=True)


def allgather(n: int) -> Schedule:
    """Ring allgather: rank r starts with chunk r and ends with every chunk."""
    return _ring("ring allgather", n, first_chunk=0, reduce=False)


def allreduce(n: int) -> Schedule:
    """Ring allreduce = ring reduce_scatter + ring allgather."""
    return reduce_scatter(n) + allgather(n)
