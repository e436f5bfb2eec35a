"""Two-shot allreduce (vLLM's and flashinfer's custom allreduce, EQuARX's design): every rank
sends each block straight to the rank that owns it, the owner adds the n blocks, then the
owners' sums go round a ring allgather.

- reduce_scatter ``pairwise``: n-1 rounds; in round k rank r sends its chunk r + k to rank
  r + k, which adds it. Each value is sent once, unchanged: compressed, it is quantized once
  (at its source), where the ring re-quantizes the travelling partial sum at every hop.
- allreduce ``two_shot``: pairwise reduce_scatter + ring allgather: 2(n-1) rounds and the
  ring's 2(n-1)/n bytes per rank (on a fully connected network; on a ring of links each round
  k crosses k links). Compressed, each value is quantized at most twice (compression.py).
"""

from jaxcoll.ir.families import ring
from jaxcoll.ir.per_rank import rounds
from jaxcoll.ir.schedules import Schedule, Transfer


def pairwise_reduce_scatter(n: int) -> Schedule:
    """Rank r ends with chunk r reduced over all ranks, each chunk sent straight to its owner."""
    def sends(r, k):  # chunk r + k to its owner, rank r + k, which adds it
        return [Transfer(r, (r + k) % n, (r + k) % n, reduce=True)]

    return Schedule.build("pairwise reduce_scatter", n, n_chunks=n,
                          rounds=rounds(n, range(1, n), sends, symmetry="rotate"))


def allreduce(n: int) -> Schedule:
    """Two-shot allreduce = pairwise reduce_scatter + ring allgather."""
    return pairwise_reduce_scatter(n) + ring.allgather(n)
