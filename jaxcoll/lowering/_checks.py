"""Argument checks shared by the public collectives: each error names the function, the
argument, the value and what is allowed, and is raised before anything reaches XLA."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcoll.ir.records import RECORDS
from jaxcoll.lowering._compat import bound_axis_names


def check_choice(fn: str, arg: str, value, allowed) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"jaxcoll.{fn}: {arg}={value!r} is not one of {', '.join(allowed)}")


def axis_size(fn: str, axis) -> int:
    """Number of ranks along ``axis`` (a name or a tuple of names), with a clear error."""
    names = axis if isinstance(axis, tuple) else (axis,)
    if not names or any(isinstance(a, (list, tuple, set, dict)) or a is None for a in names):
        raise TypeError(f"jaxcoll.{fn}: axis={axis!r} must be a mesh axis name or a tuple (or "
                        "list) of names, e.g. 'dp' or ('node', 'gpu')")
    try:
        return int(lax.axis_size(axis))
    except (NameError, ValueError):  # ValueError: a name JAX reads as a position, e.g. 0
        bound = bound_axis_names()
        unbound = next((name for name in names if name not in bound), names[0])
        where = (f"the bound axis names here are {bound}" if bound else
                 "no axis is bound here: call it inside jax.shard_map(..., mesh=...) or "
                 "jax.vmap(..., axis_name=...)")
        # NameError and JAX's own words first, as lax's collectives raise; then jaxcoll's
        raise NameError(f"unbound axis name: {unbound}. jaxcoll.{fn}: axis={axis!r} is not a "
                        f"bound axis name; {where}") from None


def _describe(value) -> str:
    """``repr(value)``, or for a traced value its type (a tracer's repr differs by jax version)."""
    if isinstance(value, jax.core.Tracer):
        return f"<traced {value.dtype}{list(value.shape)}>"
    return repr(value)


def check_groups(fn: str, groups, n: int, uneven: bool = False):
    """``axis_index_groups`` as a tuple of tuples that hold every rank of an axis of ``n``
    once, of equal size unless ``uneven`` (lax's rules: psum, pmax and pmin take groups of
    different sizes), or None."""
    if groups is None:
        return None
    try:
        checked = tuple(tuple(int(r) for r in group) for group in groups)
    except (TypeError, ValueError):
        checked = None
    flat = sorted(r for group in checked or () for r in group)
    equal = checked and len({len(g) for g in checked}) == 1
    if not checked or not (equal or uneven) or not all(checked) or flat != list(range(n)):
        example = ([list(range(0, n, 2)), list(range(1, n, 2))] if n % 2 == 0
                   else [list(range(n))])
        sizes = "non-empty groups" if uneven else "groups of equal size"
        raise ValueError(f"jaxcoll.{fn}: axis_index_groups={groups!r} must be {sizes} that "
                         f"hold every rank 0..{n - 1} of the axis once, e.g. {example}")
    return checked


def check_root(fn: str, root, n: int) -> int:
    if not isinstance(root, (int, np.integer)) or isinstance(root, bool):
        got = "" if isinstance(root, jax.core.Tracer) else f", got {type(root).__name__}"
        raise TypeError(f"jaxcoll.{fn}: root={_describe(root)} must be a Python int in "
                        f"0..{n - 1} (the root is fixed when the program is traced){got}")
    if not 0 <= root < n:
        raise ValueError(f"jaxcoll.{fn}: root={root} is out of range for an axis of {n} ranks; "
                         f"allowed: 0..{n - 1}")
    return int(root)


def array_leaves(fn: str, x) -> tuple[list, object]:
    """The pytree's leaves as arrays, and its structure; non-array leaves are a TypeError."""
    leaves, treedef = jax.tree_util.tree_flatten(x)
    arrays = []
    for leaf in leaves:
        if isinstance(leaf, (bool, int, float, complex)) or (
                isinstance(leaf, np.generic) and _numeric(leaf.dtype)):
            leaf = jnp.asarray(leaf)
        if not isinstance(leaf, (jax.Array, np.ndarray, np.generic)):
            raise TypeError(f"jaxcoll.{fn}: x has a leaf of type {type(leaf).__name__} "
                            f"({leaf!r:.60}); every leaf must be an array or a number")
        if not _numeric(leaf.dtype):
            raise TypeError(f"jaxcoll.{fn}: x has a leaf of dtype {leaf.dtype}; every leaf "
                            "must have a bool, integer, floating or complex dtype")
        arrays.append(leaf)
    return arrays, treedef


def _numeric(dtype) -> bool:
    return dtype == np.bool_ or jnp.issubdtype(dtype, jnp.number)


def check_op_dtype(fn: str, primitive: str, op: str, dtype) -> None:
    dtype = np.dtype(dtype)
    # psum sums bools as int32; pmax and pmin of bools are bools
    if dtype == np.bool_ and not RECORDS[primitive].sums_bools:
        raise TypeError(f"jaxcoll.{fn}: op={op!r} does not take a leaf of dtype bool; "
                        "cast it to an integer dtype first")
    if op == "mean" and not jnp.issubdtype(dtype, jnp.inexact):
        raise TypeError(f"jaxcoll.{fn}: op='mean' needs a floating dtype, got {dtype}; "
                        "lax.pmean would silently return float32 here. Use op='sum' and "
                        "divide, or cast to a float dtype first")
    if op in ("max", "min") and jnp.issubdtype(dtype, jnp.complexfloating):
        raise TypeError(f"jaxcoll.{fn}: op={op!r} is not defined for a leaf of complex dtype "
                        f"{dtype}; complex leaves allow op='sum' or op='mean'")


def normalize_dim(fn: str, dim, shape, *, new_axis: bool, arg: str = "dim") -> int:
    """``dim`` as a non-negative index into ``shape`` (one longer when it adds an axis)."""
    rank = len(shape) + 1 if new_axis else len(shape)
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise TypeError(f"jaxcoll.{fn}: {arg}={_describe(dim)} must be an int; allowed for a "
                        f"leaf of shape {tuple(shape)}: {-rank}..{rank - 1}")
    if not -rank <= dim < rank:
        raise ValueError(f"jaxcoll.{fn}: {arg}={dim} is out of range for a leaf of shape "
                         f"{tuple(shape)}; allowed: {-rank}..{rank - 1}")
    return int(dim) % rank


def check_flag(fn: str, arg: str, value) -> None:
    """A bool argument such as ``tiled`` (a string like "no" would otherwise count as True)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"jaxcoll.{fn}: {arg}={_describe(value)} must be a bool (True or False)")


def scatter_dim(fn: str, shape, dim, tiled: bool, n: int, arg: str = "dim") -> int:
    """The dimension a leaf is split into n blocks along (reduce_scatter, scatter, alltoall)."""
    check_flag(fn, "tiled", tiled)
    if len(shape) == 0:
        raise ValueError(f"jaxcoll.{fn}: a 0-d leaf cannot be split; every leaf needs a "
                         f"dimension {arg}={dim} of size {'a multiple of ' if tiled else ''}{n}")
    d = normalize_dim(fn, dim, shape, new_axis=False, arg=arg)
    if tiled and shape[d] % n:
        raise ValueError(f"jaxcoll.{fn}: tiled=True needs dimension {arg}={dim} of a leaf of "
                         f"shape {tuple(shape)} to be a multiple of the axis size {n}")
    if not tiled and shape[d] != n:
        raise ValueError(f"jaxcoll.{fn}: tiled=False needs dimension {arg}={dim} of a leaf of "
                         f"shape {tuple(shape)} to equal the axis size {n} "
                         "(or pass tiled=True to split it into n blocks)")
    return d


def gather_dim(fn: str, shape, dim, tiled: bool) -> int:
    """The dimension n blocks are stacked (or, tiled, concatenated) along (allgather, gather)."""
    check_flag(fn, "tiled", tiled)
    if tiled and len(shape) == 0:
        raise ValueError(f"jaxcoll.{fn}: tiled=True cannot concatenate 0-d leaves; "
                         "use tiled=False to stack them")
    return normalize_dim(fn, dim, shape, new_axis=not tiled)


def alltoall_dims(shape, split_dim, concat_dim, tiled: bool, n: int) -> tuple[int, int]:
    """(split, concat) for alltoall: split as in scatter; concat indexes the result, which
    has the leaf's rank (without tiling the split dimension is dropped and n added)."""
    split = scatter_dim("alltoall", shape, split_dim, tiled, n, arg="split_dim")
    concat = normalize_dim("alltoall", concat_dim, shape, new_axis=False, arg="concat_dim")
    return split, concat


def check_two_level_axis(fn: str, algorithm: str, axis) -> None:
    """A hierarchical algorithm needs ``axis`` = a tuple of names, one per level."""
    if not isinstance(axis, tuple):
        raise ValueError(f"jaxcoll.{fn}: algorithm={algorithm!r} needs axis to be a tuple of "
                         "mesh axis names, one per level from the outermost, e.g. "
                         f"('node', 'gpu') or ('x', 'y', 'z'); got axis={axis!r} (one level: "
                         f"({axis!r},))")
