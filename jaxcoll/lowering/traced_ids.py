"""The plan's tables read on one rank, traced: both executors (execute.py, pallas_kernel.py)
read chunk ids, masks and the NaN order through here, so they run the same program."""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcoll.lowering.ids import Ids, grid_moved

Combine = Callable[[jnp.ndarray, jnp.ndarray], jnp.ndarray]


def _row(table: np.ndarray, step, me):
    """``table[step, me]`` for a constant (n_steps, n_ranks, ...) table; ``step`` may be traced."""
    if table.shape[0] == 1:
        return lax.dynamic_index_in_dim(jnp.asarray(table[0]), me, 0, keepdims=False)
    at_step = lax.dynamic_index_in_dim(jnp.asarray(table), step, 0, keepdims=False)
    return lax.dynamic_index_in_dim(at_step, me, 0, keepdims=False)


def ids_at(ids: Ids, step, me):
    """This rank's chunk ids at ``step`` (traced or not), computed from their compact form."""
    def at_step(array):  # array[step]
        if array.shape[0] == 1:
            return jnp.asarray(array[0])
        return lax.dynamic_index_in_dim(jnp.asarray(array), step, 0, keepdims=False)

    arrays = ids.arrays  # the kind's named arrays (ids.py)
    if ids.kind == "affine" and not (arrays.stride.any() or arrays.per_step.any()):
        # every rank's ids alike: a constant (n_steps, n_moved) row per step
        rows = arrays.offset + arrays.base % ids.modulus
        row = rows[0] if rows.shape[0] == 1 else at_step(rows)  # numpy: constants
    elif ids.kind == "affine":
        base, stride, offset, per_step = (at_step(arrays.base), at_step(arrays.stride),
                                          at_step(arrays.offset), at_step(arrays.per_step))
        row = offset + (base + per_step * step + stride * me) % ids.modulus
    elif ids.kind == "xor":
        row = at_step(arrays.base) ^ (me & ids.mask)
    elif ids.kind == "mirror":  # odd ranks negate the base
        base, stride, offset = (at_step(arrays.base), at_step(arrays.stride),
                                at_step(arrays.offset))
        row = offset + (jnp.where(me % 2 == 1, -base, base) + stride * me) % ids.modulus
    elif ids.kind == "grid":  # each level's coordinate moved by the rank's
        row = at_step(arrays.offset) + grid_moved(at_step(arrays.base), me, ids.sizes,
                                                  ids.stride)
    elif ids.kind == "rows":  # the taking-part ranks' rows; everyone else the default
        if len(arrays.ranks) == 1:  # one rank's row, the default elsewhere
            mine, others = at_step(arrays.rows)[0], at_step(arrays.default)  # (kept,) each
            return _first_only(ids, lax.select(
                jnp.broadcast_to(me == arrays.ranks[0], others.shape), mine, others))
        hit = jnp.asarray(arrays.ranks) == me  # (n taking part,)
        mine = at_step(arrays.rows)[jnp.argmax(hit)]
        row = jnp.where(hit.any(), mine, at_step(arrays.default))
    else:
        row = _row(arrays.table, step, me)
    return _first_only(ids, row)


def _first_only(ids: Ids, row):
    """The run c, c+1, ... where ``ids`` keep only its first id c; else ``row`` itself."""
    if ids.first_only and ids.n_moved > 1:  # an iota, not a constant of n_moved ids
        return row[0] + jnp.arange(ids.n_moved, dtype=row.dtype)
    return row


def flag(mask: Ids, me):
    """This rank's entry of a per-rank mask (one step, one id) as a bool."""
    arrays = mask.arrays
    if (mask.kind == "rows" and len(arrays.ranks) == 1 and arrays.rows.all()
            and not arrays.default.any()):
        return me == arrays.ranks[0]  # one rank's flag
    return ids_at(mask, 0, me)[0] != 0


def reduced(combine: Combine, old, got, sender_is_lower=None):
    """``combine(old, got)``; where partners reduce into each other (``sender_is_lower`` given:
    True where this rank's sender is the lower rank), the lower rank's NaN kept, so both
    compute the same bits (which NaN ``combine`` returns depends on operand order, which the
    compiler may change)."""
    out = combine(old, got)
    if sender_is_lower is None or not jnp.issubdtype(out.dtype, jnp.inexact):
        return out
    lower = jnp.where(sender_is_lower, got, old)
    higher = jnp.where(sender_is_lower, old, got)
    nan = jnp.where(jnp.isnan(lower), lower, jnp.where(jnp.isnan(higher), higher, out))
    return jnp.where(jnp.isnan(out), nan, out)
