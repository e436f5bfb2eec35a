"""lax's collectives under lax's names and signatures, run by jaxcoll's algorithms.

``from jaxcoll import lax`` in place of ``from jax import lax`` runs code written against
``jax.lax`` unchanged: ``psum``, ``pmean``, ``pmax``, ``pmin``, ``all_gather``,
``psum_scatter``, ``all_to_all``, ``ragged_all_to_all`` and ``pbroadcast`` take lax's
arguments (``axis_index_groups`` included) plus a keyword-only ``algorithm=`` (default
``"auto"``; ``"xla"`` is the built-in itself) and, but for ``ragged_all_to_all``,
``executor=`` (``"xla"`` or ``"pallas"``); every other name (``ppermute``, ``axis_index``,
``dot_general``, ...) is ``jax.lax``'s own.
"""

from __future__ import annotations

import functools

import jax
from jax import lax as _lax

from jaxcoll import collectives as _c
from jaxcoll import ragged as _ragged

__all__ = ["psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "all_to_all",
           "ragged_all_to_all", "pbroadcast"]


def _lax_errors(fn):
    """Where the axis is not bound, lax's own function is called, so the error is lax's own,
    word for word (JAX's tests match psum's); everything else is ``fn``'s."""
    builtin = getattr(_lax, fn.__name__)

    @functools.wraps(fn)
    def wrapper(x, axis_name, *args, algorithm: str = "auto", executor="xla", **kwargs):
        try:
            _lax.axis_size(axis_name)
        except (NameError, ValueError):
            return builtin(x, axis_name, *args, **kwargs)
        return fn(x, axis_name, *args, algorithm=algorithm, executor=executor, **kwargs)
    return wrapper


@_lax_errors
def psum(x, axis_name, *, axis_index_groups=None, algorithm: str = "auto", executor="xla"):
    """The sum of ``x`` over ``axis_name`` (of each group): ``jax.lax.psum``.

    Same signature as ``jax.lax.psum``, plus keyword-only ``algorithm`` and ``executor``:
    ``jaxcoll.allreduce(x, axis_name, op="sum", ...)``. Where ``axis_name`` is not bound,
    ``jax.lax.psum`` itself is called, so the error is lax's own.

    Args:
      x: an array or a pytree of arrays, this rank's block (a number counts as a 0-d
        array).
      axis_name: the axis name (or tuple of names) it runs over, bound by
        ``jax.shard_map`` or ``jax.vmap(..., axis_name=...)``.
      axis_index_groups: lax's groups: lists of ranks of ``axis_name`` that hold each
        rank once (of different sizes too, as lax's); each group runs on its own (None:
        the whole axis).
      algorithm: keyword-only, ``"auto"`` (default), ``"xla"`` (lax's built-in itself) or
        a name from ``jaxcoll.algorithms("allreduce")``, as :func:`jaxcoll.allreduce` takes it.
      executor: keyword-only, ``"xla"`` (default), ``"pallas"`` or a
        :class:`~jaxcoll.Pallas`, as :func:`jaxcoll.allreduce` takes it.

    Returns:
      The sum over the ranks (of this rank's group), on every rank, with ``x``'s
      structure, shapes and dtypes (bools are summed as int32), as ``jax.lax.psum``'s.

    Examples:
      ``from jaxcoll import lax`` in place of ``from jax import lax``:

      >>> import jax, numpy as np
      >>> from jax.sharding import Mesh, PartitionSpec as P
      >>> from jaxcoll import lax
      >>> mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
      >>> f = jax.shard_map(lambda x: lax.psum(x, "i"), mesh=mesh, in_specs=P("i"),
      ...                   out_specs=P())
      >>> print(np.asarray(f(np.arange(4))))
      [6]
    """
    return _c.allreduce(x, axis_name, op="sum", algorithm=algorithm,
                        axis_index_groups=axis_index_groups, executor=executor)


@_lax_errors
def pmax(x, axis_name, *, axis_index_groups=None, algorithm: str = "auto", executor="xla"):
    """The maximum of ``x`` over ``axis_name`` (of each group): ``jax.lax.pmax``.

    Same signature as ``jax.lax.pmax``, plus keyword-only ``algorithm`` and ``executor``:
    ``jaxcoll.allreduce(x, axis_name, op="max", ...)``. Where ``axis_name`` is not bound,
    ``jax.lax.pmax`` itself is called, so the error is lax's own.

    Args:
      x: an array or a pytree of arrays, this rank's block (a number counts as a 0-d
        array).
      axis_name: the axis name (or tuple of names) it runs over, bound by
        ``jax.shard_map`` or ``jax.vmap(..., axis_name=...)``.
      axis_index_groups: lax's groups: lists of ranks of ``axis_name`` that hold each
        rank once (of different sizes too, as lax's); each group runs on its own (None:
        the whole axis).
      algorithm: keyword-only, ``"auto"`` (default), ``"xla"`` (lax's built-in itself) or
        a name from ``jaxcoll.algorithms("allreduce")``, as :func:`jaxcoll.allreduce` takes it.
      executor: keyword-only, ``"xla"`` (default), ``"pallas"`` or a
        :class:`~jaxcoll.Pallas`, as :func:`jaxcoll.allreduce` takes it.

    Returns:
      The maximum over the ranks (of this rank's group), on every rank, with ``x``'s
      structure, shapes and dtypes, as ``jax.lax.pmax``'s.
    """
    return _c.allreduce(x, axis_name, op="max", algorithm=algorithm,
                        axis_index_groups=axis_index_groups, executor=executor)


