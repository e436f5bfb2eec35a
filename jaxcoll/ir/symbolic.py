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

Where every round is symmetric (``Round(base, symmetry)``) under one action of a symmetry's
group (g moves rank x to rank(x, g), chunk c to chunk(c, g) and a contribution (o, oc) to
(rank(o, g), chunk(oc, g))), and so are the start and the promise, rank r's state is always
rank 0's moved by r: ``verify`` follows rank 0's row alone (:func:`_run_rank_0`). In a round,
rank 0 receives each of its base transfers 0 -> d as rank q = sender(d) makes it, from q's
chunks, which are rank 0's moved by q; the same rules are checked on these writes, and an error
is named as _run names it, at rank 0's own transfer (the same error moved by d, which undoes
q). Any other schedule, or one that sums two chunk ids into one chunk, runs every rank.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from itertools import repeat
from operator import itemgetter
from typing import Callable, Iterator

import numpy as np

from jaxcoll.ir.records import RECORDS, Promises, Row
from jaxcoll.ir.schedules import Round, Schedule, ScheduleError, Symmetry, Transfer, split_round

Contributions = frozenset  # of (rank, chunk)


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


class _SymmetryAction:
    """A symmetry's action on ``cells``' cells: g moves (o, oc) to (rank(o, g), chunk(oc, g))."""

    def __init__(self, symmetry: Symmetry, cells: _Masks):
        self.symmetry, self.cells = symmetry, cells
        # xor, one per bit b of a rank: the positions with bit b clear (runs of 2^b bits)
        self.low_halves = [cells.ranks // ((1 << 2 * s) - 1) * ((1 << s) - 1)
                           for s in (1 << b for b in range(cells.n.bit_length() - 1))]

    def __call__(self, cell: int, g: int) -> int:
        """The cell moved by g (no data stays no data)."""
        if not cell:
            return 0
        n = self.cells.n
        return self.symmetry.chunk(cell >> n, g) << n | self._bitmask(cell & self.cells.ranks, g)

    def _bitmask(self, ranks: int, g: int) -> int:
        """A bitmask of ranks moved by g: bit o to bit rank(o, g)."""
        kind, n = self.symmetry.kind, self.cells.n
        if kind == "grid":  # bit o to bit rank(o, g), level by level: as bytes, through numpy
            size = (n + 7) // 8
            bits = np.unpackbits(np.frombuffer(ranks.to_bytes(size, "little"), np.uint8),
                                 bitorder="little")
            moved = np.zeros_like(bits)
            moved[self.symmetry.rank(np.arange(n), g)] = bits[:n]
            return int.from_bytes(np.packbits(moved, bitorder="little").tobytes(), "little")
        if kind == "xor":
            for b, low in enumerate(self.low_halves):
                if g >> b & 1:  # swap each run of 2^b bits with its neighbour
                    ranks = (ranks & low) << (1 << b) | ranks >> (1 << b) & low
            return ranks
        if kind == "mirror" and g % 2:  # bit o to bit g - o: to n - 1 - o, then rotated g + 1
            ranks, g = int(format(ranks, f"0{n}b")[::-1], 2), (g + 1) % n
        return (ranks << g | ranks >> (n - g)) & self.cells.ranks


def _origins(schedule: Schedule) -> Callable[[int], list[int | None]]:
    """origins(rank): for each of rank's chunks (scratch included), the chunk id of rank's own
    data that it holds before the first round (None: nothing meaningful yet); the primitive's
    record says, for the run of chunks the input starts in (``input_at``)."""
    record, n, root = RECORDS[schedule.collective], schedule.n_ranks, schedule.root
    if not schedule.n_scratch:
        return lambda rank: record.origins(rank, n, schedule.n_chunks, root)
    at, width = schedule.input_at, schedule.n_chunks

    def origins(rank: int) -> list[int | None]:
        cells = [None] * schedule.buffer_chunks
        cells[at:at + width] = record.origins(rank, n, width, root)
        return cells
    return origins


