"""Bruck's algorithms (Bruck, Ho, Kipnis, Upfal and Weathersby, "Efficient algorithms for
all-to-all communications in multiport message-passing systems", 1997): ceil(log2 n) rounds for
any n, no folding.

- allgather: in round k (d = 2^k) every rank r sends the blocks it holds, r .. r+d-1, to rank
  r - d; so rank r then holds r .. r+2d-1 (mod n). The last round sends only the n - d blocks
  still missing. Bruck's paper keeps blocks in relative order and rotates them at the end; here
  chunk ids are absolute, so the rotation is just the choice of ids.
- alltoall (Bruck's index algorithm): the block rank s holds for rank s + j (its "offset" j)
  travels along the binary digits of j: in round k every rank sends all the blocks whose offset
  has bit k set to rank r + 2^k. Each round moves about half of the data, so the bytes grow to
  ceil(log2 n)/2 · N against the pairwise algorithm's N, in ceil(log2 n) rounds instead of n-1.

The alltoall buffer (see symbolic.py) is 2n chunks: chunk c < n is the block for rank c, chunk
n + i the block received from rank i. A block that will still move sits in the first half in
chunk (holder + offset) % n; after its last move it lands in chunk n + source of its receiver.
So every rank holds one block per offset at any time, and no round overwrites a block that has
yet to leave.
"""

from __future__ import annotations

from jaxcoll.ir.per_rank import rounds
from jaxcoll.ir.schedules import Schedule, Transfer


def _distances(n: int) -> list[int]:
    """1, 2, 4, ... < n: one per round."""
    return [1 << k for k in range(max(n - 1, 0).bit_length())]


def allgather(n: int) -> Schedule:
    """Bruck allgather: ceil(log2 n) rounds for any n."""
    def sends(r, d):  # to r - d, the blocks it holds, r .. r + d - 1 (the last round: those
        return [Transfer(r, (r - d) % n,  # still missing there, n - d of them)
                         [(r + k) % n for k in range(min(d, n - d))], False)]

    return Schedule.build("bruck allgather", n, n_chunks=n,
                          rounds=rounds(n, _distances(n), sends, symmetry="rotate"))


def alltoall(n: int) -> Schedule:
    """Bruck alltoall: ceil(log2 n) rounds for any n; block offsets travel bit by bit."""
    def chunk(holder: int, offset: int, arrived: bool) -> int:
        return n + (holder - offset) % n if arrived else (holder + offset) % n

    def sends(r, d):  # to r + d, every block whose offset j has bit d set; it lands in its
        offsets = [j for j in range(1, n) if j & d]  # receiver's chunk n + source (j < 2d)
        return [Transfer(r, (r + d) % n, [chunk(r, j, False) for j in offsets], False,
                         into=[chunk((r + d) % n, j, j < 2 * d) for j in offsets])]

    return Schedule.build("bruck alltoall", n, n_chunks=2 * n,
                          rounds=rounds(n, _distances(n), sends, symmetry="rotate"))
