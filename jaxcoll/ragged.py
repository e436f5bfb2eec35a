"""Ragged all-to-all: ``lax.ragged_all_to_all``'s semantics from jaxcoll's alltoall.

Mixture-of-experts sends each device's tokens, sorted by expert, to the devices that hold the
experts: slices whose sizes are known only at run time. XLA's own ragged all-to-all runs on
GPUs and TPUs only (XLA:CPU: "HLO opcode ragged-all-to-all is not supported"); this one runs
wherever ppermute does, with any alltoall schedule (``naive``: n - 1 pairwise rounds, ``bruck``:
ceil(log2 n) rounds, or a verified ``Schedule``).

Shapes are static in XLA, sizes are not, so every slice travels in a slot of ``cap`` rows,
``cap = min(operand rows, output rows)`` (no slice can be longer: it is read from the operand and
written into the output). The receiver writes only the first ``recv_sizes[i]`` rows of a slot.
The padded message is the alltoall of a ``(n, k·cap, ...)`` buffer, k = slices per device:
``padded_bytes`` says how large, and ``cost(schedule("alltoall", name, n), that)`` prices it.

The routing is the alltoall schedule's, so ``verify`` proves it; the packing around it is
gathers and scatters, and the gradient is the alltoall primitive's transpose between them:
linear in ``operand`` and ``output``, like lax's.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcoll import collectives


def ragged_alltoall(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes,
                    axis, *, algorithm="auto", axis_index_groups=None):
    """Slice i of ``operand`` goes to rank i // (K/n), written there at ``output_offsets[i]``.

    ``lax.ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets,
    recv_sizes, axis_name=axis)``, on every backend, with any alltoall schedule: K is the
    number of slices, a multiple of the n ranks (rank r receives slices r·K/n ..
    (r+1)·K/n - 1 of every rank); rows nobody writes keep ``output``'s values. Every slice
    travels in a slot of ``min(operand rows, output rows)`` rows (:func:`padded_bytes`).

    Args:
      operand: this rank's rows to send: an array whose leading dimension the slices
        index.
      output: the array the received slices are written into: ``operand``'s dtype and
        shape after the leading dimension.
      input_offsets: 1-D integers, one per slice: the row of ``operand`` slice i starts
        at.
      send_sizes: 1-D integers: the rows of slice i (lax's rule: the all-to-all of
        ``recv_sizes``).
      output_offsets: 1-D integers: the row of the receiver's ``output`` slice i is
        written at.
      recv_sizes: 1-D integers: the rows this rank writes of each slice it receives, in
        the senders' order.
      axis: the axis name (or tuple of names) it runs over, bound by ``jax.shard_map``
        or ``jax.vmap(..., axis_name=...)``.
      algorithm: ``"auto"`` (default), ``"xla"`` (lax's own: GPU and TPU only), an
        alltoall algorithm (``"naive"``, ``"bruck"``) or an alltoall schedule.
      axis_index_groups: lax's groups: lists of ranks of ``axis``, of one size, that hold
        each rank once (None: the whole axis).

    Returns:
      ``output`` with the rows of the slices this rank receives written into it; its
      other rows as they were.

    Raises:
      ValueError: if ``operand`` or ``output`` is 0-d, they differ in dtype or in shape
        after the leading dimension, the index arrays differ in length, or the slices are
        not a multiple of the ranks; or as :func:`~jaxcoll.alltoall` checks ``algorithm``,
        ``axis_index_groups``.
      TypeError: if ``operand`` or ``output`` is not an array, or an index array is not
        a 1-D array of integers.
      NameError: if ``axis`` is not bound here (a misspelt name, or a call outside
        ``jax.shard_map`` and ``jax.vmap``).
    """
    # As lax's: send_sizes must equal the all_to_all of recv_sizes; the receiver's recv_sizes
    # say how many rows of each slot it writes. Rows before or past the operand read as zeros;
    # rows before or past the output are not written (jnp would wrap negative ones).
    fn = "ragged_alltoall"
    _check_data(fn, operand, output)
    indices = _check_indices(fn, input_offsets, send_sizes, output_offsets, recv_sizes)
    if algorithm == "xla":  # the reference (GPU and TPU only: XLA:CPU lacks the opcode)
        return lax.ragged_all_to_all(operand, output, *indices, axis_name=axis,
                                     axis_index_groups=axis_index_groups)
    algorithm, n, _, _, _, groups = collectives._arguments(
        "alltoall", operand, axis, algorithm, None, groups=axis_index_groups, fn=fn)
    input_offsets, _, output_offsets, recv_sizes = indices  # send_sizes: lax's rule, = recv's
    slices = input_offsets.shape[0]
    if slices % n:
        raise ValueError(f"jaxcoll.{fn}: input_offsets has {slices} slices, not a multiple of "
                         f"the {n} ranks of axis={axis!r}: rank r receives slices r·K/n .. "
                         "(r+1)·K/n - 1")
    k, row_shape = slices // n, operand.shape[1:]  # slices per rank; one row's shape
    cap = min(operand.shape[0], output.shape[0])
    rows = jnp.arange(cap, dtype=jnp.int32)
    # slot i: rows input_offsets[i] .. + cap of the operand (rows outside it read as zeros)
    read = _outside_to_end(input_offsets[:, None] + rows, operand.shape[0])  # (K, cap)
    slots = jnp.take(operand, read.reshape(-1), axis=0, mode="fill", fill_value=0)
    slots = slots.reshape(n, k * cap, *row_shape)  # (n destinations, k·cap, ...)
    received, offsets = collectives.alltoall(
        (slots, output_offsets.reshape(n, k)), axis, split_dim=0, concat_dim=0, tiled=True,
        algorithm=algorithm, axis_index_groups=groups)
    # received: (n sources, k·cap, ...); offsets[s, j]: where source s's slice j lands here
    write = offsets.reshape(-1)[:, None] + rows  # (K, cap)
    write = jnp.where(rows < recv_sizes[:, None], write, output.shape[0])
    write = _outside_to_end(write, output.shape[0])  # past the end (or before it): dropped
    return output.at[write.reshape(-1)].set(received.reshape(slices * cap, *row_shape),
                                           mode="drop")


def _outside_to_end(index, length: int):
    """``index`` with entries outside 0..length-1 set to ``length`` (jnp would wrap negative
    ones to the end; past the end is read as fill, written nowhere)."""
    return jnp.where((index < 0) | (index >= length), length, index)


def padded_bytes(operand, output, n_slices: int) -> int:
    """Bytes of the alltoall buffer each rank sends in :func:`ragged_alltoall`.

    Args:
      operand: the ``operand`` of the call (an array, or anything with its ``shape`` and
        ``dtype``).
      output: the ``output`` of the call (anything with its ``shape``): only its rows
        count.
      n_slices: K, the slices each rank sends
        (``len(input_offsets)``).

    Returns:
      ``n_slices`` slots of min(operand rows, output rows) rows, in
      bytes.
    """
    row = int(np.prod(operand.shape[1:], dtype=np.int64)) * np.dtype(operand.dtype).itemsize
    return n_slices * min(operand.shape[0], output.shape[0]) * row


def _check_data(fn: str, operand, output) -> None:
    for name, array in (("operand", operand), ("output", output)):
        if not hasattr(array, "shape") or not hasattr(array, "dtype"):
            raise TypeError(f"jaxcoll.{fn}: {name} has type {type(array).__name__}; it must be "
                            "an array")
        if array.ndim == 0:
            raise ValueError(f"jaxcoll.{fn}: {name} has shape (); it needs a leading dimension "
                             "of rows that the slices index")
    if output.shape[1:] != operand.shape[1:] or output.dtype != operand.dtype:
        raise ValueError(f"jaxcoll.{fn}: output has {output.dtype}{list(output.shape)} and "
                         f"operand {operand.dtype}{list(operand.shape)}; they need the same "
                         "dtype and the same shape after the leading dimension")


def _check_indices(fn: str, *indices) -> tuple:
    """The four index arrays as int32, checked: 1-D, integer, one length."""
    names = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")
    arrays = []
    for name, index in zip(names, indices):
        index = jnp.asarray(index) if isinstance(index, (list, tuple, np.ndarray)) else index
        if (not hasattr(index, "dtype") or index.ndim != 1
                or not jnp.issubdtype(index.dtype, jnp.integer)):
            shown = (f"{index.dtype}{list(index.shape)}" if hasattr(index, "dtype")
                     else type(index).__name__)
            raise TypeError(f"jaxcoll.{fn}: {name} has {shown}; offsets and sizes are 1-D "
                            "integer arrays, one entry per slice")
        arrays.append(index.astype(jnp.int32))
    for name, array in zip(names[1:], arrays[1:]):
        if array.shape[0] != arrays[0].shape[0]:
            raise ValueError(f"jaxcoll.{fn}: {name} has {array.shape[0]} entries and "
                             f"input_offsets {arrays[0].shape[0]}; the four index arrays need "
                             "one entry per slice each")
    return tuple(arrays)
