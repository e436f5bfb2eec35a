"""Log-step algorithms by recursive doubling and halving (MPICH; Thakur, Rabenseifner and
Gropp, "Optimization of Collective Communication Operations in MPICH", 2005).

Ranks pair up across a distance d: in a round rank v exchanges with v XOR d, and d doubles
(1, 2, 4, ...) or halves (..., 4, 2, 1), so after log2 n rounds every rank has heard from all.

- recursive_doubling allreduce: both partners send their whole buffer and add what they get.
  log2 n rounds, log2 n · N bytes sent per rank: latency-optimal, for small messages.
- halving_doubling reduce_scatter (recursive halving): d = n/2, ..., 1. Rank v keeps the half of
  its current blocks that its side of the pair owns in the end and sends the other half, which
  its partner adds into its own copy. log2 n rounds, (n-1)/n · N bytes.
- doubling allgather (``recursive_doubling`` and ``halving_doubling`` allgather are this one):
  d = 1, ..., n/2; each rank sends every block it holds, so what it holds doubles.
  log2 n rounds, (n-1)/n · N bytes (N: the whole output).
- halving_doubling allreduce (Rabenseifner): halving reduce_scatter, then doubling allgather:
  2 log2 n rounds and the ring's 2(n-1)/n · N bytes.

Rank counts that are not powers of two, MPICH's way: p is the largest power of two <= n. The
n - p extra ranks p + i first fold into partner i (their data is added into it, or for an
allgather their block is copied to it); the p ranks run the algorithm, rank i standing for
rank p + i's blocks too; at the end rank i unfolds the result back to rank p + i. That is two
rounds more than log2 p, and none when n is a power of two.
"""

from __future__ import annotations

from typing import Callable

from jaxcoll.ir.schedules import Round, Schedule, Symmetry, Transfer


def _power_below(n: int) -> int:
    """The largest power of two <= n."""
    return 1 << (n.bit_length() - 1)


def _blocks(ranks, n: int) -> list[int]:
    """The blocks a set of the p = _power_below(n) ranks stands for: each v's own block v and,
    if v has a folded partner p + v, that one too."""
    p = _power_below(n)
    return sorted(b for v in ranks for b in (v, p + v) if b < n)


def _fold(n: int, chunks: Callable[[int], list[int]], reduce: bool) -> list[list[Transfer]]:
    """One round (none if n is a power of two): extra rank p + i sends ``chunks(p + i)`` to i."""
    p = _power_below(n)
    return [[Transfer(p + i, i, chunks(p + i), reduce) for i in range(n - p)]] if n > p else []


def _unfold(n: int, chunks: Callable[[int], list[int]]) -> list[list[Transfer]]:
    """One round (none if n is a power of two): rank i copies ``chunks(p + i)`` to p + i."""
    p = _power_below(n)
    return [[Transfer(i, p + i, chunks(p + i), False) for i in range(n - p)]] if n > p else []


def _distances(n: int) -> list[int]:
    """1, 2, 4, ..., p/2: the partner distances of the p ranks."""
    p = _power_below(n)
    return [1 << k for k in range(p.bit_length() - 1)]


def _exchanges(n: int, d: int, blocks: Callable[[int], list[int]], reduce: bool,
               whole: bool = False):
    """One round of the p ranks: v sends ``blocks(v)`` to v ^ d. Where n = p, given by rank 0's
    transfer and the symmetry v -> v ^ r: rank r's blocks are rank 0's with the bits of r at
    and above d flipped (which keeps each run of d blocks in order); ``whole``: every rank
    sends the same chunk ids (the whole buffer)."""
    p = _power_below(n)
    if n == p:
        mask = 0 if whole else (n - 1) & ~(d - 1)
        return Round([Transfer(0, d, blocks(0), reduce)], Symmetry("xor", n, mask=mask))
    return [Transfer(v, v ^ d, blocks(v), reduce) for v in range(p)]


def _halving(n: int) -> list:
    """Recursive halving on p ranks: d = p/2 .. 1; v sends its partner the blocks of the
    partner's half of v's current group (the ranks u with u // 2d == v // 2d)."""
    p = _power_below(n)
    return [_exchanges(n, d, lambda v, d=d: _blocks(
                [u for u in range(p) if u // (2 * d) == v // (2 * d) and u & d != v & d], n),
                reduce=True)
            for d in reversed(_distances(n))]


def _doubling(n: int) -> list:
    """Recursive doubling on p ranks: d = 1 .. p/2; v sends its partner the blocks of its
    current group (the ranks u with u // d == v // d)."""
    p = _power_below(n)
    return [_exchanges(n, d, lambda v, d=d: _blocks([u for u in range(p) if u // d == v // d],
                                                    n), reduce=False)
            for d in _distances(n)]


def allreduce(n: int) -> Schedule:
    """Recursive-doubling allreduce: partners swap and add whole buffers, log2 n rounds."""
    whole = lambda _: [0]  # noqa: E731
    exchanges = [_exchanges(n, d, lambda _: [0], reduce=True, whole=True)
                 for d in _distances(n)]
    rounds = _fold(n, whole, reduce=True) + exchanges + _unfold(n, whole)
    return Schedule.build("recursive_doubling allreduce", n, n_chunks=1, rounds=rounds)


def reduce_scatter(n: int) -> Schedule:
    """Recursive-halving reduce_scatter: rank r ends with block r summed, log2 n rounds."""
    rounds = (_fold(n, lambda _: list(range(n)), reduce=True) + _halving(n)
              + _unfold(n, lambda extra: [extra]))
    return Schedule.build("halving reduce_scatter", n, n_chunks=n, rounds=rounds)


def allgather(n: int) -> Schedule:
    """Recursive-doubling allgather: what each rank holds doubles every round, log2 n rounds."""
    others = lambda extra: [b for b in range(n) if b != extra]  # noqa: E731
    rounds = _fold(n, lambda extra: [extra], reduce=False) + _doubling(n) + _unfold(n, others)
    return Schedule.build("doubling allgather", n, n_chunks=n, rounds=rounds)


def halving_doubling_allreduce(n: int) -> Schedule:
    """Rabenseifner's allreduce: recursive-halving reduce_scatter + recursive-doubling
    allgather, 2 log2 n rounds, 2(n-1)/n · N bytes per rank."""
    everything = lambda _: list(range(n))  # noqa: E731
    rounds = (_fold(n, everything, reduce=True) + _halving(n) + _doubling(n)
              + _unfold(n, everything))
    return Schedule.build("halving_doubling allreduce", n, n_chunks=n, rounds=rounds)