@_lax_errors
def pmin(x, axis_name, *, axis_index_groups=None, algorithm: str = "auto", executor="xla"):
    """The minimum of ``x`` over ``axis_name`` (of each group): ``jax.lax.pmin``.

    Same signature as ``jax.lax.pmin``, plus keyword-only ``algorithm`` and ``executor``:
    ``jaxcoll.allreduce(x, axis_name, op="min", ...)``. Where ``axis_name`` is not bound,
    ``jax.lax.pmin`` itself is called, so the error is lax's own.

    Args:
      x: an array or a pytree of arrays, this rank's block (a number counts as a 0-d
        array).
      axis_name: the axis name (or tuple of names) it runs over, bound by
        ``jax.shard_map`` or ``jax.vmap(..., axis_name=...)``.
      axis_index_groups: lax's groups: lists of ranks of ``axis_name`` that hold each
        rank once (of different sizes too, as lax's); each group runs on its own (None:
        the whole axis).
      algorithm: keyword-only, ``"auto"`` (default), ``"xla"`` (lax's built-in itself) or
        a name from ``jaxcoll.algorithms("allreduce")``, as :func:`jaxcoll.allreduce` takes it.
      executor: keyword-only, ``"xla"`` (default), ``"pallas"`` or a
        :class:`~jaxcoll.Pallas`, as :func:`jaxcoll.allreduce` takes it.

    Returns:
      The minimum over the ranks (of this rank's group), on every rank, with ``x``'s
      structure, shapes and dtypes, as ``jax.lax.pmin``'s.
    """
    return _c.allreduce(x, axis_name, op="min", algorithm=algorithm,
                        axis_index_groups=axis_index_groups, executor=executor)


@_lax_errors
def pmean(x, axis_name, *, axis_index_groups=None, algorithm: str = "auto", executor="xla"):
    """The mean of ``x`` over ``axis_name`` (of each group): ``jax.lax.pmean``.

    Same signature as ``jax.lax.pmean``, plus keyword-only ``algorithm`` and ``executor``:
    :func:`psum` divided by n, the group's size (integers give floats, as lax's do).

    Args:
      x: an array or a pytree of arrays, this rank's block (a number counts as a 0-d
        array).
      axis_name: the axis name (or tuple of names) it runs over, bound by
        ``jax.shard_map`` or ``jax.vmap(..., axis_name=...)``.
      axis_index_groups: lax's groups: lists of ranks of ``axis_name`` that hold each
        rank once (of different sizes too: each rank divides by its own
        group's size); each group runs on its own (None: the whole axis).
      algorithm: keyword-only, ``"auto"`` (default), ``"xla"`` (lax's built-in itself) or
        a name from ``jaxcoll.algorithms("allreduce")``, as :func:`jaxcoll.allreduce` takes it.
      executor: keyword-only, ``"xla"`` (default), ``"pallas"`` or a
        :class:`~jaxcoll.Pallas`, as :func:`jaxcoll.allreduce` takes it.

    Returns:
      ``psum(x, axis_name) / n`` on every rank, with ``x``'s structure and
      shapes.
    """
    total = psum(x, axis_name, axis_index_groups=axis_index_groups, algorithm=algorithm,
                 executor=executor)
    if not axis_index_groups:
        n = _lax.axis_size(axis_name)
    elif len(set(map(len, axis_index_groups))) > 1:  # this rank's group's size (lax: the first's)
        n = _c._group_size(axis_name, tuple(map(tuple, axis_index_groups)))
    else:
        n = len(axis_index_groups[0])
    return jax.tree_util.tree_map(lambda leaf: leaf / n, total)


