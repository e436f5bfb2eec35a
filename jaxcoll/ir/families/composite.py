"""Large-message algorithms made by concatenating others (van de Geijn, Rabenseifner).

- broadcast ``scatter_allgather``: binomial scatter of n chunks from the root, then ring
  allgather. Each rank sends about 2(n-1)/n of the message instead of the whole message log n
  times: the bandwidth-optimal broadcast for large messages.
- reduce ``reduce_scatter_gather``: ring reduce_scatter (rank r ends with chunk r reduced), then
  binomial gather of the n chunks into the root.
"""

from jaxcoll.ir.families import binomial, ring
from jaxcoll.ir.schedules import Schedule


def scatter_allgather_broadcast(n: int, root: int = 0) -> Schedule:
    """Broadcast = binomial scatter + ring allgather."""
    return binomial.scatter(n, root) + ring.allgather(n)


def reduce_scatter_gather_reduce(n: int, root: int = 0) -> Schedule:
    """Reduce = ring reduce_scatter + binomial gather."""
    return ring.reduce_scatter(n) + binomial.gather(n, root)