def promised(schedule: Schedule) -> dict[tuple[int, int], set[tuple[int, int]]]:
    """{(rank, chunk): the (rank, chunk) contributions it must end with}: the cells
    :func:`verify` checks, every rank's (for pictures and tests, not thousands of ranks)."""
    return {(rank, chunk): {(r, origin) for r in range(schedule.n_ranks) if ranks >> r & 1}
            for rank, row in _promises(schedule) for chunk, origin, ranks in row}


def _promises(schedule: Schedule) -> Promises:
    """What the primitive promises, rank by rank (records.CollectiveRecord.promises), in the run of
    chunks the result must end in (``output_at``)."""
    promises = RECORDS[schedule.collective].promises(schedule.n_ranks, schedule.n_chunks,
                                                    schedule.root)
    at = schedule.output_at
    if not at:
        return promises
    return Promises(promises.ranks, lambda rank: [(chunk + at, origin, ranks) for
                                                  chunk, origin, ranks in promises.row(rank)])


def _copied_twice(round_) -> tuple[int, int, list[Transfer]] | None:
    """The first (rank, chunk, transfers writing it) where a chunk copied into is written by
    anything else in the same round; None if there is none."""
    writes = {}
    for t in round_:
        for c in t.into:
            writes.setdefault((t.dst, c), []).append(t)
    return next(((dst, c, ts) for (dst, c), ts in writes.items()
                 if len(ts) > 1 and not all(t.reduce for t in ts)), None)


def _check_writes(index: int, round_) -> None:
    """A chunk copied into may be written by nothing else in the same round."""
    conflict = _copied_twice(round_)
    if conflict is not None:
        dst, c, ts = conflict
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
    and kind, and takes time quadratic in a round's length). A symmetric round is one
    ppermute per base transfer, whose n copies send from and to every rank once: not expanded.
    """
    seen = set()
    for round_ in schedule.rounds:
        if round_.symmetry is not None or _one_matching(round_):
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


def _check_named(schedule: Schedule) -> None:
    """Raise ValueError if the schedule names no primitive."""
    if not schedule.collective:
        raise ValueError(f"{schedule.name}: the schedule names no primitive to verify against; "
                         "build it with jaxcoll.schedule(primitive, algorithm, n)")


def _run(schedule: Schedule, cells: _Sets | _Masks, record: Callable[[list], None] | None = None
         ) -> list[list]:
    """Execute the schedule on ``cells``' representation and return the final state, as
    [rank][chunk]; ``record(state)`` is called before the first round and after each. Raises
    ScheduleError at the first transfer that is not possible."""
    _check_named(schedule)
    width, origins = schedule.buffer_chunks, _origins(schedule)
    state = [cells.row(rank, origins(rank)) for rank in range(schedule.n_ranks)]
    if record:
        record(state)
    for index, round_ in enumerate(schedule.rounds):
        moves = _moves(round_)
        writes = [dst * width + d for _, dst, _, _, into in moves for d in into]
        written = set(writes)
        if len(written) < len(writes):
            _check_writes(index, round_)
        # Every transfer reads the state as it was before the round: a copy, if the round
        # writes a chunk that it reads (a swap, as in recursive doubling).
        sources = state
        if round_.switched or not written.isdisjoint([src * width + c for src, _, chunks, _, _
                                                      in moves for c in chunks]):
            sources = [row[:] for row in state]
        switched = _through_switch(index, round_, sources, cells, written, width)
        for src, dst, chunks, reduce, into in moves:
            source, row = sources[src], state[dst]
            for c, d in zip(chunks, into):
                value = source[c]
                if not value:
                    raise ScheduleError(f"round {index}: rank {src} sends chunk {c} to rank "
                                        f"{dst} before it holds any data for it")
                if not reduce:
                    row[d] = value
                    continue
                held = row[d]
                if not held:
                    raise ScheduleError(f"round {index}: rank {dst} reduces into chunk {d}, "
                                        "which holds no data yet")
                union = cells.union(held, value)
                if union is None:
                    twice = cells.contributions(held) & cells.contributions(value)
                    t = Transfer(src, dst, chunks, reduce, into)
                    raise ScheduleError(f"round {index}: {t} counts contributions twice into "
                                        f"rank {dst} chunk {d}: {sorted(twice)}")
                row[d] = union
        for rank, chunk, value in switched:
            state[rank][chunk] = value
        if record:
            record(state)
    return state


def _through_switch(index: int, round_: Round, sources: list[list], cells: _Sets | _Masks,
                    written: set[int], width: int) -> list[tuple[int, int, object]]:
    """(rank, chunk, value) every in-switch operation of the round writes: the senders' chunks
    (as they were before the round) added up, at every receiver. Raises ScheduleError where a
    sender holds no data, contributions would count twice, or a chunk is written twice."""
    writes = []
    for op in round_.switched:
        for c in op.chunks:
            value = None
            for sender in op.senders:
                held = sources[sender][c]
                if not held:
                    raise ScheduleError(f"round {index}: {op}: rank {sender} sends chunk {c} "
                                        "into the switch before it holds any data for it")
                value = held if value is None else cells.union(value, held)
                if value is None:
                    raise ScheduleError(f"round {index}: {op} counts contributions twice in "
                                        f"chunk {c} (rank {sender}'s are already in the sum)")
            for receiver in op.receivers:
                cell = receiver * width + c
                if cell in written:
                    raise ScheduleError(f"round {index}: rank {receiver} chunk {c} is written "
                                        f"twice in the round, once by {op}")
                written.add(cell)
                writes.append((receiver, c, value))
    return writes


def _moves(round_: Round) -> list[tuple[int, int, tuple[int, ...], bool, tuple[int, ...]]]:
    """Every rank's transfers of the round as (src, dst, chunks, reduce, into), in the order of
    ``round_.transfers``: plain tuples, which the cycle collector soon stops tracking, and a
    symmetric round's moved to every rank at once (numpy), not made into Transfer objects."""
    if round_.symmetry is None:
        return [(t.src, t.dst, t.chunks, t.reduce, t.into) for t in round_.base]
    symmetry, moves = round_.symmetry, []
    for t in round_.base:  # rank r: r -> rank(dst, r), chunks chunk(C, r) into chunk(I, r)
        ranks, dsts = symmetry.partners(t.dst)
        chunks, into = (zip(*symmetry.chunk(np.array(ids)[:, None], ranks).tolist())
                        for ids in (t.chunks, t.into))  # rank r's ids, a tuple
        moves += zip(ranks.tolist(), dsts.tolist(), chunks, repeat(t.reduce), into)
    return moves


