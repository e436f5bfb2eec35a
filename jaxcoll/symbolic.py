"""Symbolic execution: prove that a schedule does what its primitive promises, without devices.

Each chunk on each rank holds a set of contributions, (rank, chunk) pairs: whose data has been
summed into it. A reduce transfer adds the sender's set to the receiver's (a contribution
already there would be counted twice: an error); a copy replaces it. At the end, every rank
must hold exactly what the primitive promises: each contribution once, none missing.

The sets are held one of two ways, under the same rules (:func:`_run`): :class:`_Masks`, one
int per chunk (a chunk id and a bitmask of ranks), fast enough for thousands of ranks, which
holds every set whose contributions are all of one chunk id, as in every registered schedule;
and :class:`_Sets`, frozensets of (rank, chunk) pairs, which hold anything: ``verify`` falls
back to them when a schedule sums two chunk ids into one chunk, and ``states`` (small n, for
pictures) uses them.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import Callable

from .records import RECORDS
from .schedules import Round, Schedule, Transfer, split_round

Contributions = frozenset  # of (rank, chunk)


class ScheduleError(ValueError):
    """A schedule that does not do what its primitive promises."""


class _MixedOrigins(Exception):
    """A reduce summed contributions of two chunk ids into one chunk, which _Masks cannot hold."""


def _bits(mask: int) -> list[int]:
    """The positions of the set bits of ``mask``, lowest first."""
    return [r for r in range(mask.bit_length()) if mask >> r & 1]


class _Sets:
    """A chunk's contributions as a frozenset of (rank, chunk) pairs; None: no data yet."""

    def row(self, rank: int, origins: list[int | None]) -> list[Contributions | None]:
        """``rank``'s chunks before the first round: chunk i holds rank's own data of chunk
        ``origins[i]`` (None: no data)."""
        return [None if origin is None else frozenset({(rank, origin)}) for origin in origins]

    def promise(self, origin: int, ranks: int) -> Contributions:
        """The contributions (r, origin) for every rank r in the bitmask ``ranks``."""
        return frozenset((r, origin) for r in _bits(ranks))

    def union(self, held: Contributions, sent: Contributions) -> Contributions | None:
        """held + sent, or None if they share a contribution."""
        return None if held & sent else held | sent

    def contributions(self, cell: Contributions | None) -> Contributions:
        return cell or frozenset()


class _Masks:
    """Contributions (r, origin) for the ranks r of a bitmask, all of one chunk id ``origin``,
    as one int: origin << n_ranks | bitmask; 0: no data yet."""

    def __init__(self, n_ranks: int):
        self.n, self.ranks = n_ranks, (1 << n_ranks) - 1

    def row(self, rank: int, origins: list[int | None]) -> list[int]:
        n, bit = self.n, 1 << rank
        return [0 if origin is None else origin << n | bit for origin in origins]

    def promise(self, origin: int, ranks: int) -> int:
        return origin << self.n | ranks

    def union(self, held: int, sent: int) -> int | None:
        if (held ^ sent) >> self.n:  # two origins: only _Sets can hold the sum
            raise _MixedOrigins
        return None if held & sent & self.ranks else held | sent

    def contributions(self, cell: int) -> Contributions:
        return frozenset((r, cell >> self.n) for r in _bits(cell & self.ranks))


def _origins(schedule: Schedule) -> Callable[[int], list[int | None]]:
    """origins(rank): for each of rank's chunks, the chunk id of rank's own data that it holds
    before the first round (None: nothing meaningful yet); the primitive's record says."""
    record, n, root = RECORDS[schedule.primitive], schedule.n_ranks, schedule.root
    return lambda rank: record.origins(rank, n, schedule.n_chunks, root)


def _promises(schedule: Schedule) -> list[tuple[int, list[tuple[int, int, int]]]]:
    """What the primitive promises, rank by rank (records.Record.promises)."""
    if schedule.primitive not in RECORDS:
        raise ValueError(f"{schedule.name}: unknown primitive {schedule.primitive!r}")
    return RECORDS[schedule.primitive].promises(schedule.n_ranks, schedule.n_chunks,
                                                schedule.root)


