"""Swing allreduce (De Sensi, Bonato, Saam and Hoefler, "Swing: Short-cutting Rings for Higher
Bandwidth Allreduce", NSDI 2024, arXiv 2401.09356).

Recursive halving and doubling pair rank r with r XOR 2^s: distances 1, 2, 4, ..., which on a
ring or a torus are that many hops, every one of them loading the links in between. Swing
pairs ranks across short "swinging" distances instead, alternately to the right and the left:

    ρ(s) = Σ_{i=0..s} (-2)^i = (1 - (-2)^(s+1)) / 3      = 1, -1, 3, -5, 11, -21, 43, ...
    π(r, s) = r + ρ(s) (mod p) if r is even,  r - ρ(s) (mod p) if r is odd

|ρ(s)| is about 2^(s+1)/3, two thirds of recursive doubling's 2^s: fewer hops at every step
but the first (1, 1, 3, 5, 11 against 1, 2, 4, 8, 16). ρ(s) is odd, so π(·, s) pairs even
ranks with odd ones and is its own inverse: each step is a set of pairwise exchanges. On
p = 2^L ranks the peers of steps s, ..., L-1 reach 2^(L-s) different ranks (the paper proves
it; ``verify`` checks it here for every n).

The bandwidth-optimal variant, which this module builds, is Rabenseifner's halving-doubling
with Swing's peers (the paper's reduce-scatter + allgather over π; the blocks a rank sends are
those its peer reaches in the remaining steps, as libswing's ``get_indexes`` computes them):

    reach(r, L) = {r};   reach(r, s) = reach(r, s+1) ∪ reach(π(r, s), s+1)
    reduce-scatter, s = 0, ..., L-1:  r sends π(r, s) the blocks of reach(π(r, s), s+1), which
                                      π(r, s) adds into its own; r keeps reach(r, s+1)
    allgather, s = L-1, ..., 0:       r sends π(r, s) the blocks of reach(r, s+1), copied

After the reduce-scatter rank r holds block r summed over all ranks (reach(r, L) = {r}); the
allgather is the reduce-scatter run backwards with copies. 2 log2 p rounds; a rank sends
2(p-1)/p · N bytes, the ring's and halving-doubling's: Swing's gain is in hops, which
``jaxcoll.cost`` does not see and ``jaxcoll.simulate`` on a ring or torus does.

Rank counts that are not powers of two: p is the largest power of two <= n and the n - p
extra ranks fold into a neighbour (recursive.py folds rank p + i into rank i, p ranks away,
which would undo Swing's short distances): rank 2i + 1 adds its buffer into rank 2i for
i < n - p and sits out; the p others run Swing as virtual ranks 0..p-1 in order (virtual v is
rank 2v for v < n - p, rank v + n - p after), standing for their folded partner's block too;
at the end rank 2i copies the result to 2i + 1. Open MPI's recursive-halving reduce-scatter
folds the same way; the paper's own treatment of other n is not what this module does. Two
rounds and N bytes more, none when n is a power of two.
"""

from __future__ import annotations

import numpy as np

from jaxcoll.ir.families.recursive import _power_below
from jaxcoll.ir.per_rank import rounds
from jaxcoll.ir.schedules import Schedule, Transfer


def rho(step: int) -> int:
    """ρ(s) = Σ_{i=0..s} (-2)^i: 1, -1, 3, -5, 11, -21, ..."""
    return (1 - (-2) ** (step + 1)) // 3


def peer(rank, step: int, p: int):
    """π(r, s): rank r's partner at step s among p ranks (r an int or a numpy array)."""
    return (rank + (1 - 2 * (rank % 2)) * rho(step)) % p  # r + ρ(s) if r is even, else r - ρ(s)


def reach(rank: int, step: int, p: int) -> np.ndarray:
    """The ranks ``rank`` reaches by the peers of steps ``step``, ..., log2 p - 1 (p a power
    of two), sorted: reach(r, s) = reach(r, s+1) ∪ reach(π(r, s), s+1), reach(r, log2 p) =
    {r}, unrolled: the ranks so far and their peers at step s, then at s + 1, ..."""
    ranks = np.array([rank])
    for later in range(step, p.bit_length() - 1):
        ranks = np.union1d(ranks, peer(ranks, later, p))
    return ranks


def _real_rank(virtual: int, n: int) -> int:
    """The rank that virtual rank v (of p = _power_below(n)) is: 2v for v < n - p (the
    survivor of a folded pair), v + (n - p) after."""
    extra = n - _power_below(n)
    return 2 * virtual if virtual < extra else virtual + extra


def _virtual_rank(rank: int, n: int) -> int | None:
    """The virtual rank a rank is, None for the odd rank of a folded pair (it sits out)."""
    extra = n - _power_below(n)
    if rank < 2 * extra:
        return None if rank % 2 else rank // 2
    return rank - extra


def _blocks(virtual_ranks, n: int) -> list[int]:
    """The blocks a set of virtual ranks stands for: each one's own and its folded partner's."""
    extra = n - _power_below(n)
    return sorted(b for v in virtual_ranks.tolist() for b in ((2 * v, 2 * v + 1) if v < extra
                                                              else (v + extra,)))


def _fold(n: int, reduce: bool) -> list:
    """One round (none at a power of two): 2i + 1 adds its whole buffer into 2i (``reduce``),
    or 2i copies the whole buffer to 2i + 1."""
    extra = n - _power_below(n)
    if reduce:
        return rounds(n, [0] if extra else [], lambda r, _: [Transfer(r, r - 1, range(n), True)],
                      active=lambda _: range(1, 2 * extra, 2))
    return rounds(n, [0] if extra else [], lambda r, _: [Transfer(r, r + 1, range(n), False)],
                  active=lambda _: range(0, 2 * extra, 2))


def _exchanges(n: int, reduce: bool) -> list:
    """Swing on the p virtual ranks: the reduce-scatter (steps 0 .. L-1: v sends π(v, s) the
    blocks π(v, s) reaches next, which it adds) or the allgather (steps L-1 .. 0: v sends what
    it reaches, copied). Every rank alike, odd ones mirrored, where n = p."""
    p = _power_below(n)
    steps = range(p.bit_length() - 1)

    def sends(r, step):
        v = _virtual_rank(r, n)
        partner = peer(v, step, p)
        sent = reach(partner if reduce else v, step + 1, p)
        return [Transfer(r, _real_rank(partner, n), _blocks(sent, n), reduce)]

    return rounds(n, steps if reduce else reversed(steps), sends, name="swing allreduce",
                  symmetry="mirror" if n == p > 1 else None,
                  active=None if n == p > 1 else lambda _: (_real_rank(v, n) for v in range(p)))


def allreduce(n: int) -> Schedule:
    """Swing allreduce: reduce-scatter then allgather over the swing peers, 2 log2 n rounds,
    2(n-1)/n · N bytes per rank (n a power of two; else 2 rounds and N bytes more)."""
    rounds_ = (_fold(n, reduce=True) + _exchanges(n, reduce=True) + _exchanges(n, reduce=False)
               + _fold(n, reduce=False))
    return Schedule.build("swing allreduce", n, n_chunks=n, rounds=rounds_)
