"""A pytree's leaves on their way into the collectives' buffers and back (bucketing).

What every public collective does to the leaves of ``x`` around the schedule it runs: cast them
to ``accum_dtype`` (:func:`widened`), lay each out as rows (:func:`whole`, or the caller's
``layout.Layout``), pack them into buckets (:func:`bucket_plan`, :func:`pack`), cut each
bucket's result back into leaves (:func:`unpack`), cast them back (:func:`narrowed`), divide a
sum for a mean (:func:`mean`) and give them lax's weak types (:func:`typed_as_lax`). Each is a
plain function that returns its values: the caller (collectives.py's ``_runner``) binds one
primitive per bucket between :func:`pack` and :func:`unpack`.

A pytree is packed into buckets (``bucket_bytes``, default 25 MiB like PyTorch DDP): whole
leaves of one dtype side by side, in tree order, one collective per bucket; a leaf larger than
a bucket gets a bucket of its own (leaves are never split, as in DDP and Horovod).

Each bucket is one JAX primitive (primitives.py) on a (rows, width) buffer, each leaf laid out
by its ``layout.Layout``:

- allreduce, broadcast, reduce: the whole flattened ``x`` is one row, (1, size).
- reduce_scatter, scatter, alltoall: ``x`` cut into n blocks along ``dim``, block i in row i,
  (n, size/n).
- allgather, gather: this rank's ``x``, (1, size); the result has n rows, rank i's in row i.

A bucket of one leaf (one array) is bound as it is and packed inside the primitive's lowering:
one equation per call in the jaxpr, as lax's.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcoll.lowering import _compat
from jaxcoll.lowering.layout import Layout


def bucket_plan(nbytes: list[int], bucket_bytes: int | None) -> list[list[int]]:
    """Consecutive indices of leaves grouped into buckets.

    Whole leaves, in order, while a bucket stays within ``bucket_bytes``; a bigger leaf gets a
    bucket of its own.

    Args:
      nbytes: each leaf's size in bytes, in tree order.
      bucket_bytes: the most bytes a bucket holds; ``None``: one bucket.

    Returns:
      The buckets, each a list of leaf indices; together they are ``range(len(nbytes))`` in
      order.
    """
    buckets: list[list[int]] = []
    filled = 0
    for i, size in enumerate(nbytes):
        if buckets and (bucket_bytes is None or filled + size <= bucket_bytes):
            buckets[-1].append(i)
            filled += size
        else:
            buckets.append([i])
            filled = size
    return buckets


class Bucket(NamedTuple):
    """One bucket of :func:`pack`.

    Attributes:
      leaves: the indices of its leaves, in tree order.
      layout: a bucket of one leaf bound as it is: the leaf's layout (the primitive packs
        it); None for a packed buffer.
      widths: each leaf's width in the packed buffer (empty for a leaf bound as it is).
    """
    leaves: tuple[int, ...]
    layout: Layout | None
    widths: tuple[int, ...]


def pack(leaves: list, layouts: list[Layout], bucket_bytes: int | None,
         whole_leaves: bool = True) -> tuple[list, list[Bucket]]:
    """Each bucket's buffer (``bucket_plan`` of each dtype's leaves), one collective each.

    Each leaf is a (rows, width) matrix by its layout (layout.Layout), equal ``rows`` for
    every leaf; a bucket's matrices are concatenated along the width into one buffer. A bucket
    of one leaf is the leaf as it is (``whole_leaves``): the primitive packs it in its
    lowering, so a call on one array is one equation of the jaxpr, as lax's are.

    Args:
      leaves: the arrays to run, in tree order.
      layouts: each leaf's ``Layout``: how it enters the buffer as rows and its result leaves.
      bucket_bytes: the most bytes of leaves one bucket holds (None: one bucket per dtype).
      whole_leaves: a bucket of one leaf is the leaf, unpacked.

    Returns:
      (buffers, buckets): each bucket's (rows, sum of widths) buffer, or its one leaf, and its
      :class:`Bucket`, which :func:`unpack` reads.
    """
    groups = [[i for i, leaf in enumerate(leaves) if leaf.dtype == dtype]
              for dtype in dict.fromkeys(leaf.dtype for leaf in leaves)]
    plans = [[group[j] for j in bucket] for group in groups for bucket in bucket_plan(
        [leaves[i].size * leaves[i].dtype.itemsize for i in group], bucket_bytes)]
    alone = [whole_leaves and len(plan) == 1 for plan in plans]
    pieces = [[] if one else [layouts[i].to_rows(leaves[i]) for i in plan]
              for plan, one in zip(plans, alone)]
    buffers = [leaves[plan[0]] if one else jnp.concatenate(plan_pieces, axis=1)
               for plan, one, plan_pieces in zip(plans, alone, pieces)]
    return buffers, [Bucket(tuple(plan), layouts[plan[0]] if one else None,
                            tuple(piece.shape[1] for piece in plan_pieces))
                     for plan, one, plan_pieces in zip(plans, alone, pieces)]


def unpack(results: list, buckets: list[Bucket], leaves: list, layouts: list[Layout]) -> list:
    """The result leaves: each bucket's result cut back into its leaves'.

    Args:
      results: each bucket's result, as :func:`pack` gave its buffers: a (rows', sum of
        widths) array cut into its leaves' columns, or the result leaf of a leaf bound as it
        is; or a tuple of several, each cut the same way.
      buckets: the buckets, as :func:`pack` gave them.
      leaves: the arrays packed, in tree order.
      layouts: each leaf's ``Layout``.

    Returns:
      The result leaves, in the order of ``leaves`` (a tuple each where the results are
      tuples).
    """
    out = [None] * len(leaves)
    for bucket, result in zip(buckets, results):
        if bucket.layout is not None:  # the primitive gave the result leaf
            out[bucket.leaves[0]] = result
            continue
        outputs = result if isinstance(result, tuple) else (result,)  # several: a tuple each
        split = [_columns(r, bucket.widths) for r in outputs]
        for k, i in enumerate(bucket.leaves):
            values = tuple(layouts[i].from_rows(parts[k], leaves[i].shape) for parts in split)
            out[i] = values if isinstance(result, tuple) else values[0]
    return out


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _columns(buf, widths: tuple[int, ...]) -> list:
    """``buf``'s columns cut into pieces ``widths`` wide, each a dynamic slice whose start
    passes an optimization barrier.

    XLA's CPU compiler compiles one kernel per distinct fusion: static slices make each piece's
    consumer (an optimizer's update of a leaf) a kernel of its own; so cut, jaxlib 0.12
    compiles the consumers of pieces of one shape as one kernel (jaxlib 0.10 still one per
    piece; bench/RESULTS.md, "Whole-step compile"). The tangent is cut by static slices (their
    transpose is a concatenation).

    Args:
      buf: a (rows, sum(widths)) array.
      widths: the pieces' widths, left to right.

    Returns:
      The pieces, (rows, width) each.
    """
    starts = lax.optimization_barrier(tuple(
        jnp.asarray(start, jnp.int32) for start in np.cumsum((0, *widths[:-1]))))
    return [lax.dynamic_slice_in_dim(buf, start, width, axis=1)
            for start, width in zip(starts, widths)]


@_columns.defjvp
def _columns_jvp(widths, primals, tangents):
    """``_columns``'s primal pieces and its tangent's, cut by static slices."""
    (buf,), (tangent,) = primals, tangents
    return _columns(buf, widths), jnp.split(tangent, np.cumsum(widths)[:-1], axis=1)


def whole(leaves: list, n: int) -> list[Layout]:
    """Each leaf flat in one row (allreduce, broadcast, reduce).

    Args:
      leaves: the arrays.
      n: the ranks the collective runs on.

    Returns:
      One ``Layout("whole", n)`` per leaf.
    """
    return [Layout("whole", n)] * len(leaves)


def widened(primitive: str, leaves: list, accum_dtype) -> list:
    """``leaves`` cast to ``accum_dtype``, which must hold every value of every leaf exactly
    (``np.can_cast(leaf.dtype, accum_dtype, "safe")``).

    Args:
      primitive: the public function's name, for errors.
      leaves: the arrays.
      accum_dtype: the dtype to reduce in; None: the leaves as they are.

    Returns:
      The leaves, cast.

    Raises:
      TypeError: ``accum_dtype`` is not a numeric dtype, or is narrower than a leaf's.
      ValueError: ``accum_dtype`` is 64-bit and JAX's x64 mode is off.
    """
    if accum_dtype is None:
        return leaves
    try:
        accum = np.dtype(accum_dtype)
    except TypeError:
        accum = None
    if accum is None or not jnp.issubdtype(accum, jnp.number):
        raise TypeError(f"jaxcoll.{primitive}: accum_dtype={accum_dtype!r} is not a numeric "
                        "dtype; pass one such as jnp.float32, or None to reduce in the "
                        "leaves' own dtype")
    if jax.dtypes.canonicalize_dtype(accum) != accum:
        raise ValueError(f"jaxcoll.{primitive}: accum_dtype={accum} needs "
                         "jax.config.update('jax_enable_x64', True)")
    for leaf in leaves:
        if not np.can_cast(leaf.dtype, accum, "safe"):
            raise TypeError(f"jaxcoll.{primitive}: accum_dtype={accum} is narrower than a "
                            f"leaf of dtype {leaf.dtype}; it must hold every value of every "
                            f"leaf (e.g. float32 for bfloat16 or float16), or be None")
    return [leaf.astype(accum) for leaf in leaves]


def narrowed(values: list, leaves: list) -> list:
    """Each value cast back to its leaf's dtype (nothing where ``accum_dtype`` was None).

    Args:
      values: the results, one per leaf.
      leaves: the arrays the collective was called on.

    Returns:
      The values, each in its leaf's dtype.
    """
    return [value if value.dtype == leaf.dtype else value.astype(leaf.dtype)
            for value, leaf in zip(values, leaves)]


def mean(values: list, op: str, n) -> list:
    """The values divided by ``n`` where ``op`` is ``"mean"`` (the schedule summed them).

    Args:
      values: the reduced results.
      op: the public function's ``op``.
      n: the ranks summed over (traced, for groups of different sizes).

    Returns:
      The values, divided for a mean, else as they are.
    """
    return [v / n for v in values] if op == "mean" else values


def typed_as_lax(values: list, leaves: list, axis, reference: Callable) -> list:
    """Each value weakly typed where the lax built-in's result of its leaf is.

    A weak leaf's result is weak through all_gather and psum_scatter, never through all_to_all,
    and through psum, pmax and pmin as check_vma and the version of JAX have it. lax's own rule
    says, by ``jax.eval_shape`` (nothing runs): inside shard_map, where the rule depends on the
    context; under vmap lax keeps a weak type, as jaxcoll does (eval_shape there does not see
    the vmapped value's weak type).

    Args:
      values: the results, one per leaf.
      leaves: the arrays the collective was called on.
      axis: the collective's axis.
      reference: references.py's call of the lax built-in on one leaf.

    Returns:
      The values, each weakly typed as lax's result of its leaf.
    """
    if not any(map(_compat.weak_type, leaves)) or not _compat.axis_plan(axis).in_mesh:
        return values
    return [_compat.with_weak_type(value, weak) if weak != _compat.weak_type(value) else value
            for value, weak in ((value, _compat.weak_type(leaf) and jax.eval_shape(
                reference, leaf).weak_type) for value, leaf in zip(values, leaves))]