def _check_writes(index: int, round_) -> None:
    """A chunk copied into may be written by nothing else in the same round."""
    writes = {}
    for t in round_:
        for c in t.into:
            writes.setdefault((t.dst, c), []).append(t)
    for (dst, c), ts in writes.items():
        if len(ts) > 1 and not all(t.reduce for t in ts):
            raise ScheduleError(f"round {index}: rank {dst} chunk {c} is written by "
                                f"{len(ts)} transfers, at least one a copy: "
                                f"{', '.join(map(str, ts))}")


def _one_matching(round_) -> bool:
    """True if every rank sends and receives at most once in the round, and every transfer
    moves as many chunks the same way (copy or reduce)."""
    return (len({t.src for t in round_}) == len({t.dst for t in round_}) == len(round_)
            and len({(len(t.chunks), t.reduce) for t in round_}) <= 1)


def check_matchings(schedule: Schedule) -> None:
    """Each ppermute the executor makes sends from and to every rank at most once.

    The executor cuts each round into ppermutes with ``split_round``. Its greedy rule keeps a
    round in which every rank sends and receives at most once, all transfers moving as many
    chunks the same way, whole: one ppermute, which is fine. Other rounds are split and checked,
    once per distinct round (``split_round`` looks only at each transfer's ranks, chunk count
    and kind, and takes time quadratic in a round's length).
    """
    seen = set()
    for round_ in schedule.rounds:
        if _one_matching(round_):
            continue
        shape = tuple((t.src, t.dst, len(t.chunks), t.reduce) for t in round_)
        if shape in seen:
            continue
        seen.add(shape)
        for matching in split_round(round_):
            perm = tuple((t.src, t.dst) for t in matching)
            for side, ranks in (("sends", [t.src for t in matching]),
                                ("receives", [t.dst for t in matching])):
                twice = sorted(r for r, count in Counter(ranks).items() if count > 1)
                if twice:
                    raise ScheduleError(f"{schedule.name}: rank {twice[0]} {side} twice in one "
                                        f"ppermute {perm}")


def _run(schedule: Schedule, cells: _Sets | _Masks, record: Callable[[list], None] | None = None
         ) -> list[list]:
    """Execute the schedule on ``cells``' representation and return the final state, as
    [rank][chunk]; ``record(state)`` is called before the first round and after each. Raises
    ScheduleError at the first transfer that is not possible."""
    if not schedule.primitive:
        raise ValueError(f"{schedule.name}: the schedule names no primitive to verify against; "
                         "build it with jaxcoll.schedule(primitive, algorithm, n)")
    width, origins = schedule.n_chunks, _origins(schedule)
    state = [cells.row(rank, origins(rank)) for rank in range(schedule.n_ranks)]
    if record:
        record(state)
    for index, round_ in enumerate(schedule.rounds):
        writes = [t.dst * width + d for t in round_ for d in t.into]
        written = set(writes)
        if len(written) < len(writes):
            _check_writes(index, round_)
        # Every transfer reads the state as it was before the round: a copy, if the round
        # writes a chunk that it reads (a swap, as in recursive doubling).
        sources = state
        if not written.isdisjoint([t.src * width + c for t in round_ for c in t.chunks]):
            sources = [row[:] for row in state]
        for t in round_:
            source, row, reduce = sources[t.src], state[t.dst], t.reduce
            for c, d in zip(t.chunks, t.into):
                value = source[c]
                if not value:
                    raise ScheduleError(f"round {index}: rank {t.src} sends chunk {c} to rank "
                                        f"{t.dst} before it holds any data for it")
                if not reduce:
                    row[d] = value
                    continue
                held = row[d]
                if not held:
                    raise ScheduleError(f"round {index}: rank {t.dst} reduces into chunk {d}, "
                                        "which holds no data yet")
                union = cells.union(held, value)
                if union is None:
                    twice = cells.contributions(held) & cells.contributions(value)
                    raise ScheduleError(f"round {index}: {t} counts contributions twice into "
                                        f"rank {t.dst} chunk {d}: {sorted(twice)}")
                row[d] = union
        if record:
            record(state)
    return state


