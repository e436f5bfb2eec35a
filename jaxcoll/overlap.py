"""Collectives the caller's computation runs inside: each arriving block is handed to compute.

A streaming schedule (stream.py: ring, bidirectional ring) is traced as its first round, then
one ``fori_loop`` over the others: in each step every rank sends on what it holds while
computing on it, so XLA may run a round's ``ppermute`` and the computation beside it at the
same time, no step starts early, and no rank ever holds the gathered array (or its whole
contribution to a reduce-scatter).

- :func:`allgather_fold`: ``fn`` folded over every row block of the gathered array, as it
  arrives;
- :func:`reduce_scatter_from`: each rank's contribution to a reduce-scatter computed a piece
  at a time, in the round that sends it (the partial sum travels);
- :func:`allgather_matmul` and :func:`matmul_reduce_scatter`: collective matmul on both, each
  a JAX primitive whose transpose is the other (the dual stream) plus a fold for the weight's
  gradient, so ``grad`` keeps only this rank's blocks, not the gathered array.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad

from jaxcoll.lowering import _compat
from jaxcoll.lowering._checks import _describe, array_leaves, axis_size, check_choice
from jaxcoll.lowering.execute import after, in_sequence, token
from jaxcoll.lowering.primitives import define
from jaxcoll.lowering.stream import Stream, piece_bounds, stream, streaming_algorithms

# ----------------------------------------------------------------------------- checks

def _stream(fn: str, primitive: str, algorithm: str, axis) -> tuple[Stream | None, object]:
    """The stream ``algorithm`` runs over ``axis`` (None for ``xla``) and the axis' plan."""
    n = axis_size(fn, axis)
    check_choice(fn, "algorithm", algorithm, ("xla", *streaming_algorithms(primitive)))
    plan = _compat.axis_plan(axis)
    return (None if algorithm == "xla" else stream(primitive, algorithm, n)), plan


def _block_rows(fn: str, x) -> int:
    """The rows (leading dimension) every leaf of ``x`` shares."""
    leaves, _ = array_leaves(fn, x)
    shapes = [tuple(leaf.shape) for leaf in leaves]
    if not leaves or any(leaf.ndim == 0 for leaf in leaves):
        raise ValueError(f"jaxcoll.{fn}: x has leaves of shapes {shapes}; every leaf needs a "
                         "leading (row) dimension, the rows the fold passes on")
    rows = {shape[0] for shape in shapes}
    if len(rows) != 1:
        raise ValueError(f"jaxcoll.{fn}: x has leaves of shapes {shapes}; every leaf must "
                         "have the same leading (row) dimension")
    return rows.pop()


def _checked(contribution: Callable) -> Callable:
    """``contribution``, raising a ValueError if a leaf it returns lacks ``size`` rows."""
    def checked(start, size):
        out = contribution(start, size)
        leaves, _ = array_leaves("reduce_scatter_from", out)
        shapes = [tuple(leaf.shape) for leaf in leaves]
        if not leaves or any(len(shape) == 0 or shape[0] != size for shape in shapes):
            raise ValueError(f"jaxcoll.reduce_scatter_from: contribution(start, {size}) returned "
                             f"leaves of shapes {shapes}; every leaf must have {size} rows")
        return out
    return checked


# ----------------------------------------------------------------------------- the loops

def _rows(tree, start: int, size: int):
    """Rows ``start:start + size`` of every leaf."""
    return jax.tree.map(lambda a: a[start:start + size], tree)


def _varying(tree, plan):
    """``tree`` typed varying over the axis where check_vma types values (as ppermute's
    results are), so what it is combined with in the loop keeps one type."""
    if not (plan.in_mesh and _compat.check_vma()):
        return tree
    return jax.tree.map(lambda a: _compat.pvary(a, plan.axes), tree)


