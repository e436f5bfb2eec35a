"""The XLA executor: lowers any :class:`~jaxcoll.Schedule` to ``lax.ppermute`` calls.

Every algorithm reaches the devices through here (only the ``xla`` references in
``collectives.py`` call other ``lax`` collectives). It runs inside ``shard_map`` (or ``vmap``
with an ``axis_name``), on every rank at once:

1. The caller's ``(n_blocks, block_len)`` buffer is padded and cut into the schedule's
   ``(n_chunks, chunk_len)`` layout.
2. It traces the schedule's lowering plan (plan.py, numpy only, cached per schedule): one
   ``ppermute`` per matching of each round, the chunk ids computed from ``lax.axis_index``
   by their symmetry (``(base + rank) mod n`` for a ring) or read from a table,
   consecutive identical rounds as one ``lax.fori_loop``.
3. ``ppermute`` gets the axis names in the mesh's order and its pairs renumbered to match
   (``_compat.AxisPlan``), so a tuple axis in any order numbers ranks as ``lax.axis_index``.
4. The result is unpadded back to ``(n_blocks, block_len)``.

Step 2 has a second lowering: ``executor=Pallas(...)`` runs the same plan as one Pallas kernel
of remote DMAs (pallas_kernel.py); steps 1 and 4 are shared.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcoll.analysis.compression import Compress
from jaxcoll.ir.schedules import Schedule
from jaxcoll.lowering import _compat, codec, pallas_kernel
from jaxcoll.lowering._compat import AxisPlan, serialize_collectives
from jaxcoll.lowering.pallas_kernel import Pallas
from jaxcoll.lowering.plan import Segment, full_permutation, lower
from jaxcoll.lowering.traced_ids import Combine, flag, ids_at, reduced


def _take(buf, ids, contiguous: bool):
    """Chunks ``ids`` of ``buf``: (n_moved, chunk_len)."""
    if contiguous:  # ids are never negative: no wrapping
        return lax.dynamic_slice_in_dim(buf, ids[0], ids.shape[0], axis=0,
                                        allow_negative_indices=False)
    return jnp.take(buf, ids, axis=0)


def _put(buf, ids, values, contiguous: bool):
    """``buf`` with chunks ``ids`` replaced by ``values``."""
    if contiguous:
        return lax.dynamic_update_slice_in_dim(buf, values, ids[0], axis=0,
                                               allow_negative_indices=False)
    return buf.at[ids].set(values)


def after(value, previous):
    """``value`` (any pytree), made to wait until ``previous`` (any pytree) has been
    computed."""
    leaves = jax.tree_util.tree_leaves(previous)
    if not leaves:
        return value
    # The barrier casts a leaf typed invariant where ``value`` is varying (an allreduce result
    # under check_vma) to varying, and that cast's transpose is a psum: keep such leaves out
    # of differentiation (their collective's own transpose communicates nothing to order).
    varying = frozenset().union(*(_compat.varying_axes(jax.typeof(v))
                                  for v in jax.tree_util.tree_leaves(value)))
    leaves = [leaf if _compat.varying_axes(jax.typeof(leaf)) >= varying
              else lax.stop_gradient(leaf) for leaf in leaves]
    value, _ = lax.optimization_barrier((value, leaves))
    return value


def token(value):
    """One element of each leaf of ``value``: waiting for it waits for ``value`` (``after``'s
    second argument), and where the waiting is differentiated, grad keeps that element for
    the backward instead of the whole of ``value``."""
    return [leaf.reshape(-1)[:1] for leaf in jax.tree_util.tree_leaves(value)]


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


def _senders(perm, n_ranks: int) -> np.ndarray:
    """(n_ranks,) True where a rank sends in the matching of ``perm``."""
    mask = np.zeros(n_ranks, bool)
    mask[[src for src, _ in perm]] = True
    return mask


def _round(segment: Segment, plan: AxisPlan, combine: Combine, compress: Compress | None,
           me) -> Callable:
    """A round of ``segment`` of the lowering plan, on rank ``me``.

    Args:
      segment: the segment: rounds alike but for their step (plan.py).
      plan: how ``ppermute`` numbers the ranks.
      combine: how a received chunk is reduced into the receiver's.
      compress: each transfer carries its chunks encoded, the receiver decodes them (None:
        as they are).
      me: this rank's index (traced).

    Returns:
      ``one_round(step, carry)``, a ``lax.fori_loop`` body: one ``ppermute`` per matching,
      each after the one before where :func:`serialize_collectives` asks for it. ``carry`` is
      (the (n_chunks, chunk_len) buffer, residual): where ``residual`` is not None the sender
      adds what encoding dropped from its chunks into it.
    """
    senders = [_senders(m.perm, plan.n_ranks) for m in segment.matchings]
    # numbered as ppermute does (the mesh's order); vmap's ppermute needs every rank's pair
    perms = [plan.pairs(matching.perm) for matching in segment.matchings]
    if not plan.in_mesh:
        perms = [full_permutation(perm, plan.axis_ranks) for perm in perms]
    serial = serialize_collectives()

    def permute(out, perm, previous: list):
        if serial:  # after the previous matching's ppermute (previous: [] or [its result])
            out = after(out, previous)
        if all(src == dst for src, dst in perm):  # local transfers alone move nothing
            return out
        return lax.ppermute(out, plan.permute_axes, perm=perm)

    def reduce(old, got, sender_first):
        return reduced(combine, old, got,
                       None if sender_first is None else flag(sender_first, me))

    def one_round(step, carry):
        buf, residual = carry
        # Every matching of the round reads the buffer as it was before the round.
        send_ids = [ids_at(table, step, me) for table in segment.send_ids]
        outgoing = [_take(buf, ids, contiguous)
                    for ids, contiguous in zip(send_ids, segment.send_contiguous)]
        wires = outgoing if compress is None else [codec.encode(compress, out)
                                                   for out in outgoing]
        received = []  # each (n_moved, chunk_len)
        for wire, perm in zip(wires, perms):
            received.append(permute(wire, perm, received[-1:]))
        if compress is None:
            return write_round(step, buf, received), residual
        received = [codec.decode(compress, got, buf.shape[1]) for got in received]
        # A sender keeps what it sent (the decoded value): every rank then holds the same
        # bits of a chunk, and what encoding dropped is counted once, at its sender.
        kept, dropped_from = buf, residual
        for ids, out, wire, mask, contiguous in zip(send_ids, outgoing, wires, senders,
                                                    segment.send_contiguous):
            sent = jnp.where(jnp.asarray(mask)[me], codec.decode(compress, wire, out.shape[1]),
                             out)
            kept = _put(kept, ids, sent, contiguous)
            if residual is not None:  # the same ids in two matchings set the same value
                residual = _put(residual, ids, _take(dropped_from, ids, contiguous) + (out - sent),
                                contiguous)
        return write_round(step, kept, received), residual

    def write_round(step, buf, received):
        if segment.one_write:  # one scatter for the whole round
            ids = [ids_at(table, step, me) if mask is None else  # others' ids past the end
                   jnp.where(flag(mask, me), ids_at(table, step, me), buf.shape[0])
                   for table, mask in zip(segment.recv_ids, segment.receivers)]
            got = [reduce(_take(buf, i, False), r, segment.lower_sender_first[j]) if m.reduce
                   else r
                   for j, (i, r, m) in enumerate(zip(ids, received, segment.matchings))]
            return buf.at[jnp.concatenate(ids)].set(jnp.concatenate(got), mode="drop",
                                                   wrap_negative_indices=False)
        for j, matching in enumerate(segment.matchings):
            got = received[j]
            ids = ids_at(segment.recv_ids[j], step, me)
            receivers = segment.receivers[j]
            if matching.reduce or receivers is not None:
                old = _take(buf, ids, segment.recv_contiguous[j])
                if matching.reduce:
                    got = reduce(old, got, segment.lower_sender_first[j])
                if receivers is not None:  # ranks outside the matching keep theirs
                    got = jnp.where(flag(receivers, me), got, old)
            buf = _put(buf, ids, got, segment.recv_contiguous[j])
        return buf

    return one_round


def execute(schedule: Schedule, blocks, axis, combine: Combine, plan: AxisPlan | None = None,
            compress: Compress | None = None, settle: bool = False, feedback: bool = False,
            executor: str | Pallas = "xla"):
    """Run ``schedule`` on this rank's ``(n_blocks, block_len)`` buffer; same shape back.

    ``n_blocks`` must divide ``schedule.n_chunks``: each block is cut into
    ``n_chunks // n_blocks`` chunks (padded with zeros at its end, which are cut off again).
    ``plan`` (default: read where ``axis`` is bound now) says how ppermute numbers the ranks.
    ``compress`` (a float32 buffer): transfers carry encoded chunks (compression.py);
    ``settle``: the result is then encoded once more where it is not a decoded value, so every
    rank holds the same bits; ``feedback``: also return what encoding dropped, summed per
    chunk at the rank that encoded it (the next step's error feedback), shaped as ``blocks``.
    ``executor``: ``"xla"`` (collective-permutes) or a
    :class:`~jaxcoll.lowering.pallas_kernel.Pallas` (one kernel of remote DMAs), both running
    the same plan.
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
        return (blocks, jnp.zeros_like(blocks)) if feedback else blocks
    if plan.in_mesh and _compat.check_vma():  # the loops' carry: varying, as ppermute's result
        blocks = _compat.pvary(blocks, plan.axes)
    # A schedule that only moves data runs on the floats' bits (XLA's CPU code may flush
    # subnormals when it moves floats).
    bits = _bits_type(blocks.dtype) if _copies_only(schedule) and compress is None else None
    buf = blocks if bits is None else lax.bitcast_convert_type(blocks, bits)
    padded_len = chunks_per_block * chunk_len
    buf = jnp.pad(buf, ((0, 0), (0, padded_len - block_len)))  # (n_blocks, padded_len)
    buf = buf.reshape(schedule.n_chunks, chunk_len)  # (n_chunks, chunk_len)
    buf = _placed(buf, schedule.input_at, schedule.buffer_chunks)  # (buffer_chunks, chunk_len)
    carry = (buf, jnp.zeros_like(buf) if feedback else None)
    me = plan.index()
    if isinstance(executor, Pallas):
        if compress is not None or feedback:
            raise ValueError(f"jaxcoll: {schedule.name}: executor='pallas' does not compress; "
                             "use executor='xla' with compress=")
        carry = (pallas_kernel.run(lower(schedule), buf, plan, combine, me, executor), None)
    else:
        for segment in lower(schedule):  # a run of equal rounds: one fori_loop
            one_round = _round(segment, plan, combine, compress, me)
            carry = (one_round(0, carry) if segment.n_steps == 1
                     else lax.fori_loop(0, segment.n_steps, one_round, carry))
    buf, residual = (None if part is None else part[schedule.output_at:][:schedule.n_chunks]
                     for part in carry)  # the result's (n_chunks, chunk_len)
    if compress is not None and settle:  # a decoded value re-encodes to itself
        settled = codec.roundtrip(compress, buf)
        residual = None if residual is None else residual + (buf - settled)
        buf = settled

    def unpad(buf):  # (n_chunks, chunk_len) -> (n_blocks, block_len)
        return buf.reshape(n_blocks, padded_len)[:, :block_len]
    out = unpad(buf)
    out = out if bits is None else lax.bitcast_convert_type(out, blocks.dtype)
    return (out, unpad(residual)) if feedback else out


def _placed(buf, at: int, buffer_chunks: int):
    """The (n_chunks, chunk_len) input at chunk ``at`` of a rank's whole buffer (its scratch
    chunks, and an out-of-place schedule's output chunks, start as zeros)."""
    if buf.shape[0] == buffer_chunks:
        return buf
    whole = jnp.zeros((buffer_chunks, buf.shape[1]), buf.dtype)
    return lax.dynamic_update_slice_in_dim(whole, buf, at, axis=0)


@lru_cache(maxsize=256)
def _copies_only(schedule: Schedule) -> bool:
    """True if no transfer of the schedule reduces: it only moves data."""
    return not any(t.reduce for round_ in schedule.rounds for t in round_.base)


def _bits_type(dtype):
    """The unsigned integer type of a floating dtype's width (None for other dtypes)."""
    if not jnp.issubdtype(dtype, jnp.floating):
        return None
    return {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[jnp.dtype(dtype).itemsize]
