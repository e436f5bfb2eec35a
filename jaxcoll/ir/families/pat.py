"""PAT, "Parallel Aggregated Trees" (NCCL 2.23; Jeaugey, "PAT: a new algorithm for all-gather
and reduce-scatter operations at scale", arXiv 2506.20252): allgather and reduce_scatter in
ceil(log2 n) rounds for any n, like Bruck's, with the far transfers small and the large ones
near.

Bruck's allgather (bruck.py) doubles the distance every round, so its last round sends half of
the data the farthest, n/2 ranks away. PAT runs the distances the other way, farthest first:
each rank's block travels down a binomial tree whose first edge is the longest, and the rounds
that move many blocks move them to near ranks. With L = ceil(log2 n):

    allgather, d = 2^(L-1), ..., 2, 1:
        rank r holds the blocks r - u for u = 0, 2d, 4d, ... (< n)
        it sends those with u + d < n to rank r + d, which copies them
    (then r holds r - u for every multiple u of d below n: after d = 1, every block)

    reduce_scatter: the allgather run backwards, reducing: d = 1, 2, ..., 2^(L-1);
        rank r sends rank r - d its partial sums of the blocks r - d - u (u = 0, 2d, ... with
        u + d < n), which it adds into its own; rank r ends with block r summed

Block x reaches rank x + t along t's binary digits, highest first (x -> x + 2^(L-1) -> ...),
so the n trees are the same binomial tree rotated: n parallel trees. Offsets t >= n are
skipped, so every n works without folding. Each rank sends (n-1)/n · N bytes, the bound.

What NCCL does beyond this: PAT "aggregates" a tree's steps only as far as its staging buffers
allow (its ``aggFactor``: how many blocks one network step carries). For small messages that is
every block of a round, the schedule above, in log2 n steps; for large ones each round's blocks
go in several steps, pipelined over the dimensions, so the buffers stay a logarithmic size
whatever the message. jaxcoll's ppermute moves whole buffers, so it runs the fully aggregated
schedule at every size; NCCL's peers are the same (send to r + 2^k for allgather, to r - 2^k for
reduce-scatter; its ``ncclTransportPatConnect``) and so are the trees. NCCL also runs PAT only
with one GPU per node; here it runs on any axis.
"""

from __future__ import annotations

from jaxcoll.ir.per_rank import rounds
from jaxcoll.ir.schedules import Schedule, Transfer


def _distances(n: int) -> list[int]:
    """2^(L-1), ..., 2, 1 with L = ceil(log2 n): farthest first (none for n = 1)."""
    return [1 << k for k in reversed(range(max(n - 1, 0).bit_length()))]


def allgather(n: int) -> Schedule:
    """PAT allgather: distances halve, data doubles; ceil(log2 n) rounds for any n."""
    def sends(r, d):  # to r + d, the blocks r - u it holds (u = 0, 2d, 4d, ... with u + d < n)
        return [Transfer(r, (r + d) % n, [(r - u) % n for u in range(0, n - d, 2 * d)], False)]

    return Schedule.build("pat allgather", n, n_chunks=n,
                          rounds=rounds(n, _distances(n), sends, symmetry="rotate"))


def reduce_scatter(n: int) -> Schedule:
    """PAT reduce_scatter: the allgather backwards, reducing; ceil(log2 n) rounds for any n."""
    return allgather(n).reversed("pat reduce_scatter", reduce=True)
