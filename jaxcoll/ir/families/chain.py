"""Pipelined chain (NCCL's ring broadcast): the ranks in a line from the root, the message cut
into ``pieces`` chunks, each rank passing piece p on as soon as it has it.

- broadcast: round t, the rank at distance i from the root sends piece t - i to the next one:
  n - 2 + pieces rounds of N/pieces bytes, (n - 2 + pieces)(α + N/pieces·β), which approaches
  the bandwidth bound N·β as pieces grows (scatter_allgather: 1.75·N·β at n = 8). The model
  picks pieces = sqrt((n-2)·N·β/α) (model.py, ``chain_pieces``), the minimum of that time.
- reduce: the broadcast reversed, reducing: partial sums flow down the line into the root.
"""

from __future__ import annotations

from jaxcoll.ir.families.tree import rooted_broadcast
from jaxcoll.ir.schedules import Schedule


def broadcast(n: int, root: int = 0, pieces: int = 1) -> Schedule:
    """Chain broadcast from ``root`` (ranks root, root+1, ... in a line), in ``pieces`` pieces."""
    return rooted_broadcast("chain broadcast", n, root, pieces,
                            lambda v, n: [v + 1] if v + 1 < n else [])


def reduce(n: int, root: int = 0, pieces: int = 1) -> Schedule:
    """Chain reduce into ``root``: the broadcast reversed, reducing."""
    return broadcast(n, root, pieces).reversed("chain reduce", reduce=True)
