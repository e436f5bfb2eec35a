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

from functools import lru_cache

import numpy as np

from jaxcoll.ir.families.recursive import _power_below
from jaxcoll.ir.schedules import Round, Schedule, Symmetry, Transfer


def rho(step: int) -> int:
    """ρ(s) = Σ_{i=0..s} (-2)^i: 1, -1, 3, -5, 11, -21, ..."""
    return (1 - (-2) ** (step + 1)) // 3


def peer(rank: int, step: int, p: int) -> int:
    """π(r, s): rank r's partner at step s among p ranks."""
    return (rank + rho(step)) % p if rank % 2 == 0 else (rank - rho(step)) % p


@lru_cache(maxsize=8)  # the reduce-scatter and the allgather read the same table
def reach(p: int) -> tuple[tuple[frozenset[int], ...], ...]:
    """reach[s][v]: the ranks v reaches by the peers of steps s, ..., log2 p - 1 (p a power
    of two); reach[log2 p][v] = {v}."""
    steps = p.bit_length() - 1
    table = [tuple(frozenset({v}) for v in range(p))]
    for step in reversed(range(steps)):
        later = table[0]
        table.insert(0, tuple(later[v] | later[peer(v, step, p)] for v in range(p)))
    return tuple(table)


def _real_rank(virtual: int, n: int) -> int:
    """The rank that virtual rank v (of p = _power_below(n)) is: 2v for v < n - p (the
    survivor of a folded pair), v + (n - p) after."""
    extra = n - _power_below(n)
    return 2 * virtual if virtual < extra else virtual + extra


def _blocks(virtual_ranks, n: int) -> list[int]:
    """The blocks a set of virtual ranks stands for: each one's own and its folded partner's."""
    extra = n - _power_below(n)
    return sorted(b for v in virtual_ranks for b in ((2 * v, 2 * v + 1) if v < extra
                                                     else (v + extra,)))


def _fold(n: int, reduce: bool) -> list[list[Transfer]]:
    """One round (none at a power of two): 2i + 1 adds its whole buffer into 2i (``reduce``),
    or 2i copies the whole buffer to 2i + 1."""
    pairs = range(n - _power_below(n))
    if not pairs:
        return []
    return [[Transfer(2 * i + 1, 2 * i, range(n), True) if reduce
             else Transfer(2 * i, 2 * i + 1, range(n), False) for i in pairs]]


def _reach_of_0(p: int) -> list[np.ndarray]:
    """reach[s][0] for s = 0 .. log2 p, by the mirror symmetry alone: rank x reaches rank 0's
    set moved by x (x + c for even x, x - c for odd), so reach(0, s) = reach(0, s+1) and that
    moved by its peer, with no table of every rank's."""
    mirror = Symmetry("mirror", p, modulus=p)
    sets = [np.array([0])]
    for step in reversed(range(p.bit_length() - 1)):
        later = sets[0]
        sets.insert(0, np.union1d(later, mirror.chunk(later, peer(0, step, p))))
    return sets


def _exchanges(n: int, reduce: bool) -> list:
    """Swing on the p virtual ranks: the reduce-scatter (steps 0 .. L-1, each rank sends the
    blocks its peer reaches next) or the allgather (steps L-1 .. 0, each sends what it reaches)."""
    p = _power_below(n)
    steps = range(p.bit_length() - 1)
    if n == p > 1:  # rank 0's transfers; even ranks r move them r on, odd ones mirror (r - x)
        mirror, reached = Symmetry("mirror", n, modulus=n), _reach_of_0(p)
        rounds = []
        for step in (steps if reduce else reversed(steps)):
            partner = peer(0, step, p)
            sent = mirror.chunk(reached[step + 1], partner) if reduce else reached[step + 1]
            rounds.append(Round([Transfer(0, partner, sorted(sent.tolist()), reduce)], mirror))
        return rounds
    table = reach(p)
    rounds = []
    for step in (steps if reduce else reversed(steps)):
        moves = []
        for v in range(p):
            partner = peer(v, step, p)
            sent = table[step + 1][partner if reduce else v]
            moves.append(Transfer(_real_rank(v, n), _real_rank(partner, n), _blocks(sent, n),
                                  reduce))
        rounds.append(moves)
    return rounds


def allreduce(n: int) -> Schedule:
    """Swing allreduce: reduce-scatter then allgather over the swing peers, 2 log2 n rounds,
    2(n-1)/n · N bytes per rank (n a power of two; else 2 rounds and N bytes more)."""
    rounds = (_fold(n, reduce=True) + _exchanges(n, reduce=True) + _exchanges(n, reduce=False)
              + _fold(n, reduce=False))
    return Schedule.build("swing allreduce", n, n_chunks=n, rounds=rounds)