def _send_round(plan, pieces: list, hops, sizes) -> list:
    """One round: ``pieces[k]`` ppermuted along ``hops[k].perm`` (the schedule's rank numbers),
    one after another where the runtime needs it (``in_sequence``); a piece with no rows is not
    sent (None)."""
    live = [k for k, hop in enumerate(hops) if sizes[hop.piece]]

    def send(piece, perm):
        return jax.tree.map(lambda a: lax.ppermute(a, plan.permute_axes, perm=perm), piece)
    sent = in_sequence(send, [pieces[k] for k in live], [plan.pairs(hops[k].perm) for k in live])
    arrived = [None] * len(hops)
    for k, got in zip(live, sent):
        arrived[k] = got
    return arrived


def _start_tables(rows: int, stream_: Stream) -> list[jnp.ndarray]:
    """For each hop, the row offsets in the gathered array of the chunks it moves, (rounds,
    n_ranks): chunk c is piece c % pieces of rank c // pieces's block."""
    bounds = piece_bounds(rows, stream_.pieces)
    start = lambda c: c // stream_.pieces * rows + bounds[c % stream_.pieces][0]  # noqa: E731
    return [jnp.asarray(np.array([[start(c) for c in hops[k].chunk] for hops in stream_.rounds],
                                 np.int32))
            for k in range(len(stream_.rounds[0]))]


def _at(table, step, me):
    """``table[step, me]`` (``step`` may be traced)."""
    return lax.dynamic_index_in_dim(lax.dynamic_index_in_dim(table, step, 0, keepdims=False),
                                    me, 0, keepdims=False)


def _loop(first: int, last: int, body, carry):
    """``body`` over steps ``first..last - 1``: one ``fori_loop``, so a step's computation can
    overlap its transfer but never runs a step early (no more than a step's blocks are live)."""
    return carry if last <= first else lax.fori_loop(first, last, body, carry)


def fold_stream(x, fn: Callable, init, stream_: Stream, plan):
    """``fn`` folded over this rank's ``x``, then each piece of another rank's ``x`` as it
    arrives: ``acc = fn(acc, block, start)``, ``start`` its first row in the gathered array.
    Each round sends on what arrived in the last one while ``fn`` folds it."""
    me = lax.axis_index(plan.axes)
    rows = _block_rows("allgather_fold", x)
    x = _varying(x, plan)
    acc = fn(init, x, me * rows)
    if not stream_.rounds:
        return acc
    bounds = piece_bounds(rows, stream_.pieces)
    sizes, tables = [size for _, size in bounds], _start_tables(rows, stream_)
    own = [_rows(x, start, size) for start, size in bounds]

    def fold(acc, held, starts):
        for block, start in zip(held, starts):
            if block is not None:
                acc = fn(acc, block, start)
        return acc

    first, later = stream_.rounds[0], stream_.rounds[-1]
    held = _send_round(plan, [own[hop.piece] for hop in first], first, sizes)
    starts = [_at(table, 0, me) for table in tables]

    def step(s, carry):  # round s: send on what arrived in round s - 1 while folding it
        acc, held, starts = carry
        arrived = _send_round(plan, [held[hop.forwards] for hop in later], later, sizes)
        return fold(acc, held, starts), arrived, [_at(table, s, me) for table in tables]

    acc, held, starts = _loop(1, len(stream_.rounds), step, (acc, held, starts))
    return fold(acc, held, starts)


def scatter_stream(contribution: Callable, rows: int, stream_: Stream, plan):
    """The sum over ranks of rows ``[me * rows, (me + 1) * rows)`` of each rank's contribution,
    ``contribution(start, size)`` giving ``size`` rows from ``start``. Each round's pieces are
    computed while the previous round's partial sums travel."""
    me = lax.axis_index(plan.axes)
    if not stream_.rounds:
        return _varying(contribution(me * rows, rows), plan)
    bounds = piece_bounds(rows, stream_.pieces)
    sizes, tables = [size for _, size in bounds], _start_tables(rows, stream_)

    def to_send(s, hops, arrived):  # round s's partial sums: what arrives plus this rank's
        sums = []
        for hop, table in zip(hops, tables):
            if sizes[hop.piece] == 0:
                sums.append(None)
                continue
            mine = _varying(contribution(_at(table, s, me), sizes[hop.piece]), plan)
            sums.append(mine if hop.forwards is None
                        else jax.tree.map(jnp.add, arrived[hop.forwards], mine))
        return sums

    first, later = stream_.rounds[0], stream_.rounds[-1]

    def step(s, sums):  # send round s's sums while computing round s + 1's pieces
        return to_send(s + 1, later, _send_round(plan, sums, later, sizes))

    sums = _loop(0, len(stream_.rounds) - 1, step, to_send(0, first, None))
    arrived = _send_round(plan, sums, later, sizes)
    total = _varying(contribution(me * rows, rows), plan)
    parts = [_rows(total, start, 0) if size == 0 else arrived[final]
             for (start, size), final in zip(bounds, stream_.finals)]  # the pieces, in order
    received = jax.tree.map(lambda *p: jnp.concatenate(p), *parts)
    return jax.tree.map(jnp.add, received, total)


