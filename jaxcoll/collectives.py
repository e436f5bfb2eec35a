"""The public collectives: validate the arguments, pack the pytree, pick a schedule, execute.

Every function is called inside ``jax.shard_map`` (or ``jax.vmap`` with ``axis_name``), like
the ``lax`` collectives it matches. Costs are given in the α-β-γ model for N bytes per rank on
n ranks: α per message round, β per byte sent, γ per byte reduced.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .algorithms import SCHEDULES, build_schedule
from .execute import execute

OPS = ("sum", "mean", "max", "min")
_COMBINE = {"sum": lax.add, "mean": lax.add, "max": lax.max, "min": lax.min}
_XLA_REDUCE = {"sum": lax.psum, "mean": lax.pmean, "max": lax.pmax, "min": lax.pmin}
DEFAULT_ALGORITHM = "ring"  # what "auto" means until the cost model chooses


def algorithms(primitive: str) -> tuple[str, ...]:
    """The algorithm names ``primitive`` accepts, ``"auto"`` and ``"xla"`` included."""
    _check_choice("algorithms", "primitive", primitive, tuple(SCHEDULES))
    return ("auto", "xla", *sorted(SCHEDULES[primitive]))


# ----------------------------------------------------------------------------- validation

def _check_choice(fn: str, arg: str, value, allowed) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"jaxcoll.{fn}: {arg}={value!r} is not one of {', '.join(allowed)}")


def _resolve_algorithm(fn: str, primitive: str, algorithm) -> str:
    _check_choice(fn, "algorithm", algorithm, algorithms(primitive))
    return DEFAULT_ALGORITHM if algorithm == "auto" else algorithm


def _bound_axis_names() -> tuple:
    try:  # not public API; only used to make the error message helpful
        from jax._src import core
        return tuple(core.unsafe_get_axis_names())
    except Exception:  # pragma: no cover - depends on the jax version
        return ()


def _axis_size(fn: str, axis) -> int:
    """Number of ranks along ``axis`` (a name or a tuple of names), with a clear error."""
    names = axis if isinstance(axis, tuple) else (axis,)
    if not names or any(isinstance(a, (list, tuple, set, dict)) or a is None for a in names):
        raise TypeError(f"jaxcoll.{fn}: axis={axis!r} must be a mesh axis name or a non-empty "
                        "tuple of names, e.g. 'dp' or ('node', 'gpu')")
    try:
        return int(lax.axis_size(axis))
    except NameError:
        bound = _bound_axis_names()
        where = (f"the bound axis names here are {bound}" if bound else
                 "no axis is bound here: call it inside jax.shard_map(..., mesh=...) or "
                 "jax.vmap(..., axis_name=...)")
        raise ValueError(f"jaxcoll.{fn}: axis={axis!r} is not a bound axis name; {where}"
                         ) from None


def _array_leaves(fn: str, x) -> tuple[list, object]:
    """The pytree's leaves as arrays, and its structure; non-array leaves are a TypeError."""
    leaves, treedef = jax.tree_util.tree_flatten(x)
    arrays = []
    for leaf in leaves:
        if isinstance(leaf, (bool, int, float, complex, np.generic)):
            leaf = jnp.asarray(leaf)
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise TypeError(f"jaxcoll.{fn}: x has a leaf of type {type(leaf).__name__} "
                            f"({leaf!r:.60}); every leaf must be an array or a number")
        arrays.append(leaf)
    return arrays, treedef


def _check_op_dtype(fn: str, op: str, dtype) -> None:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        raise TypeError(f"jaxcoll.{fn}: op={op!r} does not take bool arrays; "
                        "cast to an integer dtype first")
    if op == "mean" and not jnp.issubdtype(dtype, jnp.inexact):
        raise TypeError(f"jaxcoll.{fn}: op='mean' needs a floating dtype, got {dtype}; "
                        "lax.pmean would silently return float32 here. Use op='sum' and "
                        "divide, or cast to a float dtype first")
    if op in ("max", "min") and jnp.issubdtype(dtype, jnp.complexfloating):
        raise TypeError(f"jaxcoll.{fn}: op={op!r} is not defined for complex dtype {dtype}")


def _normalize_dim(fn: str, dim, ndim: int, *, new_axis: bool, shape) -> int:
    """``dim`` as a non-negative index into a shape of rank ``ndim`` (+1 when it adds an axis)."""
    rank = ndim + 1 if new_axis else ndim
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise TypeError(f"jaxcoll.{fn}: dim={dim!r} must be an int")
    if not -rank <= dim < rank:
        raise ValueError(f"jaxcoll.{fn}: dim={dim} is out of range for a leaf of shape "
                         f"{tuple(shape)}; allowed: {-rank}..{rank - 1}")
    return int(dim) % rank


# ----------------------------------------------------------------------------- packing

