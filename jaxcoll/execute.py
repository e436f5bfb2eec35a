"""The one executor: lowers any :class:`~jaxcoll.schedule.Schedule` to ``lax.ppermute`` calls.

Every algorithm reaches the devices through here (only the ``xla`` references in
``collectives.py`` call other ``lax`` collectives). It runs inside ``shard_map`` (or ``vmap``
with an ``axis_name``), on every rank at once:

1. The caller's ``(n_blocks, block_len)`` buffer is padded and cut into the schedule's
   ``(n_chunks, chunk_len)`` layout.
2. Each round becomes one ``ppermute`` per "matching": a set of transfers in which every rank
   sends at most once and receives at most once, all moving the same number of chunks the same
   way (copy or reduce). A round whose transfers don't fit one matching is split into several;
   all of them read the buffer as it was before the round.
3. Which chunks a rank sends and receives are small constant tables indexed by
   ``lax.axis_index``. Consecutive rounds with the same permutations share their code: they
   become one ``lax.fori_loop`` over stacked tables, so the compiled program of the ring stays
   the same size as n grows.
4. The result is unpadded back to ``(n_blocks, block_len)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _compat
from ._compat import AxisPlan, serialize_collectives  # noqa: F401 (serialize_collectives: API)
from .schedules import Schedule, Transfer, split_round

Combine = Callable[[jnp.ndarray, jnp.ndarray], jnp.ndarray]


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
        Segment(matchings,
                tuple(np.stack(per_step) for per_step in zip(*sends)),  # (n_steps, n, n_moved)
                tuple(np.stack(per_step) for per_step in zip(*recvs)))
        for matchings, sends, recvs in segments if matchings)


def _contiguous(table: np.ndarray) -> bool:
    """True if every row of the table is a run c, c+1, ..., so a dynamic slice can serve."""
    return bool(np.all(np.diff(table, axis=-1) == 1))


def _take(buf, ids, contiguous: bool):
    """Chunks ``ids`` of ``buf``: (n_moved, chunk_len)."""
    if contiguous:
        return lax.dynamic_slice_in_dim(buf, ids[0], ids.shape[0], axis=0)
    return jnp.take(buf, ids, axis=0)


def _put(buf, ids, values, contiguous: bool):
    """``buf`` with chunks ``ids`` replaced by ``values``."""
    if contiguous:
        return lax.dynamic_update_slice_in_dim(buf, values, ids[0], axis=0)
    return buf.at[ids].set(values)


def _full_permutation(perm, n_ranks: int) -> tuple[tuple[int, int], ...]:
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


def _row(table: np.ndarray, step, me):
    """``table[step, me]`` for a constant (n_steps, n_ranks, ...) table; ``step`` may be traced."""
    if table.shape[0] == 1:
        return lax.dynamic_index_in_dim(jnp.asarray(table[0]), me, 0, keepdims=False)
    at_step = lax.dynamic_index_in_dim(jnp.asarray(table), step, 0, keepdims=False)
    return lax.dynamic_index_in_dim(at_step, me, 0, keepdims=False)


def after(value, previous):
    """``value``, made to wait until ``previous`` (any pytree) has been computed."""
    if not jax.tree_util.tree_leaves(previous):
        return value
    value, _ = lax.optimization_barrier((value, previous))
    return value


def in_sequence(fn: Callable, arrays: list, *more: list) -> list:
    """``[fn(a, *m) for a, *m in zip(arrays, *more)]``, each ``a`` waiting for the previous
    result where :func:`serialize_collectives` asks for it."""
    serial = serialize_collectives()
    results, previous = [], ()
    for array, *rest in zip(arrays, *more):
        if serial:
            array = after(array, previous)
        previous = fn(array, *rest)
        results.append(previous)
    return results


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


def _run_segment(segment: Segment, buf, plan: AxisPlan, combine: Combine):
    me = lax.axis_index(plan.axes)
    n_ranks, n_chunks = plan.n_ranks, buf.shape[0]
    perms, receiver_masks = [], []
    for matching in segment.matchings:
        perm = matching.perm if plan.in_mesh else _full_permutation(matching.perm, n_ranks)
        perms.append(tuple((plan.permute_rank[src], plan.permute_rank[dst])
                           for src, dst in perm))
        receivers = np.zeros((1, n_ranks), dtype=bool)  # (1 step, n_ranks)
        receivers[0, [dst for _, dst in matching.perm]] = True
        receiver_masks.append(None if receivers.all() else receivers)
    send_contiguous = [_contiguous(table) for table in segment.send_ids]
    # Partners that reduce into each other (recursive doubling) must compute the same bits,
    # NaNs included: both keep the lower rank's NaN.
    lower_first = [_lower_sender_first(m, n_ranks) for m in segment.matchings]
    # Dynamic-update-slices make XLA copy the whole buffer where a round writes it several
    # times (one per matching), and outside loops, where XLA fuses a round's write into the
    # next round's reads. There, if no rank writes a chunk twice in a round, one scatter does
    # the round's writes; the ids of ranks outside a matching point past the end: dropped.
    # (At 4 MiB on 8 fake CPU devices: halving_doubling allreduce 29 -> 18 ms, double_tree
    # 80 -> 38 ms, bidirectional_ring 106 -> 21 ms; the ring's loop keeps its in-place DUS.)
    dropping_ids = [np.where(mask.T[None] if mask is not None else True, table, n_chunks)
                    for table, mask in zip(segment.recv_ids, receiver_masks)]
    one_write = ((len(segment.matchings) > 1 or segment.n_steps == 1)
                 and _distinct_per_rank(dropping_ids, n_chunks))
    recv_contiguous = [_contiguous(table) for table in segment.recv_ids]

    def reduce(old, got, sender_first):
        out = combine(old, got)
        if sender_first is None or not jnp.issubdtype(out.dtype, jnp.inexact):
            return out
        # Which NaN combine returns depends on operand order, which the compiler may change:
        # pick it explicitly, the lower rank's first.
        lower = jnp.where(_row(sender_first, 0, me), got, old)
        higher = jnp.where(_row(sender_first, 0, me), old, got)
        nan = jnp.where(jnp.isnan(lower), lower, jnp.where(jnp.isnan(higher), higher, out))
        return jnp.where(jnp.isnan(out), nan, out)

    def one_round(step, buf):
        # Every matching of the round reads the buffer as it was before the round.
        outgoing = [_take(buf, _row(table, step, me), contiguous)
                    for table, contiguous in zip(segment.send_ids, send_contiguous)]
        received = in_sequence(
            lambda out, perm: lax.ppermute(out, plan.permute_axes, perm=perm),
            outgoing, perms)  # each (n_moved, chunk_len)  # each (n_moved, chunk_len)
        if one_write:  # one scatter for the whole round
            ids = [_row(table, step, me) for table in dropping_ids]
            got = [reduce(_take(buf, i, False), r, lower_first[j]) if m.reduce else r
                   for j, (i, r, m) in enumerate(zip(ids, received, segment.matchings))]
            return buf.at[jnp.concatenate(ids)].set(jnp.concatenate(got), mode="drop")
        for j, matching in enumerate(segment.matchings):
            got = received[j]
            ids = _row(segment.recv_ids[j], step, me)
            if matching.reduce or receiver_masks[j] is not None:
                old = _take(buf, ids, recv_contiguous[j])
                if matching.reduce:
                    got = reduce(old, got, lower_first[j])
                if receiver_masks[j] is not None:  # ranks outside the matching keep theirs
                    got = jnp.where(_row(receiver_masks[j], 0, me), got, old)
            buf = _put(buf, ids, got, recv_contiguous[j])
        return buf

    if segment.n_steps == 1:
        return one_round(0, buf)
    return lax.fori_loop(0, segment.n_steps, one_round, buf)


def execute(schedule: Schedule, blocks, axis, combine: Combine, plan: AxisPlan | None = None):
    """Run ``schedule`` on this rank's ``(n_blocks, block_len)`` buffer; same shape back.

    ``n_blocks`` must divide ``schedule.n_chunks``: each block is cut into
    ``n_chunks // n_blocks`` chunks (padded with zeros at its end, which are cut off again).
    ``plan`` (default: read where ``axis`` is bound now) says how ppermute numbers the ranks.
    """
    n_blocks, block_len = blocks.shape
    plan = plan or _compat.axis_plan(axis)
    if plan.n_ranks != schedule.n_ranks:
        raise ValueError(f"{schedule.name}: the schedule is for {schedule.n_ranks} ranks but "
                         f"axis {axis!r} has {plan.n_ranks}")
    if schedule.n_chunks % n_blocks:
        raise ValueError(f"{schedule.name}: {n_blocks} blocks do not divide "
                         f"{schedule.n_chunks} chunks")
    chunks_per_block = schedule.n_chunks // n_blocks
    chunk_len = -(-block_len // chunks_per_block)
    if chunk_len == 0 or not schedule.rounds:
        return blocks
    if plan.in_mesh and _compat.check_vma():  # the loops' carry: varying, as ppermute's result
        blocks = _compat.pvary(blocks, plan.axes)
    # A schedule that only moves data runs on the floats' bits (XLA's CPU code may flush
    # subnormals when it moves floats).
    bits = _bits_type(blocks.dtype) if _copies_only(schedule) else None
    buf = blocks if bits is None else lax.bitcast_convert_type(blocks, bits)
    padded_len = chunks_per_block * chunk_len
    buf = jnp.pad(buf, ((0, 0), (0, padded_len - block_len)))  # (n_blocks, padded_len)
    buf = buf.reshape(schedule.n_chunks, chunk_len)  # (n_chunks, chunk_len)
    for segment in lower(schedule):
        buf = _run_segment(segment, buf, plan, combine)
    out = buf.reshape(n_blocks, padded_len)[:, :block_len]  # (n_blocks, block_len)
    return out if bits is None else lax.bitcast_convert_type(out, blocks.dtype)


@lru_cache(maxsize=256)
def _copies_only(schedule: Schedule) -> bool:
    """True if no transfer of the schedule reduces: it only moves data."""
    return not any(t.reduce for round_ in schedule.rounds for t in round_)


def _bits_type(dtype):
    """The unsigned integer type of a floating dtype's width (None for other dtypes)."""
    if not jnp.issubdtype(dtype, jnp.floating):
        return None
    return {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[jnp.dtype(dtype).itemsize]
