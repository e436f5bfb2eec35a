"""Rounds from what one rank does: the families' per-rank form, and the compaction derived from it.

A family says what rank ``r`` sends in step ``s``, as the lecture and NCCL write it: the ring's
reduce-scatter is "send chunk (r - s - 1) % n to (r + 1) % n, reduced"::

    def sends(r, s):
        return [Transfer(r, (r + 1) % n, (r - s - 1) % n, reduce=True)]

    rounds(n, range(n - 1), sends, symmetry="rotate")

With no ``symmetry`` every rank's sends are written out (a round per step; ``active(s)``, where
given, names the ranks that send in step ``s``, in the order their transfers are listed).
Where the family declares that every rank does rank 0's sends moved by its rank — ``"rotate"``
(rank r + x, chunk ids moved r strides on: rings, pairwise, Bruck, PAT), ``"xor"`` (rank r ^ x,
chunk ids with some of r's bits flipped: recursive doubling and halving), ``"mirror"`` (even
ranks rotate, odd ones mirror: Swing) or ``"grid"`` with the levels' ``sizes`` (a rotation per
level, rank and chunk ids moved coordinate by coordinate: hierarchical rings, one per line of
each level) — a step is stored as rank 0's sends and a
:class:`~jaxcoll.ir.schedules.Symmetry` (one rank's program plus its symmetry: what makes 4,096
ranks cheap, and a grid's 32,768). The family never spells the symmetry's numbers:
:func:`rounds` evaluates ``sends`` at the ranks that pin them down (rank 1 for the stride,
ranks 1, 2, 4, ... for the xor mask, for a grid's stride each level's first rank: coordinate 1
there, 0 elsewhere), then checks the derived symmetry against ``sends`` at other ranks (every
rank up to 16 ranks; beyond, the last and one that changes with the step), and refuses
a family whose ranks do not do what its declared symmetry says.

Pipelined trees are written per rank too, as the order a rank sends its pieces in (NCCL's tree
loop: receive a piece, send it to each child): :func:`as_soon_as_held` runs every rank's list,
each send in the first round after the rank holds the piece.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterable

import numpy as np

from jaxcoll.ir.schedules import Round, ScheduleError, Symmetry, Transfer

Sends = Callable[[int, object], Iterable[Transfer]]  # (rank, step) -> what the rank sends
ALL_RANKS_CHECKED = 16  # up to this many ranks a declared symmetry is checked at every rank


def rounds(n: int, steps: Iterable, sends: Sends, *, symmetry: str | None = None,
           active: Callable[[object], Iterable[int]] | None = None,
           sizes: tuple[int, ...] | None = None, name: str = "schedule") -> list[Round]:
    """The rounds in which every rank r sends ``sends(r, s)``, one round per step ``s``.

    Args:
      n: the number of ranks.
      steps: the steps, in order (ints, distances, or any value ``sends`` takes).
      sends: ``sends(r, s)``, the transfers rank ``r`` makes in step ``s`` (each from ``r``).
      symmetry: ``"rotate"``, ``"xor"``, ``"mirror"`` or ``"grid"`` if every rank sends rank
        0's transfers moved by its rank (the module docstring): each round is stored as rank
        0's transfers and the symmetry derived from ``sends``; None to write every rank's out.
      active: ``active(s)``, the ranks that send in step ``s`` and their order (default:
        every rank, in order); only without a symmetry.
      sizes: the levels' sizes, outermost first (their product ``n``), for ``"grid"`` only.
      name: the family's name, for errors.

    Returns:
      A list of :class:`~jaxcoll.ir.schedules.Round`, one per step.

    Raises:
      jaxcoll.ScheduleError: if a rank's transfer is not from that rank, or the ranks' sends
        are not rank 0's moved by the declared symmetry (naming the step and the rank that
        differs).
    """
    if symmetry is None:
        return [Round(_written_out(n, s, sends, active, name)) for s in steps]
    if active is not None:
        raise ScheduleError(f"{name}: a symmetric family has every rank send (no active=)")
    if (symmetry == "grid") != (sizes is not None):
        raise ScheduleError(f"{name}: sizes= is given with symmetry='grid', and only with it")
    if sizes is not None and (not all(isinstance(s, (int, np.integer)) and s >= 1 for s in sizes)
                              or int(np.prod(sizes)) != n):
        raise ScheduleError(f"{name}: 'grid' sizes {sizes} must be ints >= 1 whose product "
                            f"is the {n} ranks")
    shared: dict[Symmetry, Symmetry] = {}  # one object per distinct symmetry
    made, last = [], None
    for s in steps:
        base = _sent(sends, 0, s, name)
        last = _derive(symmetry, n, s, base, sends, name, last, sizes)
        _check(last, s, base, sends, name)
        made.append(Round(base, shared.setdefault(last, last)))
    return made


def _sent(sends: Sends, r: int, s, name: str) -> list[Transfer]:
    """Rank r's transfers in step s, each checked to be from r."""
    transfers = list(sends(r, s))
    wrong = [str(t) for t in transfers if t.src != r]
    if wrong:
        raise ScheduleError(f"{name}: step {s}: rank {r}'s sends {wrong} are not from rank {r}")
    return transfers