def _packed_by_dtype(leaves: list, dims: list, to_rows: Callable, run: Callable,
                     from_rows: Callable) -> list:
    """Run one collective per dtype on all that dtype's leaves packed side by side.

    ``to_rows(leaf, dim)`` gives a (rows, width) matrix, equal ``rows`` for every leaf; the
    matrices are concatenated along the width into one buffer and ``run`` maps it to a
    (rows', total width) result whose columns are split back and given to
    ``from_rows(piece, leaf, dim)``.
    """
    out = [None] * len(leaves)
    for dtype in dict.fromkeys(leaf.dtype for leaf in leaves):
        indices = [i for i, leaf in enumerate(leaves) if leaf.dtype == dtype]
        pieces = [to_rows(leaves[i], dims[i]) for i in indices]
        widths = [piece.shape[1] for piece in pieces]
        result = run(jnp.concatenate(pieces, axis=1))  # (rows', sum(widths))
        for i, piece in zip(indices, jnp.split(result, np.cumsum(widths)[:-1], axis=1)):
            out[i] = from_rows(piece, leaves[i], dims[i])
    return out


# ----------------------------------------------------------------------------- collectives

def allreduce(x, axis, *, op: str = "sum", algorithm: str = "auto"):
    """Every rank gets ``op`` of ``x`` over ``axis`` (like ``lax.psum``/``pmax``/``pmin``/``pmean``).

    Cost, ring: 2(n-1)α + 2(n-1)/n·Nβ + (n-1)/n·Nγ; naive: 2(n-1)α + 2(n-1)·Nβ + (n-1)·Nγ.
    """
    algorithm = _resolve_algorithm("allreduce", "allreduce", algorithm)
    _check_choice("allreduce", "op", op, OPS)
    n = _axis_size("allreduce", axis)
    leaves, treedef = _array_leaves("allreduce", x)
    for leaf in leaves:
        _check_op_dtype("allreduce", op, leaf.dtype)
    if algorithm == "xla":
        return treedef.unflatten([_XLA_REDUCE[op](leaf, axis) for leaf in leaves])

    schedule = build_schedule("allreduce", algorithm, n)
    out = _packed_by_dtype(
        leaves, [None] * len(leaves),
        to_rows=lambda leaf, _: leaf.reshape(1, -1),  # (1, size)
        run=lambda buf: execute(schedule, buf, axis, _COMBINE[op]),
        from_rows=lambda piece, leaf, _: piece.reshape(leaf.shape))
    if op == "mean":
        out = [leaf / n for leaf in out]
    return treedef.unflatten(out)


