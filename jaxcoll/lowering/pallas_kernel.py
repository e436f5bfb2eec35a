"""The second executor: a schedule's validated plan as one Pallas TPU kernel of remote DMAs.

The XLA executor (execute.py) makes one ``collective-permute`` per matching of a round; this one
runs the whole collective as one ``pallas_call``, the way JAX's Pallas docs write collectives
for TPUs ("Distributed Computing in Pallas for TPUs"). Both read the same plan (plan.py, checked
against the schedule by validate.py), so the same proofs cover both.

Each rank runs its own program: its chunk ids per round, computed outside the kernel from the
plan's compact forms (``(base + rank) mod n`` for a ring, ...) exactly as the XLA executor
computes them, and its partner in every matching, all in one int32 table in SMEM. In the
kernel, for every segment (a ``fori_loop`` over its rounds) and every round:

1. **ready**: a rank r that receives in matching j signals its sender's ``ready[j, r]``: its
   landing slots for j are free (it consumed the previous round's). The semaphore names its
   receiver: a count alone could be another receiver's, one running rounds ahead;
2. **send**: a sender waits for ``ready[j, its receiver]``, then DMAs its chunks into the
   receiver's landing slots ``land[j]`` (one DMA per chunk, or one for a run c, c+1, ...);
3. **wait**: every sender waits for its sends (its buffer was read: every transfer reads the
   buffer as it was before the round), every receiver for its receives;
4. **write**: each matching's received chunks are copied or reduced into the buffer, in the
   matchings' order, as the XLA executor writes them.

A barrier at the start (every rank of a group signals every other's barrier semaphore) makes
sure no DMA reaches a rank before its kernel runs. Every rank of the axis runs the kernel;
with ``axis_index_groups`` of different sizes each size's groups have a kernel of their own,
which a rank in none of them sits out (it neither signals nor waits). A complex buffer runs
as its real and imaginary parts side by side (:func:`_real_view`). Off TPU the kernel runs in
Pallas TPU interpret mode, which simulates the DMAs and semaphores on CPU; with
``InterpretParams(detect_races=True, dma_execution_mode="eager")`` it also checks that the
handshakes above leave no race.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from jaxcoll.lowering import _compat
from jaxcoll.lowering._compat import AxisPlan
from jaxcoll.lowering.plan import Segment
from jaxcoll.lowering.traced_ids import Combine, flag, ids_at, reduced


@dataclass(frozen=True)
class Pallas:
    """The second executor: a collective's schedule run as one Pallas TPU kernel.

    Pass ``executor=Pallas(...)`` (or ``executor="pallas"``, the default ``Pallas()``) to a
    collective to run its schedule's plan as one ``pallas_call`` of remote DMAs instead of
    XLA's ``collective-permute`` calls; both executors run the same validated plan. It runs
    inside :func:`jax.shard_map`. Off TPU the kernel runs in Pallas TPU interpret mode,
    which simulates the DMAs and semaphores on CPU: it checks the kernel's logic, not its
    speed.

    Attributes:
      interpret: None (default: compile with Mosaic on TPU, interpret elsewhere), False
        (always compile with Mosaic), True (interpret, with default parameters) or a
        ``pltpu.InterpretParams`` (interpret with those; ``detect_races=True`` also checks
        that the kernel's handshakes leave no race).

    A ring allreduce over 4 devices, each holding two numbers, run by the kernel (here
    interpreted on CPU):

    >>> import jaxcoll
    >>> from jax.sharding import Mesh, PartitionSpec as P
    >>> mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
    >>> allreduce = jax.shard_map(
    ...     lambda x: jaxcoll.allreduce(x, "i", algorithm="ring", executor=Pallas()),
    ...     mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    >>> print(allreduce(jnp.arange(8.0)))  # (0 + 2 + 4 + 6, 1 + 3 + 5 + 7) on every device
    [12. 16. 12. 16. 12. 16. 12. 16.]
    """

    interpret: object = None

    def interpret_params(self):
        """What ``pallas_call`` gets as ``interpret``.

        Returns:
          False where the kernel compiles with Mosaic, else a ``pltpu.InterpretParams``.
        """
        if self.interpret is None:
            return False if jax.default_backend() == "tpu" else pltpu.InterpretParams()
        if self.interpret is True:
            return pltpu.InterpretParams()
        return self.interpret


@dataclass(frozen=True)
class Unsynchronized(Pallas):
    """The Pallas executor with waits of its handshake left out on purpose: a knob for tests
    and lessons, kept out of the public :class:`Pallas` (and out of ``jaxcoll``'s names).

    tests/test_pallas.py and notebook 07 show with it that interpret mode's race detector (or
    a semaphore left non-zero) catches each wait left out.

    Attributes:
      drop: the waits left out: any of ``"ready_wait"``, ``"send_wait"``,
        ``"receive_wait"``.
    """

    drop: tuple[str, ...] = ()


def effects(executor) -> set:
    """The effects of a collective run by ``executor``: interpret mode simulates the devices
    with ordered callbacks, and every interpreted kernel of a program must run after the one
    before it (they share the interpreter's one simulated memory); none for XLA or Mosaic."""
    if not isinstance(executor, Pallas) or executor.interpret_params() is False:
        return set()
    return _compat.interpreter_ordered_effects()


def races_found() -> bool:
    """True if interpret mode's race detector found a race in the kernels run since
    ``pltpu.reset_tpu_interpret_mode_state()`` (with ``InterpretParams(detect_races=True)``)."""
    return _compat.interpreter_races_found()


def as_executor(executor, fn: str = "jaxcoll") -> str | Pallas:
    """``"xla"``, or a :class:`Pallas` for ``"pallas"`` or one given; refuses anything else
    (``fn``: the function named in the error)."""
    if isinstance(executor, str) and executor == "pallas":
        return Pallas()
    if isinstance(executor, str) and executor == "xla" or isinstance(executor, Pallas):
        return executor
    raise ValueError(f"{fn}: executor={executor!r} is not one of 'xla', 'pallas' or "
                     "jaxcoll.Pallas(interpret=...)")


# ----------------------------------------------------------------------------- one rank's program

@dataclass(frozen=True)
class _Slot:
    """Where one matching's entries of a segment sit in the program table (static offsets)."""

    peers: int  # [dst, src]: the partner ranks (-1: none), schedule ranks
    send: int  # (n_steps, n_moved) chunk ids sent
    recv: int  # (n_steps, n_moved) chunk ids received into
    lower_first: int | None  # 1 where this rank's sender is the lower rank (NaN order)


def _partners(perm, n_ranks: int) -> np.ndarray:
    """(n_ranks, 2): every schedule rank's [destination, source] in ``perm``; -1: none."""
    table = np.full((n_ranks, 2), -1, np.int32)
    for src, dst in perm:
        table[src, 0], table[dst, 1] = dst, src
    return table


def _program(segments: tuple[Segment, ...], plan: AxisPlan, me):
    """This rank's program as one int32 vector: ``[me, 1 if I am in one of the plan's groups
    else 0, my group's members along the axis (n_ranks), per segment and matching: peers, send
    ids, receive ids, NaN order]``, and each matching's :class:`_Slot` in it; the ids read from
    the plan's compact forms as the XLA executor reads them.

    With ``axis_index_groups`` of different sizes, each size's groups run a kernel of their own
    (collectives.py) that every rank of the axis enters: a rank in none of its groups is not
    active and sits that kernel out (its members and ids are group 0's, never read)."""
    groups = np.asarray(plan.groups or (tuple(range(plan.n_ranks)),), np.int32)
    group_of = np.zeros(plan.axis_ranks, np.int32)  # axis rank -> its group's index
    active = np.zeros(plan.axis_ranks, np.int32)  # axis rank -> 1 if in one of the groups
    for g, group in enumerate(groups):
        group_of[group], active[group] = g, 1
    rank = lax.axis_index(plan.axes)
    members = jnp.asarray(groups)[jnp.asarray(group_of)[rank]]
    pieces, slots, offset = [], [], 0

    def add(piece):
        nonlocal offset
        pieces.append(jnp.asarray(piece, jnp.int32).reshape(-1))
        offset += pieces[-1].shape[0]
        return offset - pieces[-1].shape[0]

    add(me), add(jnp.asarray(active)[rank]), add(members)  # at _ME, _ACTIVE, _GROUP
    for segment in segments:
        steps = jnp.arange(segment.n_steps)
        row = []
        for j, matching in enumerate(segment.matchings):
            peers = add(jnp.asarray(_partners(matching.perm, plan.n_ranks))[me])
            send = add(jax.vmap(lambda s: ids_at(segment.send_ids[j], s, me))(steps))
            recv = add(jax.vmap(lambda s: ids_at(segment.recv_ids[j], s, me))(steps))
            first = segment.lower_sender_first[j]
            lower_first = None if first is None else add(flag(first, me))
            row.append(_Slot(peers, send, recv, lower_first))
        slots.append(tuple(row))
    return jnp.concatenate(pieces), tuple(slots)


# jax 0.10.2's interpreter hangs once one kernel buffer is larger than this by some margin
# (where it was seen to: bench/RESULTS.md, "Numbers that were in code comments"): interpreted
# kernels run on column tiles of at most this many bytes
INTERPRET_BYTES = 64 * 1024

# where the program holds this rank's number, whether it is active, and its group's members
_ME, _ACTIVE, _GROUP = 0, 1, 2


@dataclass(frozen=True)
class _Refs:
    """The kernel's memory: its program (SMEM), buffer and landing slots (VMEM), semaphores."""

    program: object  # (program_len,) int32
    buf: object  # (buffer_chunks, chunk_len)
    land: object  # (n_matchings, max_moved, chunk_len): what arrives in a round
    ready: object  # (n_matchings, n_ranks) regular: receiver r's landing slots of j are free
    sent: object  # (n_matchings,) DMA: my sends of matching j, read
    received: object  # (n_matchings,) DMA: my receives of matching j, landed
    axes: tuple

    def device(self, rank):
        """Schedule rank ``rank``'s device: its group's member, along the collective's axes."""
        return {self.axes: self.program[_GROUP + rank]}

    def signal(self, sem, rank):
        pl.semaphore_signal(sem, 1, device_id=self.device(rank))  # a mesh position


# ----------------------------------------------------------------------------- the kernel

def run(segments: tuple[Segment, ...], buf, plan: AxisPlan, combine: Combine, me,
        executor: Pallas):
    """Run the plan's ``segments`` on this rank's (buffer_chunks, chunk_len) buffer as one
    Pallas kernel; the buffer after the last round back."""
    if not plan.in_mesh:
        raise ValueError("jaxcoll: executor='pallas' runs inside jax.shard_map (remote DMAs "
                         "between devices), not under vmap with an axis_name; use "
                         "executor='xla' there")
    if jnp.issubdtype(buf.dtype, jnp.complexfloating):
        return _complex_view(run(segments, _real_view(buf), plan, combine, me, executor),
                             buf.dtype)
    program, slots = _program(segments, plan, me)
    n_matchings = max(len(s.matchings) for s in segments)
    max_moved = max(m.n_moved for s in segments for m in s.matchings)

    interpret = executor.interpret_params()
    width = buf.shape[1]
    if interpret is not False:  # the interpreter's buffers under its limit: columns in tiles
        rows = max(buf.shape[0], n_matchings * max_moved)
        width = max(1, min(width, INTERPRET_BYTES // (rows * buf.dtype.itemsize)))

    def kernel(program_ref, buf_in, buf_ref, *scratch):
        refs = _Refs(program_ref, buf_ref, *scratch, axes=plan.axes)
        buf_ref[...] = buf_in[...]

        @pl.when(program_ref[_ACTIVE] != 0)  # a rank in none of the plan's groups: as it was
        def _():
            _barrier(refs, plan.n_ranks)
            for segment, row in zip(segments, slots):
                _run_segment(segment, row, refs, partial(reduced, combine),
                             getattr(executor, "drop", ()))

    def one_kernel(tile):  # (buffer_chunks, tile_width): columns are independent
        return pl.pallas_call(
            kernel,
            # typed as the buffer is (varying over the axes, under check_vma)
            out_shape=jax.ShapeDtypeStruct(tile.shape, tile.dtype,
                                           manual_axis_type=getattr(jax.typeof(tile), "mat",
                                                                    None)),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM),
                      pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.VMEM((n_matchings, max_moved, tile.shape[1]), tile.dtype),
                            pltpu.SemaphoreType.REGULAR((n_matchings, plan.n_ranks)),
                            pltpu.SemaphoreType.DMA((n_matchings,)),
                            pltpu.SemaphoreType.DMA((n_matchings,))],
            compiler_params=pltpu.CompilerParams(collective_id=0, has_side_effects=True),
            interpret=interpret,
        )(program, tile)
    tiles = [one_kernel(buf[:, start:start + width]) for start in range(0, buf.shape[1], width)]
    return tiles[0] if len(tiles) == 1 else jnp.concatenate(tiles, axis=1)


def _real_view(buf):
    """A complex (rows, width) buffer as its real (rows, 2 * width) parts, each value's real
    and imaginary parts side by side: jax 0.10.2's interpreter fails on complex kernel buffers
    (it fills them with NaN, which it has no complex form of; Mosaic's TPU kernels take no
    complex type either), and every schedule moves and sums columns independently (a complex
    sum is two real ones)."""
    return jnp.stack([jnp.real(buf), jnp.imag(buf)], axis=-1).reshape(buf.shape[0], -1)


def _complex_view(real, dtype):
    """:func:`_real_view` undone: the (rows, 2 * width) real parts as (rows, width) ``dtype``."""
    pairs = real.reshape(real.shape[0], -1, 2)
    return lax.complex(pairs[..., 0], pairs[..., 1]).astype(dtype)


def _barrier(refs: _Refs, n_ranks: int):
    """Every rank of the group signals every other's barrier semaphore and waits for all of
    theirs: no DMA reaches a rank before it runs the kernel."""
    barrier = pltpu.get_barrier_semaphore()
    lax.fori_loop(0, n_ranks, lambda rank, _: refs.signal(barrier, rank), None)
    pl.semaphore_wait(barrier, n_ranks)


def _landing(n_moved: int, contiguous: bool) -> list:
    """The landing rows of each DMA or write of ``n_moved`` chunks: one for a run c, c+1, ...,
    else one per chunk (chunk k lands in row k either way)."""
    if contiguous:
        return [pl.ds(0, n_moved)]
    return [pl.ds(k, 1) for k in range(n_moved)]


def _pieces(ids: int, n_moved: int, contiguous: bool, program):
    """(buffer rows, landing rows) of each DMA or write of ``n_moved`` chunks whose ids start
    at ``ids`` in the program."""
    starts = [program[ids]] if contiguous else [program[ids + k] for k in range(n_moved)]
    return [(pl.ds(start, put.size), put)
            for start, put in zip(starts, _landing(n_moved, contiguous))]


def _run_segment(segment: Segment, row: tuple[_Slot, ...], refs: _Refs, reduce,
                 drop: tuple[str, ...] = ()):
    """One segment's rounds: ``ready``, ``send``, ``wait``, ``write`` (the module docstring);
    ``drop``: the waits left out (tests)."""
    program = refs.program

    def copies(j, step):  # matching j's DMAs at ``step``
        slot, n_moved = row[j], segment.matchings[j].n_moved
        pieces = _pieces(slot.send + step * n_moved, n_moved, segment.send_contiguous[j],
                         program)
        return [pltpu.make_async_remote_copy(
            refs.buf.at[take], refs.land.at[j, put], refs.sent.at[j], refs.received.at[j],
            device_id=refs.device(program[slot.peers]))
            for take, put in pieces]

    def sends(j):
        return program[row[j].peers] >= 0

    def receives(j):
        return program[row[j].peers + 1] >= 0

    def one_round(step, _):
        matchings = range(len(segment.matchings))
        for j in matchings:  # 1. my landing slots of j are free: my sender may send
            pl.when(receives(j))(lambda: refs.signal(refs.ready.at[j, program[_ME]],
                                                     program[row[j].peers + 1]))
        for j in matchings:  # 2. send once the receiver is ready
            @pl.when(sends(j))
            def _():
                if "ready_wait" not in drop:
                    pl.semaphore_wait(refs.ready.at[j, program[row[j].peers]], 1)
                for copy in copies(j, step):
                    copy.start()
        for j in matchings:  # 3. my buffer read; my landing slots filled
            @pl.when(sends(j) & ("send_wait" not in drop))
            def _():
                for copy in copies(j, step):
                    copy.wait_send()

            @pl.when(receives(j) & ("receive_wait" not in drop))
            def _():  # descriptors of the sender's DMAs' shapes, made from my landing slots
                for put in _landing(segment.matchings[j].n_moved, segment.send_contiguous[j]):
                    pltpu.make_async_remote_copy(
                        refs.land.at[j, put], refs.land.at[j, put], refs.sent.at[j],
                        refs.received.at[j], device_id=refs.device(program[row[j].peers + 1])
                    ).wait_recv()
        for j in matchings:  # 4. write, in the matchings' order
            pl.when(receives(j))(lambda: _write(segment, j, row[j], step, refs, reduce))
        return None

    if segment.n_steps == 1:
        one_round(0, None)
    else:
        lax.fori_loop(0, segment.n_steps, one_round, None)


def _write(segment: Segment, j: int, slot: _Slot, step, refs: _Refs, reduce):
    """Matching j's received chunks into the buffer: copied, or reduced with what is there."""
    matching = segment.matchings[j]
    pieces = _pieces(slot.recv + step * matching.n_moved, matching.n_moved,
                     segment.recv_contiguous[j], refs.program)
    for put, landed in pieces:
        got = refs.land[j, landed]
        if matching.reduce:
            got = reduce(refs.buf[put], got, None if slot.lower_first is None
                         else refs.program[slot.lower_first] != 0)
        refs.buf[put] = got