def states(schedule: Schedule) -> list[list[list[Contributions | None]]]:
    """What every rank holds before the first round and after each round, as [rank][chunk]
    contribution sets; raises ScheduleError at the first transfer that is not possible."""
    history = []
    _run(schedule, _Sets(), lambda state: history.append([row[:] for row in state]))
    return history


def verify(schedule: Schedule) -> None:
    """Prove, by symbolic execution, that a schedule keeps its primitive's promise.

    Every chunk of every rank is followed as a set of contributions, (rank, chunk) pairs: a
    copy replaces the receiver's set, a reduce adds the sender's to it. At the end every rank
    must hold exactly what ``schedule.collective`` promises, each contribution once and none
    missing; and every ppermute the executor cuts a round into must send from and to each
    rank at most once. No devices and no JAX: a schedule symmetric in every round is
    followed at rank 0 alone, which keeps thousands of ranks cheap.

    Args:
      schedule: the :class:`~jaxcoll.Schedule` to check; it must name its primitive (those
        of :func:`jaxcoll.schedule` and :func:`jaxcoll.msccl.load` do).

    Returns:
      None, if the schedule keeps the promise.

    Raises:
      ScheduleError: at the first transfer that cannot happen (a chunk sent before it holds
        data, a contribution counted twice, a chunk copied into and written again in one
        round), at the first rank and chunk that ends without what was promised (naming
        what is missing and what is unexpected), or where a rank sends or receives twice in
        one ppermute.
      ValueError: if the schedule names no primitive
        to check it against.

    The ring allreduce keeps its promise; cut its last round and rank 0 is left without a
    contribution to chunk 1:

    >>> import dataclasses, jaxcoll
    >>> ring = jaxcoll.schedule("allreduce", "ring", 4)
    >>> jaxcoll.verify(ring)
    >>> cut = dataclasses.replace(ring, name="cut ring", rounds=ring.rounds[:-1])
    >>> jaxcoll.verify(cut)
    Traceback (most recent call last):
      ...
    jaxcoll.ir.schedules.ScheduleError: cut ring: after round 4, rank 0 chunk 1 holds
    [(0, 1), (2, 1), (3, 1)]; missing [(1, 1)], unexpected []
    """
    _check_named(schedule)
    promises = _promises(schedule)
    symmetry = _one_rank_symmetry(schedule, promises)
    try:
        if symmetry is None:
            _check_every_rank(schedule, _Masks(schedule.n_ranks), promises)
        else:
            _check_rank_0(schedule, symmetry, promises)
    except _MixedOrigins:  # a chunk summed two chunk ids: run again on sets, which hold that
        _check_every_rank(schedule, _Sets(), promises)
    check_matchings(schedule)


