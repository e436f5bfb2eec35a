"""Binomial-tree algorithms (MPICH's defaults for small messages): ceil(log2 n) rounds.

In virtual ranks (v = (r - root) % n) the children of v are v + 2^k for every 2^k below v's
lowest set bit (every 2^k < n for the root), largest first; the subtree of child c = v + 2^k
is the range c .. c + 2^k - 1. Each round every rank that has the data passes it on, so the
number of ranks holding it doubles every round.

- broadcast: the data fans out down the tree. It can be pipelined in ``pieces`` chunks (see
  tree.py), but that does not pay: the root still sends all N bytes to each of its
  ceil(log2 n) children, one piece a round, so pieces only add rounds. The registry uses 1.
- reduce: the broadcast reversed, reducing.
- scatter: the root sends each child its whole subtree's chunks; that child does the same.
- gather: the scatter reversed: each rank collects its subtree's chunks and sends them up.
"""

from __future__ import annotations

from jaxcoll.ir.families.tree import relabel, rooted_broadcast
from jaxcoll.ir.per_rank import rounds
from jaxcoll.ir.schedules import Schedule, Transfer


def children(v: int, n: int) -> list[int]:
    """v + 2^k for every 2^k below v's lowest set bit (any 2^k for v = 0), largest first."""
    limit = v & -v if v else 1 << max(n - 1, 0).bit_length()  # children are v + 2^k, 2^k < limit
    steps = [1 << k for k in range(limit.bit_length() - 1)][::-1]  # 2^k < limit, descending
    return [v + step for step in steps if v + step < n]


def broadcast(n: int, root: int = 0, pieces: int = 1) -> Schedule:
    """Binomial broadcast from ``root``: ceil(log2 n) rounds when ``pieces`` is 1."""
    return rooted_broadcast("binomial broadcast", n, root, pieces, children)


def reduce(n: int, root: int = 0, pieces: int = 1) -> Schedule:
    """Binomial reduce into ``root``: the broadcast reversed, reducing."""
    return broadcast(n, root, pieces).reversed("binomial reduce", reduce=True)


def scatter(n: int, root: int = 0) -> Schedule:
    """Binomial scatter from ``root``: rank r ends with chunk r, in ceil(log2 n) rounds.

    Step 2^k, k = K-1 .. 0: every v that is a multiple of 2^(k+1) sends the chunks of the
    subtree v + 2^k .. v + 2^(k+1) - 1 to v + 2^k (virtual ranks v = (r - root) % n).
    """
    real = relabel(n, root)

    def sends(r, step):  # virtual rank v sends v + step the subtree v + step .. v + 2·step - 1
        v = (r - root) % n
        subtree = [real(u) for u in range(v + step, min(v + 2 * step, n))]
        return [Transfer(r, real(v + step), subtree, False)]

    def senders(step):  # the multiples of 2·step with a child at v + step
        return [real(v) for v in range(0, n, 2 * step) if v + step < n]

    steps = [1 << k for k in reversed(range(max(n - 1, 0).bit_length()))]
    return Schedule.build("binomial scatter", n, n_chunks=n,
                          rounds=rounds(n, steps, sends, active=senders))


def gather(n: int, root: int = 0) -> Schedule:
    """Binomial gather into ``root``: the scatter reversed."""
    return scatter(n, root).reversed("binomial gather", reduce=False)
