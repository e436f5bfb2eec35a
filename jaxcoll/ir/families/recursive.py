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

from jaxcoll.ir.per_rank import rounds
from jaxcoll.ir.schedules import Schedule, Transfer


def _power_below(n: int) -> int:
    """The largest power of two <= n."""
    return 1 << (n.bit_length() - 1)


def _blocks(ranks, n: int) -> list[int]:
    """The blocks a set of the p = _power_below(n) ranks stands for: each v's own block v and,
    if v has a folded partner p + v, that one too."""
    p = _power_below(n)
    return sorted(b for v in ranks for b in (v, p + v) if b < n)


def _fold(n: int, chunks: Callable[[int], list[int]], reduce: bool) -> list:
    """One round (none if n is a power of two): extra rank p + i sends ``chunks(p + i)`` to i."""
    p = _power_below(n)
    return rounds(n, [0] if n > p else [], lambda r, _: [Transfer(r, r - p, chunks(r), reduce)],
                  active=lambda _: range(p, n))


def _unfold(n: int, chunks: Callable[[int], list[int]]) -> list:
    """One round (none if n is a power of two): rank i copies ``chunks(p + i)`` to p + i."""
    p = _power_below(n)
    return rounds(n, [0] if n > p else [], lambda i, _: [Transfer(i, p + i, chunks(p + i), False)],
                  active=lambda _: range(n - p))


def _distances(n: int) -> list[int]:
    """1, 2, 4, ..., p/2: the partner distances of the p ranks."""
    p = _power_below(n)
    return [1 << k for k in range(p.bit_length() - 1)]


def _exchanges(n: int, distances: list[int], blocks: Callable[[int, int], list[int]],
               reduce: bool) -> list:
    """One round per distance d: each of the p ranks v sends ``blocks(v, d)`` to v ^ d (every
    rank alike, bits flipped, when n = p; else written out, the extra ranks idle)."""
    p = _power_below(n)
    return rounds(n, distances, lambda v, d: [Transfer(v, v ^ d, blocks(v, d), reduce)],
                  symmetry="xor" if n == p else None, active=None if n == p else lambda _: range(p))


def _group(v: int, d: int) -> range:
    """The d ranks u with u // d == v // d: v's group of d."""
    return range(v - v % d, v - v % d + d)


def _halving(n: int) -> list:
    """Recursive halving on p ranks: d = p/2 .. 1; v sends its partner v ^ d the blocks of the
    partner's half of their group of 2d (the d ranks of the partner's group of d), which it
    adds into its own."""
    return _exchanges(n, _distances(n)[::-1], lambda v, d: _blocks(_group(v ^ d, d), n),
                      reduce=True)


def _doubling(n: int) -> list:
    """Recursive doubling on p ranks: d = 1 .. p/2; v sends its partner v ^ d the blocks of
    its group of d, which it has gathered so far."""
    return _exchanges(n, _distances(n), lambda v, d: _blocks(_group(v, d), n), reduce=False)


def allreduce(n: int) -> Schedule:
    """Recursive-doubling allreduce: partners swap and add whole buffers, log2 n rounds."""
    whole = lambda *_: [0]  # noqa: E731
    rounds_ = (_fold(n, whole, reduce=True) + _exchanges(n, _distances(n), whole, reduce=True)
               + _unfold(n, whole))
    return Schedule.build("recursive_doubling allreduce", n, n_chunks=1, rounds=rounds_)


def reduce_scatter(n: int) -> Schedule:
    """Recursive-halving reduce_scatter: rank r ends with block r summed, log2 n rounds."""
    rounds_ = (_fold(n, lambda _: list(range(n)), reduce=True) + _halving(n)
               + _unfold(n, lambda extra: [extra]))
    return Schedule.build("halving reduce_scatter", n, n_chunks=n, rounds=rounds_)


def allgather(n: int) -> Schedule:
    """Recursive-doubling allgather: what each rank holds doubles every round, log2 n rounds."""
    others = lambda extra: [b for b in range(n) if b != extra]  # noqa: E731
    rounds_ = _fold(n, lambda extra: [extra], reduce=False) + _doubling(n) + _unfold(n, others)
    return Schedule.build("doubling allgather", n, n_chunks=n, rounds=rounds_)


def halving_doubling_allreduce(n: int) -> Schedule:
    """Rabenseifner's allreduce: recursive-halving reduce_scatter + recursive-doubling
    allgather, 2 log2 n rounds, 2(n-1)/n · N bytes per rank."""
    everything = lambda _: list(range(n))  # noqa: E731
    rounds_ = (_fold(n, everything, reduce=True) + _halving(n) + _doubling(n)
               + _unfold(n, everything))
    return Schedule.build("halving_doubling allreduce", n, n_chunks=n, rounds=rounds_)