# ----------------------------------------------------------------------------- fold, from

def _all_gather(a, axis, n: int):
    """``lax.all_gather(a, axis)``, (n, *a.shape); lax refuses an empty ``a`` (XLA's
    all-gather takes no zero-sized dimension), which gathers to zeros."""
    if a.size == 0:
        return jnp.zeros((n, *a.shape), a.dtype)
    return lax.all_gather(a, axis)


def _psum_scatter(a, axis, n: int):
    """``lax.psum_scatter(a, axis, scatter_dimension=0, tiled=True)``, empty ``a`` included."""
    if a.size == 0:
        return jnp.zeros((a.shape[0] // n, *a.shape[1:]), a.dtype)
    return lax.psum_scatter(a, axis, scatter_dimension=0, tiled=True)


def allgather_fold(x, axis, fn: Callable, init, *, algorithm: str = "ring"):
    """``fn`` folded over the row blocks of ``lax.all_gather(x, axis, tiled=True)`` as they arrive.

    ``acc = fn(acc, block, start)`` for each block, without ever holding the gathered
    array. This rank's own ``x`` comes first (``start = axis_index * rows``), then each other
    rank's as the schedule delivers it: whole, in ``ring`` order (rank - 1, rank - 2, ...), or
    in two pieces, one each way round, for ``bidirectional_ring``. Every row is folded exactly
    once; ``fn`` must not depend on the order beyond that (a sum, a max, an online softmax,
    writing rows into place). Cost: the allgather's, (n-1)·(α + βN).

    Args:
      x: an array or a pytree of arrays whose leaves share their leading (row)
        dimension: this rank's block.
      axis: the axis name (or tuple of names) it runs over, bound by ``jax.shard_map``
        or ``jax.vmap(..., axis_name=...)``.
      fn: ``fn(acc, block, start)``, the next ``acc``: ``block`` has ``x``'s structure,
        ``start`` (a traced int32) is the block's first row in the gathered array.
      init: the first ``acc``, a pytree that ``fn`` returns the same
        structure of.
      algorithm: ``"ring"`` (default), ``"bidirectional_ring"`` or ``"xla"``: gather with
        ``lax.all_gather`` and fold the whole blocks in rank order (the reference).

    Returns:
      The last ``acc`` — ``fn`` folded over every row block of the gathered
      array.

    Raises:
      ValueError: if ``algorithm`` is not one of those three, or a leaf of ``x`` is 0-d or
        has other rows than the others.
      TypeError: if ``fn`` is not callable, or a leaf of ``x`` is not an array or a
        number.
      NameError: if ``axis`` is not bound here (a misspelt name, or a call outside
        ``jax.shard_map`` and ``jax.vmap``).
    """
    if not callable(fn):
        raise TypeError(f"jaxcoll.allgather_fold: fn={_describe(fn)} must be callable as "
                        "fn(acc, block, start)")
    stream_, plan = _stream("allgather_fold", "allgather", algorithm, axis)
    rows = _block_rows("allgather_fold", x)
    if stream_ is None:
        gathered = jax.tree.map(lambda a: _all_gather(a, axis, plan.n_ranks), x)
        acc = init
        for rank in range(plan.n_ranks):
            acc = fn(acc, jax.tree.map(lambda g: g[rank], gathered), jnp.int32(rank * rows))
        return acc
    return fold_stream(x, fn, init, stream_, plan)


def reduce_scatter_from(contribution: Callable, axis, rows: int, *, algorithm: str = "ring"):
    """This rank's ``rows`` rows of the sum over ranks of each rank's contribution.

    Each rank computes ``contribution(start, size)`` (``size`` rows from row ``start``) only
    for the piece a round sends, never the whole. As ``lax.psum_scatter(full, axis,
    scatter_dimension=0, tiled=True)`` where ``full`` is the rank's whole contribution,
    ``n * rows`` rows. The partial sum travels round the ring and each rank adds its piece
    as it passes (the reduce-scatter side of collective matmul).
    Cost: the reduce-scatter's, (n-1)·(α + βN + γN).

    Args:
      contribution: ``contribution(start, size)``: rows ``start`` .. ``start + size - 1``
        of this rank's contribution (an array or a pytree, each leaf with ``size`` rows);
        ``start`` is traced, ``size`` a Python int.
      axis: the axis name (or tuple of names) it runs over, bound by ``jax.shard_map``
        or ``jax.vmap(..., axis_name=...)``.
      rows: the rows of this rank's result, an int >= 0 (the whole contribution has
        ``n * rows``).
      algorithm: ``"ring"`` (default), ``"bidirectional_ring"`` or ``"xla"``: build
        ``full`` and call ``lax.psum_scatter`` (the reference).

    Returns:
      Rows ``axis_index * rows`` .. of the sum over ranks of their contributions, with the
      contribution's structure.

    Raises:
      ValueError: if ``rows`` is not an int >= 0, ``algorithm`` is not one of those three,
        or ``contribution`` returns a leaf without ``size`` rows.
      TypeError: if ``contribution`` is not callable, or returns a leaf that is not an
        array or a number.
      NameError: if ``axis`` is not bound here (a misspelt name, or a call outside
        ``jax.shard_map`` and ``jax.vmap``).
    """
    if not callable(contribution):
        raise TypeError("jaxcoll.reduce_scatter_from: contribution="
                        f"{_describe(contribution)} must be callable as contribution(start, size)")
    if not isinstance(rows, (int, np.integer)) or isinstance(rows, bool) or rows < 0:
        raise ValueError(f"jaxcoll.reduce_scatter_from: rows={rows!r} must be an int >= 0 "
                         "(the rows of this rank's result)")
    stream_, plan = _stream("reduce_scatter_from", "reduce_scatter", algorithm, axis)
    contribution = _checked(contribution)
    if stream_ is None:
        full = contribution(jnp.int32(0), plan.n_ranks * int(rows))
        return jax.tree.map(lambda a: _psum_scatter(a, axis, plan.n_ranks), full)
    return scatter_stream(contribution, int(rows), stream_, plan)


# ----------------------------------------------------------------------------- collective matmul

def _gathered_rows_matmul(x, w, *, algorithm: str, plan):
    """``all_gather(x, tiled=True) @ w``: each arriving block's product written into place."""
    n, rows = plan.n_ranks, x.shape[0]
    out = _varying(jnp.zeros((n * rows, w.shape[1]), x.dtype), plan)  # (n * rows, p)

    def put(acc, block, start):  # block: (size, k)
        return lax.dynamic_update_slice_in_dim(acc, block @ w, start, axis=0)
    return fold_stream(x, put, out, stream("allgather", algorithm, n), plan)


def _scattered_matmul(x, w, *, algorithm: str, plan):
    """``psum_scatter(x @ w, tiled=True)``: each piece of ``x @ w`` computed as it is sent."""
    n = plan.n_ranks
    rows = x.shape[0] // n

    def contribution(start, size):  # (size, p)
        return lax.dynamic_slice_in_dim(x, start, size, axis=0) @ w
    return scatter_stream(contribution, rows, stream("reduce_scatter", algorithm, n), plan)


def _gathered_outer_program(stream_operand, local, *, stream_first: bool, algorithm: str,
                            plan):
    """The weight's cotangent: the sum over the gathered array's row blocks of
    ``block.T @ local_rows`` (``stream_first``) or ``local_rows.T @ block``, ``block``
    folded as it arrives and ``local_rows`` the same rows of this rank's ``local``."""
    n = plan.n_ranks

    def add(acc, block, start):
        rows = lax.dynamic_slice_in_dim(local, start, block.shape[0], axis=0)
        return acc + (block.T @ rows if stream_first else rows.T @ block)
    shape = ((stream_operand.shape[1], local.shape[1]) if stream_first
             else (local.shape[1], stream_operand.shape[1]))
    init = _varying(jnp.zeros(shape, local.dtype), plan)
    return fold_stream(stream_operand, add, init, stream("allgather", algorithm, n), plan)


# Three primitives, each bilinear in its two operands (x, w): their jvps, transposes and
# batching bind one another, never paste their programs into the trace.
_PROGRAMS = {"allgather_matmul": _gathered_rows_matmul,
             "matmul_reduce_scatter": _scattered_matmul,
             "gathered_outer": _gathered_outer_program}


def _bind(name: str, x, w, *, algorithm: str, plan, vmapped: tuple = (), **extra):
    """One collective matmul, its operands first typed alike (varying over the axis and over
    whatever either one varies over, as the ppermutes make the result). ``vmapped``: the vmap
    layers the operands' leading dimensions stand for (their axis names, None if unnamed)."""
    if plan.in_mesh and _compat.check_vma():
        names = tuple(sorted(_compat.varying_axes(jax.typeof(x))
                             | _compat.varying_axes(jax.typeof(w)) | set(plan.axes)))
        x, w = _compat.pvary(x, names), _compat.pvary(w, names)
    return _MATMULS[name].bind(x, w, algorithm=algorithm, plan=plan, vmapped=vmapped, **extra)


def _gathered_outer(stream_operand, local, *, stream_first: bool, **params):
    return _bind("gathered_outer", stream_operand, local, stream_first=stream_first, **params)


def _abstract_eval(name, x, w, *, algorithm: str, plan, vmapped: tuple, **extra):
    lead, x_shape, w_shape = x.shape[:len(vmapped)], x.shape[len(vmapped):], w.shape[len(vmapped):]
    n = plan.n_ranks
    if name == "allgather_matmul":  # (rows, k) @ (k, p) -> (n * rows, p)
        shape = (x_shape[0] * n, w_shape[1])
    elif name == "matmul_reduce_scatter":  # (n * rows, k) @ (k, p) -> (rows, p)
        shape = (x_shape[0] // n, w_shape[1])
    else:  # gathered_outer: (k, p) or (k', p') of the two operands' columns
        shape = (x_shape[1], w_shape[1]) if extra["stream_first"] else (w_shape[1], x_shape[1])
    return x.update(shape=(*lead, *shape))


def _vmapped_program(name, *, vmapped: tuple, **params):
    """The program of one primitive, under one jax.vmap per vmap layer (outermost first)."""
    program = partial(_PROGRAMS[name], **params)
    for axis_name in reversed(vmapped):
        program = jax.vmap(program, axis_name=axis_name)
    return program


def _jvp(name, primals, tangents, **params):
    """Bilinear, as a matmul: d(x w) = dx w + x dw, each term the same collective matmul."""
    (x, w), (dx, dw) = primals, tangents
    y = _bind(name, x, w, **params)
    terms = []
    serial = _compat.serialize_collectives()  # the loops one after the other, the primal's first
    if type(dx) is not ad.Zero:
        terms.append(_bind(name, after(dx, token(y)) if serial else dx, w, **params))
    if type(dw) is not ad.Zero:
        if serial:
            dw = after(dw, token(terms[-1] if terms else y))
        terms.append(_bind(name, x, dw, **params))
    if not terms:
        return y, _compat.zero_tangent(y)
    return y, terms[0] if len(terms) == 1 else terms[0] + terms[1]


def _swap(a):
    """The transpose of each matrix (the last two dimensions; leading ones are vmap's)."""
    return jnp.swapaxes(a, -1, -2)


def _transpose(name, ct, x, w, *, algorithm: str, plan, vmapped: tuple, **extra):
    """Each primitive's transpose in either operand is one of the three (a gather's transpose
    is a reduce-scatter and back; the weight's is a fold over the streamed operand)."""
    if type(ct) is ad.Zero:
        return (None if not ad.is_undefined_primal(x) else ad.Zero(x.aval.to_tangent_aval()),
                None if not ad.is_undefined_primal(w) else ad.Zero(w.aval.to_tangent_aval()))
    params = dict(algorithm=algorithm, plan=plan, vmapped=vmapped)
    gather = partial(_bind, "allgather_matmul", **params)
    scatter = partial(_bind, "matmul_reduce_scatter", **params)
    outer = partial(_gathered_outer, **params)
    x_unknown = ad.is_undefined_primal(x)
    if name == "allgather_matmul":  # y = gather(x) @ w
        return (scatter(ct, _swap(w)), None) if x_unknown else (
            None, outer(x, ct, stream_first=True))
    if name == "matmul_reduce_scatter":  # y = scatter(x @ w)
        return (gather(ct, _swap(w)), None) if x_unknown else (
            None, outer(ct, x, stream_first=False))
    if extra["stream_first"]:  # y = gather(x).T @ w
        return (scatter(w, _swap(ct)), None) if x_unknown else (None, gather(x, ct))
    # y = w.T @ gather(x)
    return (scatter(w, ct), None) if x_unknown else (None, gather(x, _swap(ct)))


def _batch(name, axis_data, vals, dims, *, vmapped: tuple, **params):
    """A vmap adds a layer to ``vmapped``: its dimension leads both operands, and the program
    is lowered under that vmap (a vmap over the collective's own axis runs it on vmap's
    ranks). The same primitive is bound: transformations outside still meet these rules."""
    x, w = (jnp.broadcast_to(v, (axis_data.size, *v.shape)) if d is None else
            jnp.moveaxis(v, d, 0) for v, d in zip(vals, dims))
    axis_name = axis_data.name if axis_data.name in params["plan"].axes else None
    return _bind(name, x, w, vmapped=(axis_name, *vmapped), **params), 0


_MATMULS = {name: define(name, abstract_eval=partial(_abstract_eval, name),
                        program_of=lambda params, name=name: _vmapped_program(name, **params),
                        batch=partial(_batch, name), jvp=partial(_jvp, name),
                        transpose=partial(_transpose, name),
                        standalone=lambda params: any(a is not None for a in params["vmapped"]))
            for name in _PROGRAMS}


def _matmul_operands(fn: str, x, w):
    """``x`` and ``w`` as 2-D arrays of one dtype (jnp.matmul's promotion), checked."""
    for arg, value in (("x", x), ("w", w)):
        leaves, _ = array_leaves(fn, value)
        if len(leaves) != 1 or leaves[0].ndim != 2:
            what = (f"shape {tuple(leaves[0].shape)}" if len(leaves) == 1
                    else f"{len(leaves)} leaves")
            raise ValueError(f"jaxcoll.{fn}: {arg} has {what}; x and w must each be one 2-D "
                             "array, x (rows, k) and w (k, p)")
    x, w = jnp.asarray(x), jnp.asarray(w)
    if x.shape[1] != w.shape[0]:
        raise ValueError(f"jaxcoll.{fn}: w has shape {tuple(w.shape)} but x has {x.shape[1]} "
                         "columns; x (rows, k) and w (k, p) must share k")
    dtype = jnp.result_type(x, w)
    if dtype == jnp.bool_:
        raise TypeError(f"jaxcoll.{fn}: x has dtype bool (and w too); cast them to a number "
                        "dtype first")
    return x.astype(dtype), w.astype(dtype)


def allgather_matmul(x, w, axis, *, algorithm: str = "ring"):
    """``lax.all_gather(x, axis, tiled=True) @ w``, each rank's rows multiplied as they arrive.

    Its gradient for ``x`` is a :func:`matmul_reduce_scatter`, for ``w`` a fold over ``x``
    passed round again: neither keeps the gathered ``x``. Cost: the allgather's,
    (n-1)·(α + βN), hidden behind n matmuls.

    Args:
      x: this rank's rows, a 2-D array ``(rows, k)`` (``x`` and ``w`` are promoted to one
        dtype, as by ``jnp.matmul``).
      w: a 2-D array ``(k, p)``, the same on every rank or not: each rank multiplies
        by its own.
      axis: the axis name (or tuple of names) it runs over, bound by ``jax.shard_map``
        or ``jax.vmap(..., axis_name=...)``.
      algorithm: ``"ring"`` (default), ``"bidirectional_ring"`` (half of each block each
        way round) or ``"xla"`` (the unfused reference).

    Returns:
      The ``(n * rows, p)`` product, rank i's rows at ``i * rows``.

    Raises:
      ValueError: if ``x`` or ``w`` is not one 2-D array, they do not share ``k``, or
        ``algorithm`` is not one of those three.
      TypeError: if ``x`` and ``w`` are bools, or not
        arrays.
      NameError: if ``axis`` is not bound here (a misspelt name, or a call outside
        ``jax.shard_map`` and ``jax.vmap``).
    """
    x, w = _matmul_operands("allgather_matmul", x, w)
    _, plan = _stream("allgather_matmul", "allgather", algorithm, axis)
    if algorithm == "xla":
        gathered = _all_gather(x, axis, plan.n_ranks)  # (n, rows, k)
        return gathered.reshape(-1, x.shape[1]) @ w  # (n * rows, k) @ (k, p)
    return _bind("allgather_matmul", x, w, algorithm=algorithm, plan=plan)


def matmul_reduce_scatter(x, w, axis, *, algorithm: str = "ring"):
    """``lax.psum_scatter(x @ w, axis, scatter_dimension=0, tiled=True)``, computed as it is sent.

    Each block of ``x @ w`` is computed in the round that sends it. Its gradient for ``x``
    is an :func:`allgather_matmul`, for ``w`` a fold over the cotangent passed round.
    Cost: the reduce-scatter's, (n-1)·(α + βN + γN), hidden behind n matmuls.

    Args:
      x: this rank's ``(n * rows, k)``, a 2-D array (``x`` and ``w`` are promoted to one
        dtype, as by ``jnp.matmul``).
      w: a 2-D array ``(k, p)``: each rank multiplies by its
        own.
      axis: the axis name (or tuple of names) it runs over, bound by ``jax.shard_map``
        or ``jax.vmap(..., axis_name=...)``.
      algorithm: ``"ring"`` (default), ``"bidirectional_ring"`` or ``"xla"`` (the
        unfused reference).

    Returns:
      This rank's ``(rows, p)`` block — rows ``axis_index * rows`` .. of the sum over ranks
      of ``x @ w``.

    Raises:
      ValueError: if ``x`` or ``w`` is not one 2-D array, they do not share ``k``, the
        ranks do not divide ``x``'s rows, or ``algorithm`` is not one of those three.
      TypeError: if ``x`` and ``w`` are bools, or not
        arrays.
      NameError: if ``axis`` is not bound here (a misspelt name, or a call outside
        ``jax.shard_map`` and ``jax.vmap``).
    """
    x, w = _matmul_operands("matmul_reduce_scatter", x, w)
    _, plan = _stream("matmul_reduce_scatter", "reduce_scatter", algorithm, axis)
    if x.shape[0] % plan.n_ranks:
        raise ValueError(f"jaxcoll.matmul_reduce_scatter: x has {x.shape[0]} rows, which "
                         f"{plan.n_ranks} ranks along axis {axis!r} do not divide "
                         "(as lax.psum_scatter(tiled=True) needs)")
    if algorithm == "xla":
        return _psum_scatter(x @ w, axis, plan.n_ranks)
    return _bind("matmul_reduce_scatter", x, w, algorithm=algorithm, plan=plan)
