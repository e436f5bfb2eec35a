"""Sharded leaves: a public collective run on each device's local shards.

A leaf of ``x`` may be sharded in its type over mesh axes outside the collective (Explicit
axes that a shard_map over some axes leaves global). Each public collective first asks
:func:`local_shards`, a plain function: where such a leaf is, it runs the collective inside a
shard_map over those axes, its result's specs derived from the input's (:func:`_result_spec`);
it also takes lax's forms of ``axis``.
"""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from jaxcoll.ir.records import RECORDS
from jaxcoll.lowering import _compat
from jaxcoll.lowering._checks import alltoall_dims, array_leaves, axis_size, gather_dim, scatter_dim


def local_shards(primitive: str, collective: Callable, arguments: dict) -> tuple:
    """The result of a public collective where it runs other than as it was called.

    Where a leaf of ``x`` is sharded in its type over mesh axes outside the collective
    (Explicit axes that a shard_map over some axes leaves global), the collective runs in a
    shard_map over them, on each device's local shards, the result's specs derived from the
    input's. ``axis`` takes lax's forms: a list is the tuple of its names, and the empty tuple
    (no axis at all) gives ``x`` as it is, as every lax collective does.

    Args:
      primitive: the collective's name (a key of ``RECORDS``), for its layout and errors.
      collective: the public function, ``collective(x, axis, **kwargs)``.
      arguments: its arguments by name, ``x`` and ``axis`` included (``locals()`` on entry).

    Returns:
      ``(result,)`` where it ran so; ``()`` where the caller runs it as it was called.
    """
    kwargs = dict(arguments)
    x, axis = kwargs.pop("x"), kwargs.pop("axis")
    if isinstance(axis, list):
        return (collective(x, tuple(axis), **kwargs),)
    if axis == ():
        array_leaves(primitive, x)  # still an array or a pytree of them
        return (x,)
    leaves, treedef = jax.tree_util.tree_flatten(x)

    def result_specs(specs):
        groups = kwargs.get("axis_index_groups")
        n = len(next(iter(groups))) if groups else axis_size(primitive, axis)
        return treedef.unflatten([P(*_result_spec(primitive, spec, np.shape(leaf), n, kwargs))
                                  for spec, leaf in zip(specs, leaves)])

    local = _compat.on_local_shards(lambda t: collective(t, axis, **kwargs), x, result_specs)
    return () if local is None else (local,)


def _result_spec(primitive: str, spec: tuple, shape, n: int, kwargs: dict) -> list:
    """The sharding spec of the result of ``primitive`` on a leaf of ``shape`` and ``spec``:
    the same, with the dimension it splits or gathers (which must be whole) removed or added.

    Args:
      primitive: the collective's name.
      spec: the leaf's spec, one entry per dimension (None: whole).
      shape: the leaf's shape.
      n: the ranks of one collective (a group's, with groups).
      kwargs: the public function's keyword arguments (``dim``, ``tiled``, ``split_dim``,
        ``concat_dim``).

    Returns:
      The result's spec, one entry per dimension of the result.

    Raises:
      ValueError: the dimension the collective splits or gathers is sharded.
    """
    spec, tiled = list(spec), kwargs.get("tiled", False)

    def whole(d: int, arg: str) -> int:
        if spec[d] is not None:
            raise ValueError(f"jaxcoll.{primitive}: {arg} is sharded over mesh axes {spec[d]} "
                             f"in x's type (a leaf of shape {tuple(shape)}); the dimension a "
                             "collective splits or gathers must be whole on every device")
        return d

    layout = RECORDS[primitive].layout
    if layout == "scatter":  # reduce_scatter, scatter
        d = whole(scatter_dim(primitive, shape, kwargs.get("dim", 0), tiled, n), "dim")
        return spec if tiled else spec[:d] + spec[d + 1:]
    if layout == "gather":  # allgather, gather
        d = gather_dim(primitive, shape, kwargs.get("dim", 0), tiled)
        if tiled:
            whole(d, "dim")
            return spec
        return spec[:d] + [None] + spec[d:]
    if layout == "exchange":  # alltoall
        split, concat = alltoall_dims(shape, kwargs["split_dim"], kwargs["concat_dim"], tiled, n)
        whole(split, "split_dim")
        if tiled:
            whole(concat, "concat_dim")
            return spec
        kept = spec[:split] + spec[split + 1:]
        return kept[:concat] + [None] + kept[concat:]
    return spec  # allreduce, broadcast, reduce: the leaf's shape