def _written_out(n: int, s, sends: Sends, active, name: str) -> list[Transfer]:
    return [t for r in (range(n) if active is None else active(s))
            for t in _sent(sends, r, s, name)]


def _moves(symmetry: Symmetry, base: list[Transfer], r: int, want: list[Transfer]) -> bool:
    """True if rank 0's ``base`` moved to rank r by ``symmetry`` does what ``want`` does: the
    same (src, dst, reduce, chunk -> into pairs), in any order."""
    def ids(chunks):
        return (tuple(symmetry.chunk(np.array(chunks), r).tolist()) if len(chunks) > 8
                else tuple(symmetry.chunk(c, r) for c in chunks))

    moved = [(symmetry.rank(t.src, r), symmetry.rank(t.dst, r), t.reduce, ids(t.chunks),
              ids(t.into) if t.into is not t.chunks else None) for t in base]
    wanted = [(t.src, t.dst, t.reduce, t.chunks, None if t.into is t.chunks else t.into)
              for t in want]
    if moved == wanted:  # the usual: the same transfers in the same order
        return True
    return _canonical(moved) == _canonical(wanted)


def _canonical(transfers: list[tuple]) -> list:
    """(src, dst, reduce, chunks, into or None) as what they do, in any order."""
    return sorted((src, dst, reduce, tuple(sorted(zip(chunks, chunks if into is None
                                                      else into))))
                  for src, dst, reduce, chunks, into in transfers)


def _derive(kind: str, n: int, s, base: list[Transfer], sends: Sends, name: str,
            last: Symmetry | None, sizes: tuple[int, ...] | None = None) -> Symmetry:
    """The symmetry of ``kind`` that makes ranks 1 (and 2 for "mirror"; 1, 2, 4, ... for
    "xor"; each level's first rank, coordinate 1 there and 0 elsewhere, for "grid") send what
    ``sends`` says, from rank 0's ``base`` (rotate, mirror and grid: the previous step's,
    ``last``, tried first)."""
    where = f"{name}: step {s}"
    if not base:
        raise ScheduleError(f"{where}: a {kind!r} family's rank 0 must send in every step")
    if kind == "grid":  # a level of one moves nothing: left out of the symmetry's sizes
        sizes = tuple(size for size in sizes if size > 1) or (1,)
        places = np.cumprod((1,) + sizes[:0:-1])[::-1]  # a rank per level: coordinate 1 there
        wanted = {int(place): _sent(sends, int(place), s, name)
                  for place, size in zip(places, sizes) if size > 1}
        if last is not None and all(_moves(last, base, r, want) for r, want in wanted.items()):
            return last
        for stride in range(max(sizes) + 1):  # each level's coordinate moves stride·r_l
            candidate = Symmetry("grid", n, stride=stride, modulus=n, sizes=sizes)
            if all(_moves(candidate, base, r, want) for r, want in wanted.items()):
                return candidate
        r = min(wanted, default=0)
        raise _disagrees(where, kind, r, wanted.get(r, base))
    if kind == "xor":
        if n & (n - 1):
            raise ScheduleError(f"{where}: 'xor' needs a power of two ranks, not {n}")
        mask = 0
        for bit in (1 << b for b in range(n.bit_length() - 1)):
            want = _sent(sends, bit, s, name)
            fits = [m for m in (mask, mask | bit) if _moves(Symmetry("xor", n, mask=m), base,
                                                            bit, want)]
            if not fits:
                raise _disagrees(where, kind, bit, want)
            mask = fits[0]
        return Symmetry("xor", n, mask=mask)
    if kind not in ("rotate", "mirror"):
        raise ScheduleError(f"{where}: symmetry must be 'rotate', 'xor', 'mirror' or 'grid', "
                            f"not {kind!r}")
    if kind == "mirror" and n % 2:
        raise ScheduleError(f"{where}: 'mirror' needs an even number of ranks, not {n}")
    probes = [r for r in (1, 2) if r < n][:1 if kind == "rotate" else 2]
    wanted = {r: _sent(sends, r, s, name) for r in probes}
    top = max(c for ts in [base, *wanted.values()] for t in ts for c in t.chunks + t.into)
    if last is not None and all(_moves(last, base, r, want) for r, want in wanted.items()):
        return last
    for stride in range(top + 2):  # chunk ids move stride·r, mod stride·n (the first fits)
        candidate = Symmetry(kind, n, stride=stride, modulus=max(stride * n, 1))
        if all(_moves(candidate, base, r, want) for r, want in wanted.items()):
            return candidate
    r = probes[0] if probes else 0
    raise _disagrees(where, kind, r, wanted.get(r, base))


