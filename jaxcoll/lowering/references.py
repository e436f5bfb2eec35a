"""The ``lax`` built-ins each collective matches (``algorithm="xla"``), in one place: the
reference the tests, the main job and the benchmark compare every algorithm against.

One leaf at a time. XLA rejects empty collectives; for an empty leaf the answer is empty anyway
and is built from the shape the built-in would give (``jax.eval_shape``, which runs nothing).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxcoll.lowering import _compat

REDUCE = {"sum": lax.psum, "mean": lax.pmean, "max": lax.pmax, "min": lax.pmin}


def _unless_empty(builtin, leaf):
    """``builtin(leaf)``, or zeros of its result's shape for an empty leaf."""
    if leaf.size:
        return builtin(leaf)
    return _compat.zeros_like_struct(jax.eval_shape(builtin, leaf))


def on_root(values: list, axis, root: int, groups=None) -> list:
    """``values`` on the root rank (of each group), zeros elsewhere."""
    is_root = _compat.rank_in_group(axis, groups) == root
    return [jnp.where(is_root, v, jnp.zeros_like(v)) for v in values]


def my_block_of(full, axis, d: int, tiled: bool, n: int, groups=None):
    """This rank's block (along d) of an array every rank (of its group) holds."""
    block = full.shape[d] // n
    me = _compat.rank_in_group(axis, groups)
    mine = lax.dynamic_slice_in_dim(full, me * block, block, axis=d)
    return mine if tiled else jnp.squeeze(mine, d)


def allreduce(leaf, axis, op: str, groups=None):
    """``lax.psum`` / ``pmean`` / ``pmax`` / ``pmin``."""
    return REDUCE[op](leaf, axis, axis_index_groups=groups)


def reduce_scatter(leaf, axis, op: str, d: int, tiled: bool, n: int, groups=None):
    """``lax.psum_scatter``, or for max/min (which it lacks) pmax/pmin + this rank's block."""
    if op in ("sum", "mean"):
        out = _unless_empty(lambda x: lax.psum_scatter(
            x, axis, scatter_dimension=d, tiled=tiled, axis_index_groups=groups), leaf)
        return out / n if op == "mean" else out
    return my_block_of(allreduce(leaf, axis, op, groups), axis, d, tiled, n, groups)


def allgather(leaf, axis, d: int, tiled: bool, groups=None, to: str = "varying"):
    """``lax.all_gather``."""
    return _unless_empty(lambda x: lax.all_gather(x, axis, axis=d, tiled=tiled,
                                                  axis_index_groups=groups, to=to), leaf)


def alltoall(leaf, axis, dims: tuple[int, int], tiled: bool, groups=None):
    """``lax.all_to_all``."""
    split, concat = dims
    return _unless_empty(lambda x: lax.all_to_all(x, axis, split, concat, tiled=tiled,
                                                  axis_index_groups=groups), leaf)


def broadcast(leaf, axis, root: int, groups=None):
    """Root's leaf, bit for bit, from ``lax.all_gather`` (it moves n times the data)."""
    return leaf if leaf.size == 0 else lax.all_gather(leaf, axis, axis_index_groups=groups)[root]
