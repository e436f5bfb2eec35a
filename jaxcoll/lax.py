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
    """``lax.psum``: the sum over ``axis_name`` (of each group)."""
    return _c.allreduce(x, axis_name, op="sum", algorithm=algorithm,
                        axis_index_groups=axis_index_groups, executor=executor)


@_lax_errors
def pmax(x, axis_name, *, axis_index_groups=None, algorithm: str = "auto", executor="xla"):
    """``lax.pmax``: the maximum over ``axis_name`` (of each group)."""
    return _c.allreduce(x, axis_name, op="max", algorithm=algorithm,
                        axis_index_groups=axis_index_groups, executor=executor)


@_lax_errors
def pmin(x, axis_name, *, axis_index_groups=None, algorithm: str = "auto", executor="xla"):
    """``lax.pmin``: the minimum over ``axis_name`` (of each group)."""
    return _c.allreduce(x, axis_name, op="min", algorithm=algorithm,
                        axis_index_groups=axis_index_groups, executor=executor)


@_lax_errors
def pmean(x, axis_name, *, axis_index_groups=None, algorithm: str = "auto", executor="xla"):
    """``lax.pmean``: ``psum / n`` (integers give floats, as lax's do)."""
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
    """``lax.all_gather``: every rank's ``x`` stacked (or ``tiled``, concatenated) at ``axis``."""
    return _c.allgather(x, axis_name, dim=axis, tiled=tiled, algorithm=algorithm,
                        axis_index_groups=axis_index_groups, to=to, executor=executor)


@_lax_errors
def psum_scatter(x, axis_name, *, scatter_dimension: int = 0, axis_index_groups=None,
                 tiled: bool = False, algorithm: str = "auto", executor="xla"):
    """``lax.psum_scatter``: this rank's block of the sum along ``scatter_dimension``."""
    return _c.reduce_scatter(x, axis_name, op="sum", dim=scatter_dimension, tiled=tiled,
                             algorithm=algorithm, axis_index_groups=axis_index_groups,
                             executor=executor)


@_lax_errors
def all_to_all(x, axis_name, split_axis: int, concat_axis: int, *, axis_index_groups=None,
               tiled: bool = False, algorithm: str = "auto", executor="xla"):
    """``lax.all_to_all``: block j along ``split_axis`` to rank j, received blocks along
    ``concat_axis``."""
    return _c.alltoall(x, axis_name, split_dim=split_axis, concat_dim=concat_axis, tiled=tiled,
                       algorithm=algorithm, axis_index_groups=axis_index_groups,
                       executor=executor)


def ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *,
                      axis_name, axis_index_groups=None, algorithm: str = "auto"):
    """``lax.ragged_all_to_all``: slice i of ``operand`` written at ``output_offsets[i]`` on rank
    i // (K/n); on every backend (XLA:CPU has no ragged-all-to-all)."""
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
    """``lax.pbroadcast``: every rank gets rank ``source``'s ``x``."""
    return _c.broadcast(x, axis_name, root=source, algorithm=algorithm, executor=executor)


def __getattr__(name: str):
    """Everything else is ``jax.lax``'s own."""
    try:
        return getattr(_lax, name)
    except AttributeError:
        raise AttributeError(f"module 'jaxcoll.lax' has no attribute {name!r} (nor has "
                             "jax.lax)") from None