def _check(symmetry: Symmetry, s, base: list[Transfer], sends: Sends, name: str) -> None:
    """Raise ScheduleError if ``sends`` at the checked ranks is not ``base`` moved there."""
    n = symmetry.n_ranks
    if n <= ALL_RANKS_CHECKED:
        ranks = range(1, n)
    else:  # the last rank, and one that changes with the step
        salt = s if isinstance(s, int) else len(str(s))
        ranks = {n - 1, (salt * 7919 + 104729) % n or n // 2}
    for r in sorted(ranks):
        want = _sent(sends, r, s, name)
        if not _moves(symmetry, base, r, want):
            raise _disagrees(f"{name}: step {s}", symmetry.kind, r, want)


def _disagrees(where: str, kind: str, r: int, want: list[Transfer]) -> ScheduleError:
    return ScheduleError(f"{where}: rank {r} sends {[str(t) for t in want]}, which is not rank "
                         f"0's sends moved by any {kind!r} symmetry: the family's ranks do not "
                         "agree with its declared symmetry")


def as_soon_as_held(n: int, program: Callable[[int], list[tuple[int, int]]],
                    real: Callable[[int], int], held: Iterable[int],
                    name: str = "schedule") -> list[list[Transfer]]:
    """Rounds in which every rank sends its ``program`` in order, each send as soon as it can.

    Ranks are virtual, 0..n-1, virtual rank 0 holding the chunks ``held`` at the start. Each
    rank sends at most once a round, its next send in the first round after it holds that chunk
    (so a pipelined tree forwards piece p while piece p + 1 is on its way).

    Args:
      n: the number of (virtual) ranks.
      program: ``program(v)`` is the list of (chunk, to) pairs virtual rank v sends, in order
        (``to`` a virtual rank).
      real: ``real(v)`` is the rank virtual rank v is.
      held: the chunks virtual rank 0 holds at the start.
      name: what the error's message calls the schedule.

    Returns:
      The rounds, as lists of copies (:class:`~jaxcoll.ir.schedules.Transfer`).

    Raises:
      ValueError: if a rank waits for a chunk no one sends it.
    """
    holds = {v: set() for v in range(n)}
    holds[0] = set(held)
    queue = {v: deque(program(v)) for v in range(n)}
    waiting = sum(map(len, queue.values()))  # sends not made yet
    # A rank that neither sent nor received in a round is as unready after it as it was
    # before: only the last round's senders and receivers are looked at again (a chain's
    # 32,768 ranks are not scanned in each of its 32,767 rounds).
    candidates: Iterable[int] = range(n)
    made = []
    while waiting:
        ready = [(v, *queue[v][0]) for v in sorted(candidates)
                 if queue[v] and queue[v][0][0] in holds[v]]
        if not ready:
            raise ValueError(f"{name}: the tree is not connected to its root")
        candidates = set()
        for v, chunk, to in ready:
            queue[v].popleft()
            holds[to].add(chunk)
            candidates.update((v, to))
        waiting -= len(ready)
        made.append([Transfer(real(v), real(to), chunk, reduce=False) for v, chunk, to in ready])
    return made
