"""The lowering plan: a schedule cut into the ppermutes and constant tables the executor
traces, with everything that depends only on the schedule decided once (cached per schedule).

Plain numpy, no JAX: the executor (execute.py) only traces what is decided here.

- Each round becomes one ppermute per *matching*: transfers in which every rank sends at most
  once and receives at most once, all moving the same number of chunks the same way (copy or
  reduce); ``split_round`` cuts a round into them. All of them read the buffer as it was
  before the round.
- Which chunks a rank sends and receives are tables (n_steps, n_ranks, n_moved), indexed at
  run time by ``lax.axis_index``, stored as compactly as their symmetry allows (``Ids``,
  ids.py): a ring's ids are ``(base + rank) mod n``, recursive doubling's ``base ^ rank``, a
  rooted round's only its participants' rows, and a run c, c+1, ... only its first id; the
  full table only where none of these holds. Consecutive rounds with the same matchings form
  one *segment*: one ``lax.fori_loop`` over the stacked tables. So a program grows with its
  rounds, not with n x rounds.
- The write mode: one scatter for the whole round (``one_write``), or one write per matching.
- The NaN order: partners that reduce into each other (recursive doubling) must compute the
  same bits, NaNs included: both keep the lower rank's NaN (``lower_sender_first``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import repeat

import numpy as np

from jaxcoll.ir.schedules import Round, Schedule, Symmetry, split_round
from jaxcoll.lowering import validate
from jaxcoll.lowering.ids import Ids, compact, int32s, over_steps


@dataclass(frozen=True)
class Matching:
    """One ``ppermute``: ``perm`` pairs, each moving ``n_moved`` chunks, copied or reduced."""

    perm: tuple[tuple[int, int], ...]
    n_moved: int
    reduce: bool


def _compact_mask(mask: np.ndarray | None) -> Ids | None:
    """A (1, n_ranks) boolean mask as compact Ids (1 where True)."""
    return None if mask is None else compact(mask.astype(np.int32)[..., None])


@dataclass(frozen=True)
class Segment:
    """Consecutive rounds made of the same matchings, run as one loop over chunk-id tables.

    ``send_ids[j][step, rank]`` are the chunks ``rank`` sends in matching j of round ``step``;
    ``recv_ids`` likewise for the chunks it receives into. Shapes: (n_steps, n_ranks, n_moved).
    """

    matchings: tuple[Matching, ...]
    send_ids: tuple[Ids, ...]
    recv_ids: tuple[Ids, ...]
    # per matching: 1 where a rank receives, as Ids of one step and one id (None: every rank)
    receivers: tuple[Ids | None, ...]
    # per matching: (1, n_ranks) True where a rank's sender is the lower rank, for a reducing
    # matching whose partners send to each other (None: the order doesn't matter)
    lower_sender_first: tuple[Ids | None, ...]
    send_contiguous: tuple[bool, ...]  # rows c, c+1, ...: a dynamic slice serves
    recv_contiguous: tuple[bool, ...]
    one_write: bool  # one scatter writes the whole round

    @property
    def n_steps(self) -> int:
        return self.send_ids[0].n_steps


@lru_cache(maxsize=256)
def lower(schedule: Schedule) -> tuple[Segment, ...]:
    """The schedule as segments of identical consecutive rounds (cached per schedule), checked
    against the schedule at every rank (validate.py) before it is returned."""
    # per segment: matchings, symmetry (None: every rank as it is), then per step the
    # matchings' send and receive ids: the (n_pairs, n_moved) rows of the ranks taking part,
    # in the matching's order, or rank 0's (n_moved,) rows
    schedule.refuse_in_switch("jaxcoll's XLA and Pallas executors")
    segments: list[tuple[tuple[Matching, ...], object, list, list]] = []
    for round_ in schedule.rounds:
        if round_.symmetry is None:
            groups = split_round(round_)
            matchings = tuple(
                Matching(tuple((t.src, t.dst) for t in g), len(g[0].chunks), g[0].reduce)
                for g in groups)
            sends = [np.array([t.chunks for t in g], np.int32) for g in groups]  # (len(g), moved)
            recvs = [np.array([t.into for t in g], np.int32) for g in groups]
        else:
            matchings, sends, recvs = _rank_0(round_)
        if segments and segments[-1][:2] == (matchings, round_.symmetry):
            segments[-1][2].append(sends)
            segments[-1][3].append(recvs)
        else:
            segments.append((matchings, round_.symmetry, [sends], [recvs]))
    lowered = tuple(
        _segment(matchings,
                 tuple(np.stack(per_step) for per_step in zip(*sends)),  # (n_steps, ...)
                 tuple(np.stack(per_step) for per_step in zip(*recvs)),
                 schedule.n_ranks, schedule.buffer_chunks, symmetry)
        for matchings, symmetry, sends, recvs in segments if matchings)
    validate.check(schedule, lowered)  # what runs is what the schedule says, at every rank
    return lowered


def _rank_0(round_: Round) -> tuple[tuple[Matching, ...], list, list]:
    """A symmetric round's matchings (one per base transfer: every rank makes it) and rank 0's
    (n_moved,) rows of ids: the chunks it sends, and those it receives into (from the rank
    whose copy of the transfer reaches it)."""
    symmetry = round_.symmetry
    matchings = tuple(Matching(symmetry.pairs(t.dst), len(t.chunks), t.reduce)
                      for t in round_.base)
    sends = [np.array(t.chunks) for t in round_.base]
    recvs = [symmetry.chunk(np.array(t.into), symmetry.sender(t.dst)) for t in round_.base]
    return matchings, sends, recvs


def _segment(matchings, send_rows, recv_rows, n_ranks: int, n_chunks: int,
             symmetry: Symmetry | None = None) -> Segment:
    """The segment of these matchings and rows of ids, with what the executor decides from them
    (with a ``symmetry``, rank 0's rows: (n_steps, n_moved); without, the rows of the ranks
    taking part in each matching, in its order: (n_steps, n_pairs, n_moved))."""
    if symmetry is not None:
        return _symmetric_segment(matchings, send_rows, recv_rows, n_ranks, symmetry)
    receivers = []
    for matching in matchings:
        mask = np.zeros((1, n_ranks), dtype=bool)  # (1 step, n_ranks)
        mask[0, [dst for _, dst in matching.perm]] = True
        receivers.append(None if mask.all() else mask)
    # Dynamic-update-slices make XLA copy the whole buffer where a round writes it several
    # times (one per matching), and outside loops, where XLA fuses a round's write into the
    # next round's reads. There, if no rank writes a chunk twice in a round, one scatter does
    # the round's writes; the ids of ranks outside a matching point past the end: dropped.
    # (Found by profiling and measured faster: bench/RESULTS.md, "Numbers that were in code
    # comments"; the ring's loop keeps its in-place DUS.)
    one_write = ((len(matchings) > 1 or send_rows[0].shape[0] == 1)
                 and _writes_distinct(matchings, recv_rows))
    send_contiguous = tuple(map(_contiguous, send_rows))
    recv_contiguous = tuple(map(_contiguous, recv_rows))
    senders = [[src for src, _ in m.perm] for m in matchings]
    takers = [[dst for _, dst in m.perm] for m in matchings]
    return Segment(matchings,
                   tuple(map(_explicit_ids, send_rows, senders, repeat(n_ranks),
                             send_contiguous, repeat(n_chunks), repeat(True))),
                   tuple(map(_explicit_ids, recv_rows, takers, repeat(n_ranks),
                             recv_contiguous, repeat(n_chunks), repeat(False))),
                   tuple(map(_compact_mask, receivers)),
                   tuple(_compact_mask(_lower_sender_first(m, n_ranks)) for m in matchings),
                   send_contiguous, recv_contiguous, one_write)


def _explicit_ids(rows: np.ndarray, ranks: list[int], n_ranks: int, first_only: bool,
                  n_chunks: int, sending: bool) -> Ids:
    """Compact Ids of the (n_steps, len(ranks), n_moved) ``rows`` of ``ranks``; the other
    ranks, outside the matching, get 0, 1, ... (never read). Where one rank takes part, no
    table of the ranks: its receive ids are every rank's (one constant row per step); its send
    ids its own, 0, 1, ... elsewhere (a chunk sent from a constant offset made XLA's CPU code
    copy the whole buffer each round: slower, bench/RESULTS.md, "Numbers that were in code
    comments")."""
    n_steps, _, n_moved = rows.shape
    kept = rows[..., :1] if first_only else rows  # (n_steps, len(ranks), kept)
    if len(ranks) == 1 and sending:
        default = np.broadcast_to(np.arange(kept.shape[2]), kept[:, 0].shape)
        return Ids("rows", n_steps=n_steps, n_moved=n_moved, first_only=first_only,
                   arrays=int32s(ranks, kept, default))
    if len(ranks) == 1:
        zeros = np.zeros_like(kept[:, 0])
        return Ids("affine", n_steps=n_steps, n_moved=n_moved, first_only=first_only,
                   arrays=int32s(kept[:, 0], zeros, zeros, zeros[:1]),
                   modulus=max(n_chunks, int(kept.max(initial=0)) + 1))
    table = np.tile(np.arange(n_moved, dtype=np.int32), (n_steps, n_ranks, 1))
    table[:, ranks] = rows
    return compact(table, first_only, n_chunks)


def _symmetric_segment(matchings, send_rows, recv_rows, n_ranks: int,
                       symmetry: Symmetry) -> Segment:
    """A segment of symmetric rounds from rank 0's rows alone: every rank's ids follow by the
    symmetry (so do their properties: a rank's ids are rank 0's under a bijection)."""
    send_contiguous = tuple(_contiguous_everywhere(rows, symmetry) for rows in send_rows)
    recv_contiguous = tuple(_contiguous_everywhere(rows, symmetry) for rows in recv_rows)
    one_write = ((len(matchings) > 1 or send_rows[0].shape[0] == 1)
                 and _distinct_per_rank([rows[:, None] for rows in recv_rows], np.inf))
    send_ids = tuple(map(_symmetric_ids, send_rows, send_contiguous, repeat(symmetry)))
    recv_ids = tuple(map(_symmetric_ids, recv_rows, recv_contiguous, repeat(symmetry)))
    return Segment(matchings, send_ids, recv_ids,
                   (None,) * len(matchings),  # every rank receives
                   tuple(_symmetric_sender_first(m, n_ranks, symmetry) for m in matchings),
                   send_contiguous, recv_contiguous, one_write)


def _symmetric_sender_first(matching: Matching, n_ranks: int, symmetry: Symmetry) -> Ids | None:
    """``_lower_sender_first`` as compact Ids; for xor partners r and r ^ d, the sender is the
    lower where r has d's highest bit: ``0 ^ (rank & that bit)``, not 0 there."""
    if symmetry.kind != "xor" or not matching.reduce:
        return _compact_mask(_lower_sender_first(matching, n_ranks))
    d = matching.perm[0][1]  # rank 0's partner
    return Ids("xor", n_steps=1, n_moved=1, arrays=int32s(np.zeros((1, 1))),
               mask=1 << (d.bit_length() - 1))


def _symmetric_ids(rows: np.ndarray, first_only: bool, symmetry: Symmetry) -> Ids:
    """Every rank's ids from rank 0's (n_steps, n_moved) rows: affine for a rotation, xor,
    mirror, grid."""
    n_steps, n_moved = rows.shape
    if first_only:
        rows = rows[:, :1]
    form = dict(n_steps=n_steps, n_moved=n_moved, first_only=first_only)
    if symmetry.kind == "xor":
        return Ids("xor", arrays=int32s(rows), mask=symmetry.mask, **form)
    m = symmetry.modulus
    base, offset = rows % m, rows - rows % m
    if symmetry.kind == "grid":  # each level's coordinate moved by the rank's (ids.py)
        return Ids("grid", arrays=int32s(base, offset), modulus=m, sizes=symmetry.sizes,
                   stride=symmetry.stride, **form)
    stride = np.full_like(rows, symmetry.stride % m)
    if symmetry.kind == "mirror":
        return Ids("mirror", arrays=int32s(base, stride, offset), modulus=m, **form)
    return Ids("affine", arrays=int32s(*over_steps(base, stride, offset, m)), modulus=m, **form)


def _contiguous_everywhere(rows: np.ndarray, symmetry: Symmetry) -> bool:
    """True if every rank's ids are runs c, c+1, ... where rank 0's (n_steps, n_moved) rows
    are: a rotated run must not wrap round its block, an xor'd one keep its low bits."""
    if not _contiguous(rows):
        return False
    first, length = rows[:, 0], rows.shape[1]
    if length == 1:
        return True
    if symmetry.kind in ("mirror", "grid"):  # odd ranks' runs run backwards; a grid's
        return False  # move splits a run where a level's coordinate wraps
    if symmetry.kind == "xor":  # runs of aligned powers of two that the mask leaves alone
        size = 1 << (length - 1).bit_length()
        return bool(np.all(first % size == 0)) and symmetry.mask & (size - 1) == 0
    m, ranks = symmetry.modulus, np.arange(symmetry.n_ranks)
    moved = (first[:, None] % m + symmetry.stride * ranks) % m  # (n_steps, n_ranks)
    return bool(np.all(moved + length <= m))


def _contiguous(table: np.ndarray) -> bool:
    """True if every row of the table is a run c, c+1, ..., so a dynamic slice can serve."""
    return bool(np.all(np.diff(table, axis=-1) == 1))


def _distinct_per_rank(tables: list[np.ndarray], past_end: float) -> bool:
    """True if no rank writes a chunk twice in any step (ids >= ``past_end`` are dropped)."""
    ids = np.sort(np.concatenate(tables, axis=-1), axis=-1)  # (n_steps, n_ranks, all moved)
    return not ((ids[..., 1:] == ids[..., :-1]) & (ids[..., 1:] < past_end)).any()


def _writes_distinct(matchings, recv_rows) -> bool:
    """``_distinct_per_rank`` of an explicit segment, from the (n_steps, n_pairs, n_moved)
    rows of each matching's receivers: every rank that receives, its ids in each matching
    (past the end where it receives nothing in it)."""
    takers = sorted({dst for m in matchings for _, dst in m.perm})
    at = {rank: k for k, rank in enumerate(takers)}
    past_end = np.iinfo(np.int32).max
    tables = []
    for matching, rows in zip(matchings, recv_rows):
        table = np.full((rows.shape[0], len(takers), rows.shape[2]), past_end, np.int32)
        table[:, [at[dst] for _, dst in matching.perm]] = rows
        tables.append(table)
    return _distinct_per_rank(tables, past_end)


def _lower_sender_first(matching: Matching, n_ranks: int) -> np.ndarray | None:
    """(1, n_ranks): True where a rank's sender has the lower rank, for a reducing matching in
    which some pair of ranks send to each other; None otherwise (the order doesn't matter)."""
    pairs = set(matching.perm)
    if not matching.reduce or not any((dst, src) in pairs for src, dst in pairs):
        return None
    sender_first = np.zeros((1, n_ranks), dtype=bool)
    for src, dst in matching.perm:
        sender_first[0, dst] = src < dst
    return sender_first


def full_permutation(perm, n_ranks: int) -> tuple[tuple[int, int], ...]:
    """``perm`` completed to a permutation of all ranks: idle ranks send to themselves, and the
    leftover idle senders to the leftover idle receivers (data those receivers ignore)."""
    senders = {src for src, _ in perm}
    receivers = {dst for _, dst in perm}
    idle_senders = [r for r in range(n_ranks) if r not in senders]
    idle_receivers = [r for r in range(n_ranks) if r not in receivers]
    both = [r for r in idle_senders if r in idle_receivers]
    extra = [(r, r) for r in both] + list(zip([r for r in idle_senders if r not in both],
                                              [r for r in idle_receivers if r not in both]))
    return tuple(perm) + tuple(extra)