def _check_every_rank(schedule: Schedule, cells: _Sets | _Masks, promises: Promises) -> None:
    """Run every rank (_run) and check that each keeps its promise."""
    final = _run(schedule, cells)
    promised, expected = None, []
    for rank, row in promises:
        if row is not promised:
            promised, expected = row, [cells.promise(origin, ranks) for _, origin, ranks in row]
        _check_promise(schedule, cells, rank, final[rank], row, expected)


def _check_rank_0(schedule: Schedule, symmetry: Symmetry, promises: Promises) -> None:
    """Run rank 0 alone (_run_rank_0) and check its promise: every rank's is the same, moved."""
    cells = _Masks(schedule.n_ranks)
    row = promises[0][1]
    expected = [cells.promise(origin, ranks) for _, origin, ranks in row]
    _check_promise(schedule, cells, 0, _run_rank_0(schedule, symmetry, cells), row, expected)


def _check_promise(schedule: Schedule, cells: _Sets | _Masks, rank: int, held: list, row: Row,
                   expected: list) -> None:
    """Raise ScheduleError unless ``rank``'s final cells ``held`` are ``expected`` (its promised
    ``row``'s cells) in the row's chunks."""
    if [held[chunk] for chunk, _, _ in row] == expected:
        return
    last = f"after round {len(schedule.rounds) - 1}" if schedule.rounds else "with no rounds"
    for (chunk, _, _), want in zip(row, expected):
        if held[chunk] != want:
            has, want = cells.contributions(held[chunk]), cells.contributions(want)
            raise ScheduleError(
                f"{schedule.name}: {last}, rank {rank} chunk {chunk} holds {sorted(has)}; "
                f"missing {sorted(want - has)}, unexpected {sorted(has - want)}")


def _one_rank_symmetry(schedule: Schedule, promises: Promises) -> Symmetry | None:
    """The symmetry under which every rank's state is rank 0's moved (the rounds, the start and
    the promise all symmetric under it), or None."""
    symmetry = (_common_symmetry(schedule)  # in-switch operations are every rank's, written out
                if schedule.n_scratch == 0 and not schedule.in_switch else None)
    if symmetry is None or not _symmetric_start(schedule, symmetry):
        return None
    return symmetry if _symmetric_promises(promises, symmetry) else None


def common_symmetry(schedule: Schedule) -> Symmetry | None:
    """One symmetry under which the whole schedule is its own image, or None.

    Every round's transfers are mapped onto the round's own and the chunk ids permuted by the
    same action (rotate, mirror, grid: the rounds' own where they all move chunk ids alike;
    xor: the first mask, most bits first, every round agrees with). What lets ``verify`` follow
    rank 0 alone, and :mod:`jaxcoll.analysis.pipelined` price a few ranks for all.

    Args:
      schedule: a :class:`~jaxcoll.Schedule`.

    Returns:
      The :class:`~jaxcoll.Symmetry`, or None (a round written out or in-switch, kinds
      mixed, or none found).
    """
    return None if schedule.in_switch else _common_symmetry(schedule)


