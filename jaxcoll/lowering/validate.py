"""Translation validation: the executor's plan checked against the schedule it came from.

``verify`` proves what a schedule's rounds do; the executor runs a *plan* derived from them
(plan.py): ppermute pairs, chunk ids each rank computes from its rank by their compact form,
receiver masks and a write mode. Before anything is traced, :func:`check` proves that the plan
makes every rank do exactly what the rounds say, read as ``verify`` reads them
(``Symmetry.at`` at every rank), so a lowering that reads a schedule another way is an error,
never a wrong answer. Plain numpy, no JAX; ``plan.lower`` runs it once per schedule and caches
the checked plan.

- **An explicit round**: the plan's transfers (each pair of a ppermute, with the ids its table
  gives the sender and the receiver) are the round's transfers, no more and no fewer.
- **A symmetric round**: rank 0's transfers, and what reaches rank 0, are checked the same way;
  every other rank is rank 0 moved by the round's symmetry, which the plan does where
  (1) the symmetry is a group action (``Symmetry`` refuses a stride that does not close its
  cycle), (2) each ppermute's pairs are every rank's copy of rank 0's transfer, and (3) each
  table of ids is, at every rank r, its rank 0 row moved by r: its compact form is the
  symmetry's own (kind, modulus, stride, mask), and a run of ids the executor slices stays a
  run at every rank. Rank r then sends ``chunk(C, r)`` to ``rank(d, r)``, which receives it into
  ``chunk(chunk(I, q0), r)``: ``chunk(I, r)`` by (1), as ``Symmetry.at`` says.
- **Every round**: each ppermute is a (partial) permutation of the ranks (a pair (r, r) is a
  local transfer); a matching's receiver mask is its receivers; where the round is one scatter,
  no rank writes a chunk twice in it.

The rounds are checked all at once, not one by one: a plan of thousands of rounds is a few
numpy operations on arrays of all its transfers (``ids.id_values`` reads every table in one
go; a run of ids is compared by its first; thousands of small arrays are read as their
bytes joined): checking adds a few percent to the time making the plans takes (``python
bench/plan_check.py``; one machine's numbers: bench/RESULTS.md, "Numbers that were in code
comments").

Which NaN a reduce keeps when both operands are NaN (``lower_sender_first``) is the executor's
tie-break, not data movement; tests/test_reliability.py checks it.

One job, the plan checked against its schedule, explicit and symmetric alike.
"""

from __future__ import annotations

from itertools import chain
from math import gcd
from operator import attrgetter
from typing import NamedTuple

import numpy as np

from jaxcoll.ir.schedules import Round, Schedule, ScheduleError, Symmetry
from jaxcoll.lowering.ids import flattened, id_values, kept_shapes


class _Disagrees(Exception):
    """The plan does something the round does not (the message says what); ``at`` is the
    plan's segment where it does."""

    def __init__(self, message: str, at: int | None = None):
        super().__init__(message)
        self.at = at


def check(schedule: Schedule, segments) -> None:
    """Raise ScheduleError unless ``segments`` (``plan.lower``'s) run exactly ``schedule``'s
    rounds at every rank."""
    placed, n_steps, n_explicit = _placed(schedule, segments)
    explicit, symmetric = [], []
    try:
        mixed = np.flatnonzero((n_explicit != 0) & (n_explicit != n_steps))
        if len(mixed):
            raise _Disagrees("one loop runs symmetric and explicit rounds", int(mixed[0]))
        _check_shapes([segment for segment, _, _ in placed], n_steps)
        for k, (segment, indices, rounds) in enumerate(placed):
            (explicit if n_explicit[k] else symmetric).append((k, segment, indices, rounds))
        _check_explicit(explicit, schedule.n_ranks, schedule.buffer_chunks)
        _check_symmetric(symmetric, schedule.n_ranks)
    except _Disagrees as error:
        indices = placed[error.at][1]
        where = (f"round {indices[0]}" if len(indices) == 1 else
                 f"rounds {indices[0]}..{indices[-1]}")
        raise ScheduleError(f"{schedule.name}: {where}: the lowered program disagrees with "
                            f"the schedule: {error} (a bug in jaxcoll's lowering; nothing "
                            "was run)") from None
    except (ValueError, IndexError) as error:  # tables the executor could not read as stored
        raise ScheduleError(f"{schedule.name}: the lowered program's tables are malformed: "
                            f"{error} (a bug in jaxcoll's lowering; nothing was run)") from None


