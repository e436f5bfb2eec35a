"""Streams: a schedule read as a loop that the caller's computation runs inside (no JAX here).

An allgather in which every rank, each round, sends on only what it has just received (or its
own block) never needs the gathered array: an arriving block can be handed to the caller's
function, sent on, and dropped. Its dual, a reduce-scatter in which every rank sends on the
partial sum it has just received plus its own contribution, never needs a rank's whole
contribution: each rank computes the piece a round needs, in that round. Ring and bidirectional
ring are such schedules; recursive doubling, Bruck and the naive ones are not (a rank sends on
blocks it received rounds ago, or many at once).

:func:`stream` reads a registry schedule round by round and returns its :class:`Stream` (which
piece each rank sends in each ``ppermute``, which chunk arrives), or None if it is not one.
A block of ``rows`` rows is cut into ``pieces`` pieces along its rows (the schedule's chunks per
rank: 1 for the ring, 2 for the bidirectional ring, one half each way); chunk ``c`` is piece
``c % pieces`` of rank ``c // pieces``'s block. Every round of a stream sends along the same
permutations, and every round after the first sends on what arrived as the second does, so
the executor traces the first round and then one loop (overlap.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from jaxcoll.ir.families import SCHEDULES, build_schedule
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Schedule, split_round


@dataclass(frozen=True)
class Hop:
    """One ``ppermute`` of a round: every rank sends one piece and receives one.

    ``forwards`` is the hop of the previous round whose arrival each rank sends on (plus its own
    contribution, in a reduce-scatter), or None: each rank sends a piece of its own block (a
    fresh contribution, in a reduce-scatter). ``chunk[r]`` is the chunk rank r receives
    (allgather) or sends (reduce-scatter)."""

    perm: tuple[tuple[int, int], ...]  # (src, dst): every rank once each way
    piece: int  # which piece of a block (the same for every rank, so one shape)
    forwards: int | None
    chunk: tuple[int, ...]  # (n_ranks,)


@dataclass(frozen=True)
class Stream:
    """A streaming schedule: ``rounds`` of hops; for a reduce-scatter, ``finals[p]`` is the hop
    of the last round that brings each rank the partial sum of piece p of its own block."""

    primitive: str
    n_ranks: int
    pieces: int
    rounds: tuple[tuple[Hop, ...], ...]
    finals: tuple[int, ...] = ()


def piece_bounds(rows: int, pieces: int) -> list[tuple[int, int]]:
    """(start, size) of each piece of a block of ``rows`` rows: as equal as can be, the larger
    ones first (as ``numpy.array_split``)."""
    sizes = [rows // pieces + (p < rows % pieces) for p in range(pieces)]
    starts = [sum(sizes[:p]) for p in range(pieces)]
    return list(zip(starts, sizes))


def _hops(schedule: Schedule, reduce: bool) -> list[list[tuple]] | None:
    """Each round's matchings as (perm, chunk per sender, chunk per receiver), or None if a
    matching is not one chunk from every rank to every rank, all copied (or all reduced)."""
    n = schedule.n_ranks
    rounds = []
    for round_ in schedule.rounds:
        hops = []
        for matching in split_round(round_):
            ok = all(len(t.chunks) == 1 and t.into == t.chunks and t.reduce == reduce
                     for t in matching)
            senders, receivers = {t.src for t in matching}, {t.dst for t in matching}
            if not ok or len(matching) != n or len(senders) != n or len(receivers) != n:
                return None
            perm = tuple((t.src, t.dst) for t in matching)
            sent = tuple(t.chunks[0] for t in sorted(matching, key=lambda t: t.src))
            got = tuple(t.chunks[0] for t in sorted(matching, key=lambda t: t.dst))
            hops.append((perm, sent, got))
        rounds.append(hops)
    return rounds


def _forwards(sent, previous, fresh) -> int | None | bool:
    """Which hop of the previous round every rank sends on what arrived in (its index), None if
    every rank sends a fresh piece (``fresh(rank, chunk)``), False if the ranks do neither
    alike."""
    n = len(sent)
    for k, (_, _, got) in enumerate(previous):
        if all(got[r] == sent[r] for r in range(n)):
            return k
    return None if all(fresh(r, sent[r]) for r in range(n)) else False


def _build(schedule: Schedule) -> Stream | None:
    n, record = schedule.n_ranks, RECORDS.get(schedule.collective)
    if record is None or not record.streams or schedule.n_chunks % n:
        return None
    reduce = record.reduces
    pieces = schedule.n_chunks // n
    rounds = _hops(schedule, reduce)
    if rounds is None:
        return None
    own = lambda r, c: c // pieces == r  # noqa: E731 - chunk c is part of rank r's block
    touched = [set() for _ in range(n)]  # reduce-scatter: chunks each rank has contributed to
    stream_rounds, previous = [], []
    for hops in rounds:
        stream_hops = []
        for perm, sent, got in hops:
            piece = {c % pieces for c in sent}
            fresh = ((lambda r, c: c not in touched[r] and not own(r, c)) if reduce else own)
            forwards = _forwards(sent, previous, fresh)
            if len(piece) != 1 or forwards is False:
                return None
            if reduce:
                for r in range(n):
                    touched[r].add(sent[r])
            stream_hops.append(Hop(perm, piece.pop(), forwards, sent if reduce else got))
        if reduce:  # every partial sum that arrived must have been sent on
            forwarded = {h.forwards for h in stream_hops}
            if any(k not in forwarded for k in range(len(previous))):
                return None
        stream_rounds.append(tuple(stream_hops))
        previous = hops
    if not _repeats(stream_rounds):
        return None
    if reduce:
        return _reduce_scatter_stream(schedule, pieces, stream_rounds, previous, touched)
    for r in range(n):  # an allgather: every rank receives every other chunk exactly once
        arrived = sorted(h.chunk[r] for hops in stream_rounds for h in hops)
        if arrived != [c for c in range(schedule.n_chunks) if not own(r, c)]:
            return None
    return Stream(schedule.collective, n, pieces, tuple(stream_rounds))


def _repeats(rounds) -> bool:
    """True if every round has the first's permutations and pieces, and every round after the
    first sends on what arrived as the second does: the rounds after the first are one loop."""
    shape = lambda hops: [(h.perm, h.piece) for h in hops]  # noqa: E731
    sends_on = lambda hops: [h.forwards for h in hops]  # noqa: E731
    return (all(shape(r) == shape(rounds[0]) for r in rounds)
            and all(sends_on(r) == sends_on(rounds[1]) for r in rounds[1:]))


def _reduce_scatter_stream(schedule, pieces, stream_rounds, last, touched) -> Stream | None:
    """The reduce-scatter's stream if the last round brings each rank its own pieces and every
    rank contributed to every other chunk exactly once on the way."""
    n = schedule.n_ranks
    finals = []
    for p in range(pieces):
        hop = [k for k, (_, _, got) in enumerate(last)
               if all(got[r] == r * pieces + p for r in range(n))]
        if len(hop) != 1 and n > 1:
            return None
        finals.append(hop[0] if hop else 0)
    if n > 1 and len(last) != pieces:
        return None
    for r in range(n):
        if touched[r] != {c for c in range(schedule.n_chunks) if c // pieces != r}:
            return None
    return Stream(schedule.collective, n, pieces, tuple(stream_rounds), tuple(finals))


@lru_cache(maxsize=256)
def stream(primitive: str, algorithm: str, n: int) -> Stream | None:
    """The :class:`Stream` of ``algorithm``'s ``primitive`` schedule on ``n`` ranks, or None if
    that schedule is not a stream."""
    return _build(build_schedule(primitive, algorithm, n))


@lru_cache(maxsize=None)
def streaming_algorithms(primitive: str) -> tuple[str, ...]:
    """The registry's algorithms for ``primitive`` whose schedules are streams for every n from
    1 to 16 (so code that works on one mesh works on the next)."""
    return tuple(name for name, entry in sorted(SCHEDULES[primitive].items())
                 if not entry.two_level
                 and all(stream(primitive, name, n) is not None for n in range(1, 17)))