def _common_symmetry(schedule: Schedule) -> Symmetry | None:
    """One symmetry that maps each round's transfers onto the round's and permutes the chunk
    ids, or None (a round explicit, mixed kinds, or none found): rotate or mirror, the rounds'
    own where they all move chunk ids alike; xor, the first of the rounds' masks (most bits
    first) all rounds agree with."""
    n, symmetries = schedule.n_ranks, {round_.symmetry for round_ in schedule.rounds}
    if not symmetries or None in symmetries:
        return None
    first = next(iter(symmetries))
    if {(s.kind, s.n_ranks) for s in symmetries} != {(first.kind, n)}:
        return None
    if first.kind != "xor":
        alike = len({(s.stride, s.modulus, s.sizes) for s in symmetries}) == 1
        return first if alike and _permutes_chunks(first, schedule.n_chunks) else None
    masks = sorted({s.mask & (n - 1) for s in symmetries}, key=int.bit_count, reverse=True)
    candidates = (Symmetry("xor", n, mask=mask) for mask in masks)
    return next((candidate for candidate in candidates
                 if _permutes_chunks(candidate, schedule.n_chunks)
                 and all(_agrees(round_, candidate.mask) for round_ in schedule.rounds)), None)


def _permutes_chunks(symmetry: Symmetry, n_chunks: int) -> bool:
    """True if each rank's move keeps the chunk ids 0..n_chunks-1 among themselves (the moves
    compose as the ranks' do: ``Symmetry`` refuses a stride that does not close its cycle)."""
    if symmetry.kind == "xor":
        return n_chunks % (1 << (symmetry.mask & (symmetry.n_ranks - 1)).bit_length()) == 0
    return n_chunks % symmetry.modulus == 0


def _agrees(round_: Round, mask: int) -> bool:
    """True if the xor symmetry with ``mask`` maps the (xor) round's transfers onto the round's:
    each base transfer's (chunk, into) pairs are unchanged, as a multiset, by xor-ing both ids
    with any bit where the round's mask and ``mask`` differ."""
    differ = (round_.symmetry.mask ^ mask) & (round_.symmetry.n_ranks - 1)
    return all(sorted((c ^ bit, i ^ bit) for c, i in pairs) == pairs
               for pairs in (sorted(zip(t.chunks, t.into)) for t in round_.base)
               for bit in (1 << b for b in _bits(differ)))


def _symmetric_start(schedule: Schedule, symmetry: Symmetry) -> bool:
    """True if every rank r starts as rank 0 moved by r: its chunk chunk(c, r) holds its own data
    of chunk chunk(origins(0)[c], r), or nothing where rank 0's chunk c holds nothing."""
    origins = _origins(schedule)
    first = np.array(origins(0), dtype=float)  # None (no data): nan
    held = np.flatnonzero(~np.isnan(first))
    for rank in range(1, schedule.n_ranks):
        moved = np.full(schedule.n_chunks, np.nan)
        moved[symmetry.chunk(held, rank)] = symmetry.chunk(first[held].astype(np.int64), rank)
        if not np.array_equal(np.array(origins(rank), dtype=float), moved, equal_nan=True):
            return False
    return True


def _symmetric_promises(promises: Promises, symmetry: Symmetry) -> bool:
    """True if every rank r is promised rank 0's promise moved by r (checked where each mask is
    every rank or one rank, as records.py's are; any other mask: False)."""
    n = symmetry.n_ranks
    if list(promises.ranks) != list(range(n)):
        return False
    tables = _promise_tables(promises, n)
    first = next(tables)
    if first is None:
        return False
    chunks, origins, ranks = first.T
    for rank, table in enumerate(tables, start=1):
        moved = np.stack([symmetry.chunk(chunks, rank), symmetry.chunk(origins, rank),
                          np.where(ranks < 0, -1, symmetry.rank(ranks, rank))], axis=1)
        if table is None or not np.array_equal(_sorted_rows(moved), table):
            return False
    return True


def _promise_tables(promises: Promises, n: int) -> Iterator[np.ndarray | None]:
    """Each promised row, in rank order, as sorted (chunk, origin, rank) rows, rank -1 for every
    rank; None if a mask is neither every rank nor one rank. Rows are built one at a time; a
    row shared with the rank before is read once, masks equal to its are classified once."""
    row = masks = owners = table = None
    for _, promised in promises:
        if promised is not row:
            row, next_masks = promised, list(map(itemgetter(2), promised))
            if next_masks != masks:  # alltoall's rows share their ints: equal by identity, fast
                masks, owners = next_masks, _owners(next_masks, n)
            chunks, origins = (np.fromiter(map(itemgetter(k), row), np.int64, len(row))
                               for k in (0, 1))
            table = None if owners is None else _sorted_rows(
                np.column_stack([chunks, origins, owners]))
        yield table