def _placed(schedule: Schedule, segments) -> tuple[list, np.ndarray, np.ndarray]:
    """Each segment with the indices of the rounds it runs (empty rounds run nothing) and the
    rounds; per segment its steps and how many of its rounds are explicit."""
    taking_place = [i for i, r in enumerate(schedule.rounds) if r.base]
    rounds = [schedule.rounds[i] for i in taking_place]
    n_steps = np.fromiter(map(attrgetter("n_steps"), segments), np.int64, len(segments))
    ends = np.cumsum(n_steps)
    at = int(ends[-1]) if len(ends) else 0
    if at != len(taking_place) or (n_steps < 1).any():
        raise ScheduleError(f"{schedule.name}: the lowered program runs {at} rounds in "
                            f"loops of {sorted(set(n_steps.tolist()))}, the schedule "
                            f"{len(taking_place)} (a bug in jaxcoll's lowering; nothing was "
                            "run)")
    starts = ends - n_steps
    placed = [(segment, taking_place[a:b], rounds[a:b])
              for segment, a, b in zip(segments, starts.tolist(), ends.tolist())]
    explicit = np.fromiter((r.symmetry is None for r in rounds), np.int64, len(rounds))
    n_explicit = np.add.reduceat(explicit, starts) if len(starts) else starts
    return placed, n_steps, n_explicit


def _check_shapes(segments: list, n_steps: np.ndarray) -> None:
    """Each ppermute's tables are for its segment's steps and the chunks it moves, its
    receiver mask (if any) one step of one flag (read for all segments at once)."""
    counts = [_counts(segments, name) for name in ("matchings", "send_ids", "recv_ids",
                                                    "receivers")]
    bad = np.flatnonzero((np.array(counts[1:]) != counts[0]).any(axis=0))
    if len(bad):
        raise _Disagrees(f"{counts[0][bad[0]]} ppermutes, but not as many tables of each "
                         "kind", int(bad[0]))
    segment_of = np.repeat(np.arange(len(segments)), counts[0])  # per ppermute
    j = np.arange(len(segment_of)) - (np.cumsum(counts[0]) - counts[0])[segment_of]
    masks = _flat(segments, "receivers")
    masked = [p for p, mask in enumerate(masks) if mask is not None]
    shapes = np.array([(1, 1, 0)] + [(masks[p].n_steps, masks[p].n_moved, masks[p].first_only)
                                     for p in masked], dtype=np.int64)
    wrong = np.flatnonzero((shapes[1:] != (1, 1, 0)).any(axis=1))
    if len(wrong):
        p = masked[wrong[0]]
        raise _Disagrees(f"ppermute {j[p]}'s receiver mask is not one step of one flag",
                         int(segment_of[p]))
    n_moved = _attribute(_flat(segments, "matchings"), "n_moved")
    for name in ("send_ids", "recv_ids"):
        tables = _flat(segments, name)
        steps, moved = _attribute(tables, "n_steps"), _attribute(tables, "n_moved")
        wrong = (steps != n_steps[segment_of]) | (moved != n_moved)
        if wrong.any():
            p = np.argmax(wrong)
            raise _Disagrees(f"ppermute {j[p]}'s ids are for {steps[p]} steps of {moved[p]} "
                             f"chunks, not {n_steps[segment_of[p]]} of {n_moved[p]}",
                             int(segment_of[p]))


def _counts(segments: list, name: str) -> np.ndarray:
    """len(segment.<name>) of each segment."""
    return np.fromiter(map(len, map(attrgetter(name), segments)), np.int64, len(segments))


def _flat(segments: list, name: str) -> list:
    """Every segment's tuple ``name`` (matchings, tables), one after the other."""
    return list(chain.from_iterable(map(attrgetter(name), segments)))


def _attribute(items: list, name: str) -> np.ndarray:
    """An int attribute of each item."""
    return np.fromiter(map(attrgetter(name), items), np.int64, len(items))


# --- explicit rounds: the plan's transfers are the rounds' ---------------------------------

class _Matchings:
    """Every ppermute of the explicit segments, flattened: per ppermute p its segment
    (``at``), position in it (``j``), ppermute, steps and first pair, and every pair."""

    def __init__(self, explicit):
        per_segment = [len(segment.matchings) for _, segment, _, _ in explicit]
        self.at = list(chain.from_iterable([k] * c for (k, *_), c in zip(explicit, per_segment)))
        self.j = list(chain.from_iterable(map(range, per_segment)))
        self.matchings = _flat([segment for _, segment, _, _ in explicit], "matchings")
        self.segments = list(chain.from_iterable(
            [segment] * c for (_, segment, _, _), c in zip(explicit, per_segment)))
        self.indices = list(chain.from_iterable(
            [indices] * c for (_, _, indices, _), c in zip(explicit, per_segment)))
        perms = list(map(attrgetter("perm"), self.matchings))
        self.n_pairs = np.fromiter(map(len, perms), np.int64, len(perms))
        self.first_pair = np.cumsum(self.n_pairs) - self.n_pairs
        self.pairs = np.fromiter(chain.from_iterable(chain.from_iterable(perms)), np.int64,
                                 2 * int(self.n_pairs.sum())).reshape(-1, 2)  # (all pairs, 2)
        self.pair_of = np.repeat(np.arange(len(self.matchings)), self.n_pairs)

    def side(self, column: int) -> list[np.ndarray]:
        """Per ppermute p, its senders (column 0) or receivers (1)."""
        ranks = np.ascontiguousarray(self.pairs[:, column])
        ends = (self.first_pair + self.n_pairs).tolist()
        return [ranks[a:b] for a, b in zip(self.first_pair.tolist(), ends)]

    def pairs_of(self, p: int) -> np.ndarray:
        """(n_pairs, 2): ppermute p's pairs."""
        return self.pairs[self.first_pair[p]:self.first_pair[p] + self.n_pairs[p]]