def reduce_scatter(x, axis, *, op: str = "sum", dim: int = 0, tiled: bool = False,
                   algorithm: str = "auto"):
    """Rank i gets block i (along ``dim``) of ``op`` of ``x`` over ``axis`` (``lax.psum_scatter``).

    Cost, ring: (n-1)α + (n-1)/n·Nβ + (n-1)/n·Nγ; naive: 2(n-1)α + (n-1)(N + N/n)β + (n-1)·Nγ.
    """
    algorithm = _resolve_algorithm("reduce_scatter", "reduce_scatter", algorithm)
    _check_choice("reduce_scatter", "op", op, OPS)
    n = _axis_size("reduce_scatter", axis)
    leaves, treedef = _array_leaves("reduce_scatter", x)
    dims = []
    for leaf in leaves:
        _check_op_dtype("reduce_scatter", op, leaf.dtype)
        dims.append(_scatter_dim("reduce_scatter", leaf.shape, dim, tiled, n))
    if algorithm == "xla":
        return treedef.unflatten([_xla_reduce_scatter(leaf, axis, op, d, tiled, n)
                                  for leaf, d in zip(leaves, dims)])

    schedule = build_schedule("reduce_scatter", algorithm, n)

    def to_rows(leaf, d):
        # Block i (the i-th slice along dim) becomes row i.
        return jnp.moveaxis(leaf, d, 0).reshape(n, -1)  # (n, size // n)

    def run(buf):
        reduced = execute(schedule, buf, axis, _COMBINE[op])  # (n, width)
        return lax.dynamic_slice_in_dim(reduced, lax.axis_index(axis), 1, axis=0)  # (1, width)

    def from_rows(piece, leaf, d):
        moved = jnp.moveaxis(leaf, d, 0).shape  # (n * block, *other dims) or (n, *other dims)
        block_shape = (moved[0] // n, *moved[1:]) if tiled else moved[1:]
        block = piece.reshape(block_shape)
        return jnp.moveaxis(block, 0, d) if tiled else block

    out = _packed_by_dtype(leaves, dims, to_rows, run, from_rows)
    if op == "mean":
        out = [leaf / n for leaf in out]
    return treedef.unflatten(out)


def _scatter_dim(fn: str, shape, dim, tiled: bool, n: int) -> int:
    if len(shape) == 0:
        raise ValueError(f"jaxcoll.{fn}: a 0-d leaf cannot be scattered; every leaf needs a "
                         f"dimension dim={dim} of size {'a multiple of ' if tiled else ''}{n}")
    d = _normalize_dim(fn, dim, len(shape), new_axis=False, shape=shape)
    if tiled and shape[d] % n:
        raise ValueError(f"jaxcoll.{fn}: tiled=True needs dimension dim={dim} of a leaf of "
                         f"shape {tuple(shape)} to be a multiple of the axis size {n}")
    if not tiled and shape[d] != n:
        raise ValueError(f"jaxcoll.{fn}: tiled=False needs dimension dim={dim} of a leaf of "
                         f"shape {tuple(shape)} to equal the axis size {n} "
                         "(or pass tiled=True to split it into n blocks)")
    return d


def _xla_reduce_scatter(leaf, axis, op: str, d: int, tiled: bool, n: int):
    """The reference: ``lax.psum_scatter``, or for max/min (which it lacks) pmax/pmin + slice."""
    if leaf.size == 0:  # XLA rejects an empty reduce-scatter; the answer is empty anyway
        shape = list(leaf.shape)
        shape[d] //= n
        return jnp.zeros(shape if tiled else shape[:d] + shape[d + 1:], leaf.dtype)
    if op in ("sum", "mean"):
        out = lax.psum_scatter(leaf, axis, scatter_dimension=d, tiled=tiled)
        return out / n if op == "mean" else out
    reduced = _XLA_REDUCE[op](leaf, axis)
    block = reduced.shape[d] // n
    mine = lax.dynamic_slice_in_dim(reduced, lax.axis_index(axis) * block, block, axis=d)
    return mine if tiled else jnp.squeeze(mine, d)


def allgather(x, axis, *, dim: int = 0, tiled: bool = False, algorithm: str = "auto"):
    """Every rank gets all ranks' ``x`` stacked (or, ``tiled``, concatenated) along ``dim``.

    Matches ``lax.all_gather(x, axis, axis=dim, tiled=tiled)``.
    Cost, ring: (n-1)α + (n-1)·Nβ; naive: 2(n-1)α + (n-1)(N + nN)β (N = bytes of ``x``).
    """
    algorithm = _resolve_algorithm("allgather", "allgather", algorithm)
    n = _axis_size("allgather", axis)
    leaves, treedef = _array_leaves("allgather", x)
    dims = []
    for leaf in leaves:
        if tiled and leaf.ndim == 0:
            raise ValueError("jaxcoll.allgather: tiled=True cannot concatenate 0-d leaves; "
                             "use tiled=False to stack them")
        dims.append(_normalize_dim("allgather", dim, leaf.ndim, new_axis=not tiled,
                                   shape=leaf.shape))
    if algorithm == "xla":
        return treedef.unflatten([_xla_allgather(leaf, axis, d, tiled, n)
                                  for leaf, d in zip(leaves, dims)])

    schedule = build_schedule("allgather", algorithm, n)

    def run(mine):  # (1, width): this rank's block goes to row axis_index
        blocks = jnp.zeros((n, mine.shape[1]), mine.dtype)  # (n, width)
        blocks = lax.dynamic_update_slice_in_dim(blocks, mine, lax.axis_index(axis), axis=0)
        return execute(schedule, blocks, axis, _COMBINE["sum"])

    def from_rows(piece, leaf, d):
        stacked = jnp.moveaxis(piece.reshape(n, *leaf.shape), 0, d)  # n inserted at d
        if not tiled:
            return stacked
        shape = list(leaf.shape)
        shape[d] *= n
        return stacked.reshape(shape)  # dims d, d+1 merged: (..., n * shape[d], ...)

    out = _packed_by_dtype(leaves, dims, lambda leaf, _: leaf.reshape(1, -1), run, from_rows)
    return treedef.unflatten(out)


def _xla_allgather(leaf, axis, d: int, tiled: bool, n: int):
    """The reference: ``lax.all_gather`` (which XLA rejects for empty leaves)."""
    if leaf.size == 0:
        shape = list(leaf.shape)
        if tiled:
            shape[d] *= n
        else:
            shape.insert(d, n)
        return jnp.zeros(shape, leaf.dtype)
    return lax.all_gather(leaf, axis, axis=d, tiled=tiled)


# ----------------------------------------------------------------------------- shortcuts

def ring_allreduce(x, axis, *, op: str = "sum"):
    """``allreduce(x, axis, op=op, algorithm="ring")``."""
    return allreduce(x, axis, op=op, algorithm="ring")


def ring_reduce_scatter(x, axis, *, op: str = "sum", dim: int = 0, tiled: bool = False):
    """``reduce_scatter(..., algorithm="ring")``."""
    return reduce_scatter(x, axis, op=op, dim=dim, tiled=tiled, algorithm="ring")


def ring_allgather(x, axis, *, dim: int = 0, tiled: bool = False):
    """``allgather(..., algorithm="ring")``."""
    return allgather(x, axis, dim=dim, tiled=tiled, algorithm="ring")