@_lax_errors
def all_gather(x, axis_name, *, axis_index_groups=None, axis: int = 0, tiled: bool = False,
               to: str = "varying", algorithm: str = "auto", executor="xla"):
    """Every rank's ``x`` stacked (or ``tiled``, concatenated) at ``axis``: ``jax.lax.all_gather``.

    Same signature as ``jax.lax.all_gather``, plus keyword-only ``algorithm`` and
    ``executor``: ``jaxcoll.allgather(x, axis_name, dim=axis, tiled=tiled, ...)``.

    Args:
      x: an array or a pytree of arrays, this rank's block (a number counts as a 0-d
        array).
      axis_name: the axis name (or tuple of names) it runs over, bound by
        ``jax.shard_map`` or ``jax.vmap(..., axis_name=...)``.
      axis_index_groups: lax's groups: lists of ranks of ``axis_name`` that hold each
        rank once, of one size; each group runs on its own (None: the whole axis).
      axis: where the n blocks go: a new dimension they are stacked along, or (``tiled``)
        the one they are concatenated along; default 0.
      tiled: False (default): stack; True: concatenate along
        ``axis``.
      to: ``"varying"`` (default), ``"invarying"`` or ``"reduced"``: how the result is
        typed under check_vma, as ``jax.lax.all_gather``'s.
      algorithm: keyword-only, ``"auto"`` (default), ``"xla"`` (lax's built-in itself) or
        a name from ``jaxcoll.algorithms("allgather")``, as :func:`jaxcoll.allgather` takes it.
      executor: keyword-only, ``"xla"`` (default), ``"pallas"`` or a
        :class:`~jaxcoll.Pallas`, as :func:`jaxcoll.allgather` takes it.

    Returns:
      The ranks' ``x`` (of this rank's group) in rank order, with ``x``'s structure and
      dtypes, as ``jax.lax.all_gather``'s.
    """
    return _c.allgather(x, axis_name, dim=axis, tiled=tiled, algorithm=algorithm,
                        axis_index_groups=axis_index_groups, to=to, executor=executor)


@_lax_errors
def psum_scatter(x, axis_name, *, scatter_dimension: int = 0, axis_index_groups=None,
                 tiled: bool = False, algorithm: str = "auto", executor="xla"):
    """This rank's block of the sum along ``scatter_dimension``: ``jax.lax.psum_scatter``.

    Same signature as ``jax.lax.psum_scatter``, plus keyword-only ``algorithm`` and
    ``executor``: ``jaxcoll.reduce_scatter(x, axis_name, dim=scatter_dimension, ...)``.

    Args:
      x: an array or a pytree of arrays, this rank's block (a number counts as a 0-d
        array).
      axis_name: the axis name (or tuple of names) it runs over, bound by
        ``jax.shard_map`` or ``jax.vmap(..., axis_name=...)``.
      scatter_dimension: the dimension of each leaf split into n blocks, block i for
        rank i; default 0.
      axis_index_groups: lax's groups: lists of ranks of ``axis_name`` that hold each
        rank once, of one size; each group runs on its own (None: the whole axis).
      tiled: False (default): ``scatter_dimension``'s size must be n, and it is dropped;
        True: a multiple of n, kept, n times shorter.
      algorithm: keyword-only, ``"auto"`` (default), ``"xla"`` (lax's built-in itself) or
        a name from ``jaxcoll.algorithms("reduce_scatter")``, as
        :func:`jaxcoll.reduce_scatter` takes it.
      executor: keyword-only, ``"xla"`` (default), ``"pallas"`` or a
        :class:`~jaxcoll.Pallas`, as :func:`jaxcoll.reduce_scatter` takes it.

    Returns:
      Block i of the sum over the ranks (of its group) on rank i, with ``x``'s structure
      and dtypes, as ``jax.lax.psum_scatter``'s.
    """
    return _c.reduce_scatter(x, axis_name, op="sum", dim=scatter_dimension, tiled=tiled,
                             algorithm=algorithm, axis_index_groups=axis_index_groups,
                             executor=executor)


@_lax_errors
def all_to_all(x, axis_name, split_axis: int, concat_axis: int, *, axis_index_groups=None,
               tiled: bool = False, algorithm: str = "auto", executor="xla"):
    """Block j along ``split_axis`` goes to rank j, which stacks what it gets at ``concat_axis``.

    Same signature as ``jax.lax.all_to_all``, plus keyword-only ``algorithm`` and
    ``executor``: ``jaxcoll.alltoall(x, axis_name, split_dim=split_axis,
    concat_dim=concat_axis, tiled=tiled, ...)``.

    Args:
      x: an array or a pytree of arrays, this rank's block (a number counts as a 0-d
        array).
      axis_name: the axis name (or tuple of names) it runs over, bound by
        ``jax.shard_map`` or ``jax.vmap(..., axis_name=...)``.
      split_axis: the dimension of each leaf split into n blocks, block j for
        rank j.
      concat_axis: where the n received blocks go, in the senders'
        order.
      axis_index_groups: lax's groups: lists of ranks of ``axis_name`` that hold each
        rank once, of one size; each group runs on its own (None: the whole axis).
      tiled: False (default): ``split_axis``'s size must be n, dropped, and the blocks
        stacked along a new ``concat_axis``; True: a multiple of n, concatenated.
      algorithm: keyword-only, ``"auto"`` (default), ``"xla"`` (lax's built-in itself) or
        a name from ``jaxcoll.algorithms("alltoall")``, as :func:`jaxcoll.alltoall` takes it.
      executor: keyword-only, ``"xla"`` (default), ``"pallas"`` or a
        :class:`~jaxcoll.Pallas`, as :func:`jaxcoll.alltoall` takes it.

    Returns:
      The blocks the ranks (of this rank's group) sent to this one, with ``x``'s
      structure and dtypes, as ``jax.lax.all_to_all``'s.
    """
    return _c.alltoall(x, axis_name, split_dim=split_axis, concat_dim=concat_axis, tiled=tiled,
                       algorithm=algorithm, axis_index_groups=axis_index_groups,
                       executor=executor)


def ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *,
                      axis_name, axis_index_groups=None, algorithm: str = "auto"):
    """Slice i of ``operand`` written at ``output_offsets[i]`` on rank i // (K/n).

    ``jax.lax.ragged_all_to_all``, same signature, plus a keyword-only ``algorithm``
    (:func:`jaxcoll.ragged_alltoall`); it runs on every backend (XLA:CPU has no
    ragged-all-to-all). K is the number of slices, ``len(input_offsets)``.

    Args:
      operand: this rank's rows to send: an array whose leading dimension the slices
        index.
      output: the array the received slices are written into (its rows that no slice
        writes keep their values): ``operand``'s dtype and shape after the first.
      input_offsets: 1-D integers, one per slice: where slice i starts in
        ``operand``.
      send_sizes: 1-D integers: how many rows slice i has (the all-to-all of
        ``recv_sizes``, as lax's rule says).
      output_offsets: 1-D integers: where slice i lands in the receiver's
        ``output``.
      recv_sizes: 1-D integers: how many rows of each slot this rank writes, from each
        sender.
      axis_name: keyword-only, the axis name it runs over, bound by ``jax.shard_map`` or
        ``jax.vmap``.
      axis_index_groups: lax's groups: lists of ranks of ``axis_name``, of one size, that
        hold each rank once (None: the whole axis).
      algorithm: keyword-only, ``"auto"`` (default), ``"xla"`` (lax's own: GPU and TPU
        only) or an alltoall algorithm (``"naive"``, ``"bruck"``) or schedule.

    Returns:
      ``output`` with the slices sent to this rank written into it, as
      ``jax.lax.ragged_all_to_all``'s.
    """
    try:
        _lax.axis_size(axis_name)
    except (NameError, ValueError):
        return _lax.ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets,
                                      recv_sizes, axis_name=axis_name,
                                      axis_index_groups=axis_index_groups)
    return _ragged.ragged_alltoall(operand, output, input_offsets, send_sizes, output_offsets,
                                   recv_sizes, axis_name, algorithm=algorithm,
                                   axis_index_groups=axis_index_groups)


@_lax_errors
def pbroadcast(x, axis_name, source: int, *, algorithm: str = "auto", executor="xla"):
    """Every rank gets rank ``source``'s ``x``: ``jax.lax.pbroadcast``.

    Same signature as ``jax.lax.pbroadcast``, plus keyword-only ``algorithm`` and
    ``executor``: ``jaxcoll.broadcast(x, axis_name, root=source, ...)``.

    Args:
      x: an array or a pytree of arrays, this rank's block (a number counts as a 0-d
        array).
      axis_name: the axis name (or tuple of names) it runs over, bound by
        ``jax.shard_map`` or ``jax.vmap(..., axis_name=...)``.
      source: the rank whose ``x`` every rank gets, a Python int in
        ``0..n-1``.
      algorithm: keyword-only, ``"auto"`` (default), ``"xla"`` (lax's built-in itself) or
        a name from ``jaxcoll.algorithms("broadcast")``, as :func:`jaxcoll.broadcast` takes it.
      executor: keyword-only, ``"xla"`` (default), ``"pallas"`` or a
        :class:`~jaxcoll.Pallas`, as :func:`jaxcoll.broadcast` takes it.

    Returns:
      Rank ``source``'s ``x`` on every rank, with ``x``'s structure, shapes and
      dtypes.
    """
    return _c.broadcast(x, axis_name, root=source, algorithm=algorithm, executor=executor)


def __getattr__(name: str):
    """Everything else is ``jax.lax``'s own."""
    try:
        return getattr(_lax, name)
    except AttributeError:
        raise AttributeError(f"module 'jaxcoll.lax' has no attribute {name!r} (nor has "
                             "jax.lax)") from None