class _Rows:
    """(transfers, n_moved) chunk ids, kept as each row's first id (``first``) where every
    row is a run c, c + 1, ... (a broadcast's whole buffer: no million-id arrays)."""

    def __init__(self, n_moved: int, full: np.ndarray | None = None,
                 first: np.ndarray | None = None):
        self.n_moved, self.full, self.first = n_moved, full, first

    def rows(self, picked=slice(None)) -> np.ndarray:
        if self.full is not None:
            return self.full[picked]
        return self.first[picked][:, None] + np.arange(self.n_moved)

    def equal(self, other: "_Rows", order: np.ndarray) -> bool:
        """True if this one's rows ``order`` are the other's rows."""
        if self.first is not None and other.first is not None:
            return np.array_equal(self.first[order], other.first)
        return np.array_equal(self.rows(order), other.rows())


class _TransfersOfWidth:
    """Transfers of one width (chunks moved): ``heads`` (transfers, 4 or 5) round, src, dst,
    reduce (and the plan's ppermute p), and the ids ``sent`` and received ``into``."""

    def __init__(self, heads: np.ndarray, sent: _Rows, into: _Rows):
        self.heads, self.sent, self.into = heads, sent, into

    def rows(self) -> np.ndarray:
        """(transfers, 4 + 2 n_moved): round, src, dst, reduce, ids sent, ids received into."""
        return np.column_stack([self.heads[:, :4], self.sent.rows(), self.into.rows()])

    def key(self, n_ranks: int) -> np.ndarray:
        """(round, src, dst, reduce) as one number per transfer."""
        h = self.heads
        return ((h[:, 0] * n_ranks + h[:, 1]) * n_ranks + h[:, 2]) * 2 + h[:, 3]


def _check_explicit(explicit, n_ranks: int, n_chunks: int) -> None:
    """The plan's transfers, round by round, are the rounds' transfers (as multisets)."""
    if not explicit:
        return
    m = _Matchings(explicit)
    _check_permutations(m, n_ranks)
    _check_receivers(m, n_ranks)
    planned, wanted = _planned_moves(m), _scheduled_moves(explicit)
    for n_moved in sorted(wanted.keys() | planned.keys()):
        got, want = planned.get(n_moved), wanted.get(n_moved)
        if got is None or want is None or not _same_moves(got, want, n_ranks):
            empty = np.zeros((0, 4 + 2 * n_moved), np.int64)
            _refuse_moves(explicit, empty if got is None else got.rows(),
                          empty if want is None else want.rows())
    _check_one_write(m, planned, n_ranks, n_chunks)


def _same_moves(got: _TransfersOfWidth, want: _TransfersOfWidth, n_ranks: int) -> bool:
    """True if two sets of transfers are equal as multisets: paired by (round, src, dst,
    reduce) where no two share those, else compared as sorted rows."""
    if len(got.heads) != len(want.heads):
        return False
    key_got, key_want = got.key(n_ranks), want.key(n_ranks)
    order_got, order_want = np.argsort(key_got), np.argsort(key_want)
    if not np.array_equal(key_got[order_got], key_want[order_want]):
        return False
    if (np.diff(key_want[order_want]) == 0).any():  # two alike transfers in a round
        return np.array_equal(_sorted(got.rows()), _sorted(want.rows()))
    mine = np.empty_like(order_got)
    mine[order_want] = order_got  # the planned transfer paired with each scheduled one
    return got.sent.equal(want.sent, mine) and got.into.equal(want.into, mine)


def _refuse_moves(explicit, got: np.ndarray, want: np.ndarray) -> None:
    """Raise, naming the first round whose planned and scheduled transfers differ."""
    i = _first_differing_round(got, want)
    k, step = next((k, indices.index(i)) for k, _, indices, _ in explicit if i in indices)
    raise _Disagrees(f"round {step} of the loop: the plan moves {_difference(got, want, i)}, "
                     f"the schedule {_difference(want, got, i)}", k)