def _owners(masks: list[int], n: int) -> np.ndarray | None:
    """Each bitmask's one rank, -1 for every rank; None if a mask is neither."""
    ones = np.fromiter(map(int.bit_count, masks), np.int64, len(masks))
    highest = np.fromiter(map(int.bit_length, masks), np.int64, len(masks)) - 1
    every = (ones == n) & (highest == n - 1)
    return np.where(every, -1, highest) if np.all(every | (ones == 1)) else None


def _sorted_rows(table: np.ndarray) -> np.ndarray:
    """The rows of a 2-d table in lexicographic order."""
    return table[np.lexsort(table.T[::-1])]


def _run_rank_0(schedule: Schedule, symmetry: Symmetry, cells: _Masks) -> list[int]:
    """Rank 0's final cells where every rank's state is rank 0's moved by ``symmetry`` (the
    one-rank view above); raises ScheduleError where _run would, naming rank 0's transfer."""
    move = _SymmetryAction(symmetry, cells)
    row = cells.row(0, _origins(schedule)(0))
    for index, round_ in enumerate(schedule.rounds):
        # rank 0's transfer t = 0 -> d as rank q = sender(d) makes it arrives at rank 0
        arrivals = [(t, round_.symmetry.at(t, symmetry.sender(t.dst))) for t in round_.base]
        _check_arrivals(index, [arriving for _, arriving in arrivals], symmetry)
        # q's chunk c holds rank 0's chunk chunk(c, d) moved by q (d undoes q); all read first
        sent = [[move(row[symmetry.chunk(c, t.dst)], arriving.src) for c in arriving.chunks]
                for t, arriving in arrivals]
        for (t, arriving), values in zip(arrivals, sent):
            _receive(index, t, arriving, values, row, move)
    return row


def _check_arrivals(index: int, arrivals: list[Transfer], symmetry: Symmetry) -> None:
    """_check_writes on the transfers arriving at rank 0, named as at the receiver d of the
    first one's base transfer (moved by d, which undoes its sender): where _run names it."""
    conflict = _copied_twice(arrivals)
    if conflict is not None:
        d = symmetry.sender(conflict[2][0].src)
        _check_writes(index, [symmetry.at(arriving, d) for arriving in arrivals])


def _receive(index: int, t: Transfer, arriving: Transfer, values: list[int], row: list[int],
             move: _SymmetryAction) -> None:
    """Rank 0 copies or reduces ``values``, what ``arriving`` (rank 0's transfer ``t`` as its
    sender makes it) carries, into ``row``; an error is named at ``t`` (moved by its d)."""
    d, cells, symmetry = t.dst, move.cells, move.symmetry
    for c, i, value in zip(arriving.chunks, arriving.into, values):
        if not value:
            raise ScheduleError(f"round {index}: rank 0 sends chunk {symmetry.chunk(c, d)} to "
                                f"rank {d} before it holds any data for it")
        if not t.reduce:
            row[i] = value
            continue
        held = row[i]
        if not held:
            raise ScheduleError(f"round {index}: rank {d} reduces into chunk "
                                f"{symmetry.chunk(i, d)}, which holds no data yet")
        union = cells.union(held, value)
        if union is None:
            twice = cells.contributions(move(held, d)) & cells.contributions(move(value, d))
            raise ScheduleError(f"round {index}: {t} counts contributions twice into rank {d} "
                                f"chunk {symmetry.chunk(i, d)}: {sorted(twice)}")
        row[i] = union


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
    primitive = RECORDS[schedule.collective].dual
    if not primitive:
        return schedule
    n, width = schedule.n_ranks, schedule.n_chunks
    # the transpose flows from the result's chunks back to the input's
    layout = dict(n_scratch=schedule.n_scratch, input_at=schedule.output_at,
                  output_at=schedule.input_at)
    shell = Schedule(f"dual of {schedule.name}", n, width, (), primitive, schedule.root,
                     **layout)
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
                    schedule.root, **layout)