def states(schedule: Schedule) -> list[list[list[Contributions | None]]]:
    """What every rank holds before the first round and after each round, as [rank][chunk]
    contribution sets; raises ScheduleError at the first transfer that is not possible."""
    history = []
    _run(schedule, _Sets(), lambda state: history.append([row[:] for row in state]))
    return history


def verify(schedule: Schedule) -> None:
    """Raise ScheduleError (naming the round, rank and chunk) unless the schedule keeps its
    primitive's promise; return None if it does."""
    try:
        cells = _Masks(schedule.n_ranks)
        final = _run(schedule, cells)
    except _MixedOrigins:  # a chunk summed two chunk ids: run again on sets, which hold that
        cells = _Sets()
        final = _run(schedule, cells)
    last = f"after round {len(schedule.rounds) - 1}" if schedule.rounds else "with no rounds"
    promised, expected = None, []
    for rank, row in _promises(schedule):
        if row is not promised:
            promised, expected = row, [cells.promise(origin, ranks) for _, origin, ranks in row]
        held = final[rank]
        if [held[chunk] for chunk, _, _ in row] == expected:
            continue
        for (chunk, _, _), want in zip(row, expected):
            if held[chunk] != want:
                has, want = cells.contributions(held[chunk]), cells.contributions(want)
                raise ScheduleError(
                    f"{schedule.name}: {last}, rank {rank} chunk {chunk} holds {sorted(has)}; "
                    f"missing {sorted(want - has)}, unexpected {sorted(has - want)}")
    check_matchings(schedule)


@lru_cache(maxsize=256)
def dual(schedule: Schedule) -> Schedule:
    """The schedule of the transpose of ``schedule``'s primitive: rounds reversed, each transfer
    turned around, labelled with the dual primitive (records.py; allreduce and alltoall are
    their own transposes and keep their schedule).

    It is the exact transpose where a chunk either holds data or is zero: a copy's transpose
    adds into its source and zeroes its destination; a reduce's adds into its source. Which
    chunks hold data is tracked from the dual primitive's start: a transfer into a chunk that
    holds none is a copy (no stale value is added), one into a chunk that holds some is a
    reduce, and a chunk that holds none is not sent. ``verify`` proves the result.
    """
    primitive = RECORDS[schedule.primitive].dual
    if not primitive:
        return schedule
    n, width = schedule.n_ranks, schedule.n_chunks
    shell = Schedule(f"dual of {schedule.name}", n, width, (), primitive, schedule.root)
    origins = _origins(shell)
    holds = [[origin is not None for origin in origins(rank)] for rank in range(n)]
    rounds = []
    for round_ in reversed(schedule.rounds):
        before = [row[:] for row in holds]
        for t in round_:  # a copy's destination gave up its value: its transpose is zero
            if not t.reduce:
                for chunk in t.into:
                    holds[t.dst][chunk] = False
        receiving = [row[:] for row in holds]  # held before this round's writes land
        transfers = []
        for t in round_:
            moves = [(i, c) for i, c in zip(t.into, t.chunks) if before[t.dst][i]]
            for reduce in (True, False):
                part = [(i, c) for i, c in moves if receiving[t.src][c] == reduce]
                if part:
                    transfers.append(Transfer(t.dst, t.src, [i for i, _ in part], reduce,
                                              into=[c for _, c in part]))
                    for _, c in part:
                        holds[t.src][c] = True
        rounds.append(Round(transfers))
    return Schedule(shell.name, n, width, tuple(r for r in rounds if len(r)), primitive,
                    schedule.root)
