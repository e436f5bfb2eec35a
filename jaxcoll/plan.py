"""The lowering plan: a schedule cut into the ppermutes and constant tables the executor
traces, with everything that depends only on the schedule decided once (cached per schedule).

Plain numpy, no JAX: the executor (execute.py) only traces what is decided here.

- Each round becomes one ppermute per *matching*: transfers in which every rank sends at most
  once and receives at most once, all moving the same number of chunks the same way (copy or
  reduce); ``split_round`` cuts a round into them. All of them read the buffer as it was
  before the round.
- Which chunks a rank sends and receives are small constant tables (n_steps, n_ranks,
  n_moved), indexed at run time by ``lax.axis_index``. Consecutive rounds with the same
  matchings form one *segment*: one ``lax.fori_loop`` over the stacked tables, so the ring's
  compiled program keeps its size as n grows.
- The write mode: one scatter for the whole round (``one_write``), or one write per matching.
- The NaN order: partners that reduce into each other (recursive doubling) must compute the
  same bits, NaNs included: both keep the lower rank's NaN (``lower_sender_first``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .schedules import Schedule, Transfer, split_round


@dataclass(frozen=True)
class Matching:
    """One ``ppermute``: ``perm`` pairs, each moving ``n_moved`` chunks, copied or reduced."""

    perm: tuple[tuple[int, int], ...]
    n_moved: int
    reduce: bool


@dataclass(frozen=True)
class Segment:
    """Consecutive rounds made of the same matchings, run as one loop over chunk-id tables.

    ``send_ids[j][step, rank]`` are the chunks ``rank`` sends in matching j of round ``step``;
    ``recv_ids`` likewise for the chunks it receives into. Shapes: (n_steps, n_ranks, n_moved).
    """

    matchings: tuple[Matching, ...]
    send_ids: tuple[np.ndarray, ...]
    recv_ids: tuple[np.ndarray, ...]
    # per matching: (1, n_ranks) True where a rank receives (None: every rank does)
    receivers: tuple[np.ndarray | None, ...]
    # per matching: (1, n_ranks) True where a rank's sender is the lower rank, for a reducing
    # matching whose partners send to each other (None: the order doesn't matter)
    lower_sender_first: tuple[np.ndarray | None, ...]
    # per matching: recv_ids with the ids of ranks outside it past the end (dropped)
    dropping_ids: tuple[np.ndarray, ...]
    send_contiguous: tuple[bool, ...]  # rows c, c+1, ...: a dynamic slice serves
    recv_contiguous: tuple[bool, ...]
    one_write: bool  # one scatter writes the whole round

    @property
    def n_steps(self) -> int:
        return self.send_ids[0].shape[0]


def _chunk_table(transfers: list[Transfer], n_ranks: int, sending: bool) -> np.ndarray:
    """(n_ranks, n_moved) ids of the chunks each rank sends (or receives into); ranks not
    taking part get 0..n_moved-1 (unused)."""
    n_moved = len(transfers[0].chunks)
    table = np.tile(np.arange(n_moved, dtype=np.int32), (n_ranks, 1))  # (n_ranks, n_moved)
    for t in transfers:
        if sending:
            table[t.src] = t.chunks
        else:
            table[t.dst] = t.into
    return table


@lru_cache(maxsize=256)
def lower(schedule: Schedule) -> tuple[Segment, ...]:
    """The schedule as segments of identical consecutive rounds (cached per schedule)."""
    segments: list[tuple[tuple[Matching, ...], list, list]] = []
    for round_ in schedule.rounds:
        groups = split_round(round_)
        matchings = tuple(
            Matching(tuple((t.src, t.dst) for t in g), len(g[0].chunks), g[0].reduce)
            for g in groups)
        sends = [_chunk_table(g, schedule.n_ranks, sending=True) for g in groups]
        recvs = [_chunk_table(g, schedule.n_ranks, sending=False) for g in groups]
        if segments and segments[-1][0] == matchings:
            segments[-1][1].append(sends)
            segments[-1][2].append(recvs)
        else:
            segments.append((matchings, [sends], [recvs]))
    return tuple(
        _segment(matchings,
                 tuple(np.stack(per_step) for per_step in zip(*sends)),  # (n_steps, n, n_moved)
                 tuple(np.stack(per_step) for per_step in zip(*recvs)),
                 schedule.n_ranks, schedule.n_chunks)
        for matchings, sends, recvs in segments if matchings)


def _segment(matchings, send_ids, recv_ids, n_ranks: int, n_chunks: int) -> Segment:
    """The segment of these matchings and tables, with what the executor decides from them."""
    receivers = []
    for matching in matchings:
        mask = np.zeros((1, n_ranks), dtype=bool)  # (1 step, n_ranks)
        mask[0, [dst for _, dst in matching.perm]] = True
        receivers.append(None if mask.all() else mask)
    # Dynamic-update-slices make XLA copy the whole buffer where a round writes it several
    # times (one per matching), and outside loops, where XLA fuses a round's write into the
    # next round's reads. There, if no rank writes a chunk twice in a round, one scatter does
    # the round's writes; the ids of ranks outside a matching point past the end: dropped.
    # (At 4 MiB on 8 fake CPU devices: halving_doubling allreduce 29 -> 18 ms, double_tree
    # 80 -> 38 ms, bidirectional_ring 106 -> 21 ms; the ring's loop keeps its in-place DUS.)
    dropping_ids = tuple(np.where(mask.T[None] if mask is not None else True, table, n_chunks)
                         for table, mask in zip(recv_ids, receivers))
    one_write = ((len(matchings) > 1 or send_ids[0].shape[0] == 1)
                 and _distinct_per_rank(dropping_ids, n_chunks))
    return Segment(matchings, send_ids, recv_ids, tuple(receivers),
                   tuple(_lower_sender_first(m, n_ranks) for m in matchings), dropping_ids,
                   tuple(map(_contiguous, send_ids)), tuple(map(_contiguous, recv_ids)),
                   one_write)


def _contiguous(table: np.ndarray) -> bool:
    """True if every row of the table is a run c, c+1, ..., so a dynamic slice can serve."""
    return bool(np.all(np.diff(table, axis=-1) == 1))


def _distinct_per_rank(tables: list[np.ndarray], past_end: int) -> bool:
    """True if no rank writes a chunk twice in any step (ids >= ``past_end`` are dropped)."""
    ids = np.concatenate(tables, axis=-1)  # (n_steps, n_ranks, all moved)
    for row in ids.reshape(-1, ids.shape[-1]):
        real = row[row < past_end]
        if len(np.unique(real)) < len(real):
            return False
    return True


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