def _check_permutations(m: _Matchings, n_ranks: int) -> None:
    """Each ppermute a partial permutation of the ranks."""
    if len(m.pairs) and (m.pairs.min() < 0 or m.pairs.max() >= n_ranks):
        outside = (m.pairs < 0).any(axis=1) | (m.pairs >= n_ranks).any(axis=1)
        bad = int(m.pair_of[np.argmax(outside)])
        raise _Disagrees(f"ppermute {m.j[bad]} has pairs outside ranks 0..{n_ranks - 1}",
                         m.at[bad])
    for side in (0, 1):
        ordered = np.sort(m.pair_of * n_ranks + m.pairs[:, side])  # (ppermute, rank): once
        twice = np.flatnonzero(ordered[1:] == ordered[:-1])
        if len(twice):
            bad = int(ordered[twice[0]] // n_ranks)
            raise _Disagrees(f"a rank sends or receives twice in ppermute {m.j[bad]}",
                             m.at[bad])


def _check_receivers(m: _Matchings, n_ranks: int) -> None:
    """A ppermute's receiver mask flags exactly its receivers (no mask: every rank receives).
    A mask of few ranks' rows whose default row is 0 flags those ranks whose own row (the
    first, where a rank is listed twice, as the executor reads it) is not 0; any other mask
    is read at every rank."""
    masks = [m.segments[p].receivers[j] for p, j in enumerate(m.j)]
    for p, mask in enumerate(masks):
        if mask is None and m.n_pairs[p] != n_ranks:
            raise _Disagrees(f"ppermute {m.j[p]} masks no receivers, but only "
                             f"{m.n_pairs[p]} of {n_ranks} ranks receive", m.at[p])
    owners = np.array([p for p, mask in enumerate(masks) if mask is not None], dtype=np.int64)
    if not len(owners):
        return
    few = np.array([masks[p].kind == "rows" for p in owners], dtype=bool)
    defaults, sizes = flattened([masks[p].arrays.default for p in owners[few]])
    nonzero = np.repeat(np.arange(len(sizes)), sizes)[defaults != 0]
    few[np.flatnonzero(few)[nonzero]] = False  # rows whose default flags every other rank
    flagged = [_flagged_rows(m, [masks[p] for p in owners[few]], owners[few], n_ranks)]
    read = [(masks[p], np.arange(n_ranks)) for p in owners[~few]]
    if read:
        values = id_values(read)  # (masks x n_ranks,)
        flagged.append((np.repeat(owners[~few], n_ranks) * n_ranks
                        + np.tile(np.arange(n_ranks), len(read)))[values != 0])
    flagged = np.sort(np.concatenate(flagged))
    masked = np.isin(m.pair_of, owners)
    receivers = np.sort(m.pair_of[masked] * n_ranks + m.pairs[masked, 1])  # (ppermute, rank)
    if len(flagged) != len(receivers) or (flagged != receivers).any():
        p = int(np.setxor1d(flagged, receivers)[0] // n_ranks)
        masked = np.flatnonzero(masks[p].rows(np.arange(n_ranks)))
        raise _Disagrees(f"ppermute {m.j[p]}'s receiver mask is ranks {masked.tolist()}, "
                         f"its receivers {sorted(int(d) for d in m.pairs_of(p)[:, 1])}",
                         m.at[p])


def _flagged_rows(m: _Matchings, masks: list, owners: np.ndarray, n_ranks: int) -> np.ndarray:
    """(ppermute, rank) of every rank flagged by masks of few ranks' rows, default row 0."""
    ranks, sizes = flattened([mask.arrays.ranks for mask in masks])
    rows, n_rows = flattened([mask.arrays.rows for mask in masks])
    wrong = np.flatnonzero(sizes != n_rows)
    if len(wrong):
        p = int(owners[wrong[0]])
        raise _Disagrees(f"ppermute {m.j[p]}'s receiver mask has not one row per rank it "
                         "lists", m.at[p])
    keys = np.repeat(owners, sizes) * n_ranks + ranks
    keys, first = np.unique(keys, return_index=True)
    return keys[rows[first] != 0]


def _planned_moves(m: _Matchings) -> dict[int, _TransfersOfWidth]:
    """Per number of chunks moved: the plan's transfers, every pair at every step of every
    ppermute, with the ppermute p in the heads' last column (every table read in one go)."""
    by_moved: dict[int, list[int]] = {}
    for p, matching in enumerate(m.matchings):
        by_moved.setdefault(matching.n_moved, []).append(p)
    groups = list(by_moved.items())
    senders, receivers = m.side(0), m.side(1)
    both = _ids_of([(m.segments[p].send_ids[m.j[p]], senders[p])
                    for _, which in groups for p in which]
                   + [(m.segments[p].recv_ids[m.j[p]], receivers[p])
                      for _, which in groups for p in which], groups + groups)
    sent, into = both[:len(groups)], both[len(groups):]
    moves = {}
    for (n_moved, which), sent_rows, into_rows in zip(groups, sent, into):
        which = np.array(which)
        n_steps = np.array([m.segments[p].n_steps for p in which], dtype=np.int64)
        counts = n_steps * m.n_pairs[which]
        of = np.repeat(np.arange(len(which)), counts)  # each entry's ppermute, in which
        local = np.arange(len(of)) - (np.cumsum(counts) - counts)[of]
        step, pair = local // m.n_pairs[which][of], local % m.n_pairs[which][of]
        pairs = m.pairs[m.first_pair[which][of] + pair]  # (entries, 2)
        indices = np.fromiter(chain.from_iterable(m.indices[p] for p in which), np.int64,
                              int(n_steps.sum()))
        rounds = indices[(np.cumsum(n_steps) - n_steps)[of] + step]
        reduce = np.array([m.matchings[p].reduce for p in which], dtype=np.int64)[of]
        moves[n_moved] = _TransfersOfWidth(
            np.column_stack([rounds, pairs, reduce, which[of]]), sent_rows, into_rows)
    return moves


def _ids_of(items, groups) -> list[_Rows]:
    """Per group of ppermutes moving n chunks, the ids of its (ids, ranks) items (in the
    groups' order), a row per step and rank: runs by their first ids where every item of the
    group keeps only those."""
    shapes = kept_shapes(items)
    kept = id_values(items, runs=False, shapes=shapes)
    ends = np.cumsum(shapes.prod(axis=1))
    out, at = [], 0
    for n_moved, which in groups:
        mine, start = items[at:at + len(which)], (ends[at - 1] if at else 0)
        values = kept[start:ends[at + len(which) - 1]]
        first_only = {ids.first_only for ids, _ in mine}
        if first_only == {True}:
            out.append(_Rows(n_moved, first=values))
        elif first_only == {False}:
            out.append(_Rows(n_moved, full=values.reshape(-1, n_moved)))
        else:  # some runs, some not: write the runs out
            out.append(_Rows(n_moved, full=id_values(mine).reshape(-1, n_moved)))
        at += len(which)
    return out


def _scheduled_moves(explicit) -> dict[int, _TransfersOfWidth]:
    """Per number of chunks moved: the rounds' transfers. Transfers often share their tuples
    of ids (into is chunks; one tuple for every round of a broadcast): each is read once."""
    indices = list(chain.from_iterable(indices for _, _, indices, _ in explicit))
    bases = [r.base for _, _, _, rounds in explicit for r in rounds]
    transfers = list(chain.from_iterable(bases))
    n = len(transfers)
    round_of = np.repeat(np.array(indices, dtype=np.int64),
                         np.fromiter(map(len, bases), np.int64, len(bases)))
    heads = np.column_stack([round_of] + [_attribute(transfers, name)
                                          for name in ("src", "dst", "reduce")])
    tuples = list(map(attrgetter("chunks"), transfers)) + list(map(attrgetter("into"), transfers))
    width = np.fromiter(map(len, tuples), np.int64, 2 * n)  # chunks' widths, then into's
    if (width[:n] != width[n:]).any():
        raise ValueError("a transfer receives into a number of chunks not the number it sends")
    addresses, first, slot = np.unique(np.fromiter(map(id, tuples), np.uint64, 2 * n),
                                       return_index=True, return_inverse=True)
    moves, row_of = {}, np.zeros(len(addresses), np.int64)  # per distinct tuple, its row
    for n_moved in np.unique(width[:n]).tolist():
        mine = np.flatnonzero(width[first] == n_moved)  # distinct tuples n_moved long
        row_of[mine] = np.arange(len(mine))
        distinct = np.fromiter(chain.from_iterable(tuples[i] for i in first[mine].tolist()),
                               np.int64, len(mine) * n_moved).reshape(-1, n_moved)
        runs = (np.diff(distinct, axis=1) == 1).all(axis=1)
        picked = np.flatnonzero(width[:n] == n_moved)
        moves[n_moved] = _TransfersOfWidth(heads[picked], *(
            _Rows(n_moved, first=distinct[rows, 0]) if runs[rows].all()
            else _Rows(n_moved, full=distinct[rows])
            for rows in (row_of[slot[picked]], row_of[slot[n + picked]])))
    return moves


def _sorted(rows: np.ndarray) -> np.ndarray:
    """Rows in lexicographic order."""
    return rows[np.lexsort(rows.T[::-1])] if len(rows) > 1 else rows


def _first_differing_round(these: np.ndarray, those: np.ndarray) -> int:
    """The first round whose rows differ between two sets of rows (round in column 0)."""
    for i in np.union1d(these[:, 0], those[:, 0]).tolist():
        a, b = these[these[:, 0] == i], those[those[:, 0] == i]
        if a.shape != b.shape or not np.array_equal(_sorted(a), _sorted(b)):
            return i
    raise AssertionError("the rows differ in no round")


def _difference(these: np.ndarray, those: np.ndarray, round_: int) -> list[str]:
    """Round ``round_``'s transfers in ``these`` that ``those`` lacks, written as transfers."""
    known = {tuple(r) for r in those[those[:, 0] == round_].tolist()}
    lacking = []
    for _, src, dst, reduce, *ids in these[these[:, 0] == round_].tolist():
        if (round_, src, dst, reduce, *ids) not in known:
            half = len(ids) // 2
            lacking.append(f"{src}->{dst} {ids[:half]}>{ids[half:]}{'+' if reduce else '='}")
    return lacking[:3]


def _check_one_write(m: _Matchings, planned: dict, n_ranks: int, n_chunks: int) -> None:
    """Where a segment is one scatter, no rank writes a chunk twice in one of its rounds:
    within a transfer (a run of ids is distinct by itself; other rows are sorted), then
    across the transfers of a rank that receives more than one in a round."""
    one_write = np.array([segment.one_write for segment in m.segments], dtype=bool)
    picked = [one_write[g.heads[:, 4]] for g in planned.values()]
    for g, at in zip(planned.values(), picked):
        if g.into.full is not None and g.into.n_moved > 1:
            ordered = np.sort(g.into.full[at], axis=1)
            twice = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
            if len(twice):
                i, p = g.heads[at][twice[0], [0, 4]].tolist()
                raise _Disagrees(f"round {m.indices[p].index(i)} of the loop is one scatter, "
                                 "but a rank writes a chunk twice in it", m.at[p])
    takers = [(g.heads[at, 0] * n_ranks + g.heads[at, 2])  # (round, receiver) per transfer
              for g, at in zip(planned.values(), picked)]
    values, counts = np.unique(np.concatenate(takers), return_counts=True)
    shared = values[counts > 1]
    if not len(shared):
        return
    keys, ids, owners = [], [], []  # per id written: (round, receiver), id, ppermute
    for g, at, taker in zip(planned.values(), picked, takers):
        looked_at = np.flatnonzero(at)[np.isin(taker, shared)]
        keys.append(np.repeat(g.heads[looked_at, 0] * n_ranks + g.heads[looked_at, 2],
                              g.into.n_moved))
        ids.append(g.into.rows(looked_at).ravel())
        owners.append(np.repeat(g.heads[looked_at, 4], g.into.n_moved))
    keys, ids, owners = map(np.concatenate, (keys, ids, owners))
    span = max(n_chunks, int(ids.max(initial=0)) + 1)
    order = np.argsort(keys * span + ids, kind="stable")
    twice = np.flatnonzero(np.diff((keys * span + ids)[order]) == 0)
    if len(twice):
        p, i = int(owners[order[twice[0]]]), int(keys[order[twice[0]]] // n_ranks)
        raise _Disagrees(f"round {m.indices[p].index(i)} of the loop is one scatter, but a "
                         "rank writes a chunk twice in it", m.at[p])


# --- symmetric rounds: rank 0 checked, the rest by the symmetry ----------------------------

class _Table(NamedTuple):
    """One table of ids of a symmetric segment k's ppermute j: what rank 0 sends (or
    receives into, from q0), as the plan stores it (``ids``) and as the schedule says
    (``scheduled``: the ids of each step, one after the other)."""

    k: int
    j: int
    what: str
    ids: object
    symmetry: Symmetry
    q0: int
    n_steps: int
    n_moved: int
    scheduled: object


def _check_symmetric(symmetric, n_ranks: int) -> None:
    """Rank 0's transfers and receipts checked; the rest follows by the symmetry (above)."""
    actions: dict[Symmetry, bool] = {}
    tables: list[_Table] = []
    for k, segment, _, rounds in symmetric:
        symmetry = rounds[0].symmetry
        action = actions.get(symmetry)
        if action is None:
            action = actions[symmetry] = _group_action(symmetry, n_ranks)
        if not action:
            raise _Disagrees(f"{symmetry} is not a group action on the {n_ranks} ranks (its "
                             "moves do not compose as the ranks' do), which running rank 0's "
                             "program moved by the rank needs", k)
        tables += _rank_0_tables(k, segment, rounds, symmetry)
    if not tables:
        return
    want = _scheduled_at_rank_0(tables)
    rank_0 = np.zeros(1, dtype=np.int64)
    got = id_values([(t.ids, rank_0) for t in tables])
    if not np.array_equal(got, want):
        at = np.cumsum([t.n_steps * t.n_moved for t in tables])
        i = int(np.searchsorted(at, np.argmax(got != want), side="right"))
        t, start = tables[i], at[i] - tables[i].n_steps * tables[i].n_moved
        mine = got[start:at[i]].reshape(t.n_steps, t.n_moved)
        rows = want[start:at[i]].reshape(t.n_steps, t.n_moved)
        step = int(np.argmax((mine != rows).any(axis=1)))
        raise _Disagrees(f"round {step} of the loop: rank 0 {t.what} chunks "
                         f"{mine[step].tolist()} in ppermute {t.j}, the schedule "
                         f"{rows[step].tolist()}", t.k)
    _moves_as_symmetry(tables, want)
    _writes_once(tables, want, {k for k, segment, _, _ in symmetric if segment.one_write})


def _group_action(symmetry: Symmetry, n_ranks: int) -> bool:
    """True if the symmetry's moves compose as the ranks do (checked again here: a Symmetry
    can be made without its constructor)."""
    if symmetry.n_ranks != n_ranks:
        return False
    if symmetry.kind == "xor":
        return not n_ranks & (n_ranks - 1)
    return not symmetry.stride * n_ranks % symmetry.modulus


def _rank_0_tables(k: int, segment, rounds: list[Round], symmetry: Symmetry) -> list[_Table]:
    """Per ppermute, what rank 0 sends and what it receives into; refused where the rounds'
    partners or the ppermutes' pairs are not the symmetry's."""
    base = rounds[0].base
    if len(rounds) > 1:
        shapes = [(t.dst, len(t.chunks), t.reduce) for t in base]
        for round_ in rounds[1:]:
            if round_.symmetry != symmetry or [(t.dst, len(t.chunks), t.reduce)
                                               for t in round_.base] != shapes:
                raise _Disagrees("one loop runs rounds of different symmetries or partners", k)
    if len(base) != len(segment.matchings):
        raise _Disagrees(f"{len(segment.matchings)} ppermutes for {len(base)} transfers of "
                         "rank 0", k)
    tables = []
    for j, (matching, t) in enumerate(zip(segment.matchings, base)):
        if segment.receivers[j] is not None:  # every rank sends and receives once: no mask
            raise _Disagrees(f"ppermute {j} masks receivers, but every rank receives", k)
        # the pairs verify expands the round to (Symmetry.partners), the same tuple or equal
        dst, pairs = t.dst, symmetry.pairs(t.dst)
        if (len(t.chunks), t.reduce) != (matching.n_moved, matching.reduce) or (
                matching.perm is not pairs and matching.perm != pairs):
            raise _Disagrees(f"ppermute {j} is not every rank's copy of rank 0's transfer to "
                             f"rank {dst}", k)
        q0 = symmetry.sender(dst)  # who sends to rank 0: its pair is (q0, 0)
        if pairs[q0] != (q0, 0):
            raise _Disagrees(f"rank {q0}'s copy of rank 0's transfer to {dst} is not to "
                             "rank 0", k)
        n_steps, n_moved = len(rounds), matching.n_moved
        chunks = [round_.base[j].chunks for round_ in rounds]
        into = [round_.base[j].into for round_ in rounds]
        tables += [_Table(k, j, "sends", segment.send_ids[j], symmetry, q0, n_steps, n_moved,
                          chunks),
                   _Table(k, j, "receives into", segment.recv_ids[j], symmetry, q0, n_steps,
                          n_moved, into)]
    return tables


def _scheduled_at_rank_0(tables: list[_Table]) -> np.ndarray:
    """Every table's ids as the schedule says, one after the other: rank 0 sends ``chunks``
    and receives rank q0's transfer into ``chunk(into, q0)`` (each symmetry's at once)."""
    sizes = [t.n_steps * t.n_moved for t in tables]
    ids = np.fromiter(chain.from_iterable(chain.from_iterable(t.scheduled for t in tables)),
                      np.int64, sum(sizes))
    table = np.repeat(np.arange(len(tables)), sizes)
    receiving: dict[Symmetry, list[int]] = {}
    for i, t in enumerate(tables):
        if t.what == "receives into":
            receiving.setdefault(t.symmetry, []).append(i)
    q0 = np.array([t.q0 for t in tables], dtype=np.int64)[table]
    for symmetry, which in receiving.items():
        picked = np.zeros(len(tables), dtype=bool)
        picked[which] = True
        at = picked[table]
        ids[at] = symmetry.chunk(ids[at], q0[at])
    return ids


_FORMS = {"rotate": "affine", "xor": "xor", "mirror": "mirror", "grid": "grid"}  # its Ids


def _moves_as_symmetry(tables: list[_Table], want: np.ndarray) -> None:
    """The ids at every rank r are their rank 0 row moved by r: each compact form is its
    symmetry's own, and a run stays a run."""
    starts = np.cumsum([t.n_steps * t.n_moved for t in tables])
    rotations = []  # the tables of the rotations' and mirrors' ids
    for i, t in enumerate(tables):
        n, kind, ids = t.symmetry.n_ranks, t.symmetry.kind, t.ids
        if n == 1:
            continue
        what, form = f"ppermute {t.j}'s ids", _FORMS[kind]
        if ids.kind != form:
            raise _Disagrees(f"{what} are {ids.kind!r}, not the {kind!r} symmetry's {form!r}",
                             t.k)
        run = ids.first_only and ids.n_moved > 1
        first = want[starts[i] - t.n_steps * t.n_moved:starts[i]:t.n_moved] if run else None
        if kind == "xor":
            low = t.symmetry.mask & (n - 1)
            if ids.mask & (n - 1) != low:
                raise _Disagrees(f"{what} move under mask {ids.mask}, the symmetry's is {low}",
                                 t.k)
            # c ^ x stays a run c', c' + 1, ... where x has no bit that changes within it
            if run and low and ((first ^ (first + ids.n_moved - 1)) >= (low & -low)).any():
                raise _Disagrees(f"{what} are sliced as runs that the mask breaks", t.k)
            continue
        m = t.symmetry.modulus
        if ids.modulus != m:
            raise _Disagrees(f"{what} move modulo {ids.modulus}, the symmetry modulo {m}",
                             t.k)
        if kind == "grid":
            _grid_moves_as_symmetry(t, what, run)
            continue
        if run:  # every rank's run must not wrap round its block (mirror: it runs backwards)
            g = gcd(t.symmetry.stride % m, m) or m
            if kind == "mirror" or (first % m % g + ids.n_moved > g).any():
                raise _Disagrees(f"{what} are sliced as runs that some rank's move wraps", t.k)
        rotations.append(t)
    _strides_are_the_symmetrys(rotations)


def _grid_moves_as_symmetry(t: _Table, what: str, run: bool) -> None:
    """A grid's ids at rank r are ``offset + grid(base, r)``: rank 0's ``offset + base``
    moved by r (``Symmetry.chunk``) where each offset is a multiple of m, each base in
    0..m-1 and the sizes and stride are the symmetry's; a grid's move breaks runs."""
    symmetry, ids, m = t.symmetry, t.ids, t.symmetry.modulus
    if (ids.sizes, ids.stride) != (symmetry.sizes, symmetry.stride):
        raise _Disagrees(f"{what} move on a grid of {ids.sizes} by stride {ids.stride}, the "
                         f"symmetry on {symmetry.sizes} by {symmetry.stride}", t.k)
    base, offset = np.asarray(ids.arrays.base), np.asarray(ids.arrays.offset)
    if run or (offset % m != 0).any() or (base < 0).any() or (base >= m).any():
        raise _Disagrees(f"{what} are not rank 0's ids moved within their blocks of {m}",
                         t.k)


def _strides_are_the_symmetrys(tables: list[_Table]) -> None:
    """Every stored stride is its symmetry's modulo m, every offset a multiple of m (the
    tables' arrays at once)."""
    if not tables:
        return
    strides, sizes = flattened([t.ids.arrays.stride for t in tables])
    symmetries = list(map(attrgetter("symmetry"), tables))
    modulus = np.repeat(_attribute(symmetries, "modulus"), sizes)
    stride = np.repeat(_attribute(symmetries, "stride"), sizes)
    offsets = flattened([t.ids.arrays.offset for t in tables])[0]
    wrong = (offsets % modulus != 0) | ((strides - stride) % modulus != 0)
    if wrong.any():
        t = tables[int(np.searchsorted(np.cumsum(sizes), np.argmax(wrong), side="right"))]
        raise _Disagrees(f"ppermute {t.j}'s ids move by stride "
                         f"{t.ids.arrays.stride.ravel()[:1].tolist()} modulo {t.ids.modulus}, "
                         f"the symmetry by {t.symmetry.stride} modulo {t.symmetry.modulus}",
                         t.k)


def _writes_once(tables: list[_Table], want: np.ndarray, one_write: set[int]) -> None:
    """Where a segment is one scatter, rank 0 writes no chunk twice in a step (every rank's
    writes are rank 0's moved by one bijection)."""
    sizes = np.array([t.n_steps * t.n_moved for t in tables], dtype=np.int64)
    picked = np.array([t.k in one_write and t.what == "receives into" for t in tables])
    if not picked.any():
        return
    table = np.repeat(np.arange(len(tables)), sizes)
    at = picked[table]
    moved = np.array([t.n_moved for t in tables], dtype=np.int64)[table]
    step = (np.arange(len(table)) - (np.cumsum(sizes) - sizes)[table]) // moved
    segment = np.array([t.k for t in tables], dtype=np.int64)[table]
    span = int(want.max(initial=0)) + 1
    keys = ((segment * (int(step.max(initial=0)) + 1) + step) * span + want)[at]
    order = np.argsort(keys, kind="stable")
    twice = np.flatnonzero(np.diff(keys[order]) == 0)
    if len(twice):
        first = np.flatnonzero(at)[order[twice[0]]]
        raise _Disagrees(f"round {int(step[first])} of the loop is one scatter, but a rank "
                         "writes a chunk twice in it", int(segment[first]))
