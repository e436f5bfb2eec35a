"""Each collective as a JAX primitive, as ``lax.psum`` is one: typed, lowered, differentiated
and batched by rules of its own.

A primitive takes the packed ``(rows, width)`` buffer of one bucket (records.py says how many
rows in and out), or one leaf as it is with its ``layout.Layout`` (packed inside the
lowering: one equation per call), and carries its schedule as a parameter:

- **abstract evaluation** types the result as the lax built-in's: allreduce invariant over the
  axis under ``check_vma`` (``out_specs=P()`` works), the others varying;
- **lowering** is the schedule's ppermute program (execute.py), traced once per compile;
- **transpose** is one collective: the dual schedule (symbolic.dual, proven by ``verify``):
  reduce_scatter's is an allgather, broadcast's a reduce, allreduce's and alltoall's their own.
  Under ``check_vma`` an invariant allreduce result transposes like psum's: a cast to varying,
  no communication;
- **jvp**: linear for sums; for max/min the tangent of the rank(s) holding the extreme, shared
  evenly between ties (as ``jnp.max``'s derivative);
- **batching**: a vmapped dimension rides along in the width; a ``vmap(axis_name=...)`` over
  the collective's own axis binds the same primitive *stacked* (``AxisPlan.stacked``: the
  ranks are the operand's leading dimension, and its lowering runs the schedule under vmap),
  so every transformation applied outside the vmap still meets these rules, never the
  executor's bit-moving operations. A result that is the same on every rank (allreduce,
  allgather, broadcast) comes back unmapped, like psum's and all_gather's (``out_axes=None``
  works).

Every rule binds a jaxcoll primitive; none pastes the ppermute program into the trace.
"""

from __future__ import annotations

from dataclasses import fields, replace
from functools import partial
from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.sharding import PartitionSpec as P

from jaxcoll.analysis.compression import Compress
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Schedule
from jaxcoll.ir.symbolic import dual
from jaxcoll.lowering import _compat
from jaxcoll.lowering.execute import after, execute, token
from jaxcoll.lowering.layout import Layout, enter, leave
from jaxcoll.lowering.pallas_kernel import as_executor, effects

_COMBINE = {"sum": lax.add, "max": lax.max, "min": lax.min}


def collective(schedule: Schedule, buf, axis, op: str = "sum", compress: Compress | None = None,
               feedback: bool = False, groups=None, to: str = "varying",
               layout: Layout | None = None, executor="xla"):
    """Run ``schedule`` (labelled with its primitive) on this rank's ``(rows, width)`` buffer
    over ``axis``, as one primitive; the result has the primitive's ``rows_out`` rows. With
    ``layout`` (layout.Layout), ``buf`` is one leaf as it is, packed inside the lowering: the
    result is the result leaf, and the call one equation of the jaxpr.
    ``compress``: transfers carry encoded chunks of the float32 buffer (compression.py);
    ``feedback`` (allreduce): also return what encoding dropped at this rank, as ``buf``;
    ``groups``: checked ``axis_index_groups``, the schedule run in each (typed varying: a
    group's result is not the whole axis'); ``to``: an allgather typed "invarying" (as an
    allreduce always is) or "reduced", as ``lax.all_gather(..., to=...)``. An input typed
    unreduced over the axis (partial sums) is summed by a sum's allreduce or reduce_scatter,
    as lax's psum and psum_scatter do. ``executor``: ``"xla"``, ``"pallas"`` or a
    ``Pallas(interpret=...)`` (pallas_kernel.py): how the schedule's plan runs."""
    plan = _compat.axis_plan(axis, groups)
    record, aval = RECORDS[schedule.collective], jax.typeof(buf)
    partials = bool(_compat.unreduced_only(aval) & set(plan.axes))
    if partials and not set(plan.axes) <= _compat.unreduced_only(aval):
        unreduced = sorted(_compat.unreduced_only(aval) & set(plan.axes))
        others = sorted(set(plan.axes) - _compat.unreduced_only(aval))
        raise ValueError(f"jaxcoll.{schedule.collective}: x is typed unreduced over {unreduced} "
                         f"but not over {others} of axis={axis!r}; as lax's, one collective "
                         "takes an axis in one state: sum the unreduced axes and the others in "
                         "two calls")
    sums = record.reduces and not record.rooted and op == "sum" and compress is None
    stuck = (_compat.unreduced_axes(aval) & set(plan.axes)) if not (partials and sums) else ()
    if stuck or (partials and (groups or feedback or layout is None and not sums)):
        raise ValueError(f"jaxcoll.{schedule.collective}: x is typed unreduced or reduced over "
                         f"{sorted(stuck or plan.axes)}; jaxcoll takes varying or invariant "
                         "values, and unreduced ones (partial sums) in a sum's allreduce or "
                         "reduce_scatter, as lax: reduce it first (lax.psum) or cast it "
                         "(lax.pcast)")
    typed = _compat.check_vma() and plan.in_mesh
    if typed and not partials:  # as lax's collectives do: an invariant input is cast to varying
        buf = _compat.pvary(buf, plan.axes)
    invariant = typed and not groups and (record.invariant or to == "invarying")
    reduced = typed and to == "reduced"
    if feedback:
        return tuple(FEEDBACK.bind(buf, schedule=_as_parameter(schedule), plan=plan, op=op,
                                   invariant=invariant, compress=compress))
    return _bind(buf, schedule=schedule, plan=plan, op=op, invariant=invariant,
                 compress=compress, layout=layout, partials=partials, reduced=reduced,
                 executor=as_executor(executor))


class _ScheduleParameter(Schedule):
    """A schedule as a primitive's parameter: printed in jaxprs by its one-line repr."""

    __str__ = Schedule.__repr__


def _as_parameter(schedule: Schedule) -> Schedule:
    if type(schedule) is _ScheduleParameter:
        return schedule
    shown = _ScheduleParameter(**{f.name: getattr(schedule, f.name) for f in fields(Schedule)})
    object.__setattr__(shown, "_hash", hash(schedule))  # the same value, computed once
    return shown


def _bind(buf, *, schedule: Schedule, plan, op: str, invariant: bool,
          compress: Compress | None = None, layout: Layout | None = None,
          partials: bool = False, reduced: bool = False, executor="xla"):
    """``partials``: ``buf`` is typed unreduced over the axis (each rank's partial sum, as
    lax's unreduced_psum reads it); ``reduced``: the result is typed reduced over it
    (``lax.all_gather(..., to="reduced")``)."""
    return PRIMITIVES[schedule.collective].bind(buf, schedule=_as_parameter(schedule), plan=plan, op=op,
                                               invariant=invariant, compress=compress,
                                               layout=layout, partials=partials,
                                               reduced=reduced, executor=executor)


# ----------------------------------------------------------------------------- the program

def program(x, *, schedule: Schedule, plan, op: str, invariant: bool = False,
            compress: Compress | None = None, layout: Layout | None = None,
            feedback: bool = False, partials: bool = False, reduced: bool = False,
            executor="xla"):
    """The ppermute program of one primitive on this rank's operand.

    Args:
      x: a (rows_in, width) buffer or, with ``layout``, one leaf as it is (packed into rows
        here, and its result unpacked).
      schedule, plan, op, invariant, compress, layout, partials, reduced, executor: the
        primitive's parameters (``invariant``, ``partials`` and ``reduced`` only type it).
      feedback: an allreduce with error feedback's program.

    Returns:
      The primitive's result on this rank: the (rows_out, width) buffer or the result leaf;
      with ``feedback``, the result and what encoding dropped at this rank.
    """
    del invariant, partials, reduced  # typing only
    buf = x if layout is None else layout.to_rows(x)
    record, me = RECORDS[schedule.collective], plan.index()
    run = partial(execute, schedule, axis=plan.axes, combine=_COMBINE[op], plan=plan,
                  compress=compress, settle=record.replicated, feedback=feedback,
                  executor=executor)
    if feedback:
        return run(buf)
    out = leave(record, run(enter(record, buf, me, schedule.n_ranks)), me, schedule.n_ranks,
                schedule.root)
    return out if layout is None else layout.from_rows(out, x.shape)


# ----------------------------------------------------------------------------- the rules

def _abstract_eval(x, *, schedule: Schedule, plan, op: str, invariant: bool, compress=None,
                   layout: Layout | None = None, partials: bool = False,
                   reduced: bool = False, executor="xla"):
    record, n = RECORDS[schedule.collective], schedule.n_ranks
    rows = record.rows("rows_out", n)
    # stacked: (ranks, rows, width), one buffer per rank of the axis (of every group)
    ranks = (plan.axis_ranks,) if plan.stacked else ()
    if layout is not None:  # one leaf, as it is
        out = x.update(shape=(*ranks, *layout.out_shape(x.shape[len(ranks):])))
    elif x.shape[:-1] != (*ranks, record.rows("rows_in", n)):
        raise ValueError(f"jaxcoll_{record.name}: expects a ({'ranks, ' * plan.stacked}"
                         f"{record.rows_in}, width) buffer for n = {n}, got {x.shape}")
    else:
        out = x.update(shape=(*ranks, rows, x.shape[-1]))
    axes = set(plan.axes)
    if partials:  # the partial sums are summed: no longer unreduced (varying if scattered)
        out = _compat.typed(out, unreduced=_compat.unreduced_only(x) - axes,
                            varying=_compat.varying_axes(x) | (set() if invariant else axes))
    if invariant or reduced:  # psum's, all_gather_invariant's; all_gather_reduced's
        out = _compat.with_varying(out, _compat.varying_axes(x) - axes)
    if reduced:
        out = _compat.typed(out, reduced=_compat.reduced_only(x) | axes)
    return out


def _per_rank_program(params: dict, feedback: bool = False) -> Callable:
    """The function that lowers a primitive: :func:`program` on one rank, or (stacked) on
    every rank under vmap."""
    plan = params["plan"]
    one_rank = partial(program, **dict(params, plan=replace(plan, stacked=False)),
                       feedback=feedback)
    return jax.vmap(one_rank, axis_name=plan.axes[0]) if plan.stacked else one_rank


def _jvp(primals, tangents, *, schedule: Schedule, plan, op: str, invariant: bool,
         compress=None, layout: Layout | None = None, partials: bool = False,
         reduced: bool = False, executor="xla"):
    (x,), (t,) = primals, tangents
    params = dict(schedule=schedule, plan=plan, invariant=invariant, layout=layout,
                  partials=partials, reduced=reduced, executor=executor)
    y = _bind(x, op=op, compress=compress, **params)  # the tangent: uncompressed, below
    if type(t) is ad.Zero:
        return y, _compat.zero_tangent(y)
    t = ad.instantiate_zeros(t)
    if op == "sum":
        return y, _bind(_ordered(t, y), op="sum", **params)
    # max/min: the extreme's tangent, shared evenly between the ranks that hold it. The primal
    # side's collectives follow one another by their data; the tangent's comes last.
    spread = y if RECORDS[schedule.collective].invariant else _transpose_bind(y, **params)
    at_extreme = (x == spread).astype(t.dtype)  # spread: the result in the input's layout
    count = _bind(at_extreme, op="sum", **params)
    total = _bind(_ordered(t * at_extreme, count), op="sum", **params)
    return y, jnp.where(count > 0, total / jnp.where(count > 0, count, 1), 0).astype(t.dtype)


def _ordered(value, previous):
    """``value``, made to wait for ``previous`` where jaxlib runs independent collectives of a
    program into each other (``in_sequence`` does the same for buckets). A value typed
    unreduced (a partial sum's tangent) cannot pass the barrier's typing: left unordered."""
    if not _compat.serialize_collectives() or _compat.unreduced_axes(jax.typeof(value)):
        return value
    return after(value, token(previous))


def _transpose_bind(ct, *, schedule: Schedule, plan, invariant: bool,
                    layout: Layout | None = None, partials: bool = False,
                    reduced: bool = False, executor="xla"):
    """The transposed primitive applied to ``ct``: one collective on the dual schedule (and
    the dual layout: a scatter's blocks are a gather's). A reduce-scatter of partial sums
    transposes to an allgather typed reduced, and back (lax's unreduced_psum_scatter and
    all_gather_reduced)."""
    return _bind(ct, schedule=dual(schedule), plan=plan, op="sum", invariant=invariant,
                 layout=None if layout is None else layout.dual(), partials=reduced,
                 reduced=partials, executor=executor)


def _transpose(ct, x, *, schedule: Schedule, plan, op: str, invariant: bool, compress=None,
               layout: Layout | None = None, partials: bool = False, reduced: bool = False,
               executor="xla"):
    if op != "sum" or compress is not None:
        raise NotImplementedError(f"jaxcoll_{schedule.collective} with op={op!r}, "
                                  f"compress={compress!r} is not linear")
    if type(ct) is ad.Zero:
        return (ad.Zero(x.aval.to_tangent_aval()),)
    if invariant and partials:  # unreduced_psum's transpose: a cast to reduced, no traffic
        return (lax.pcast(ct, tuple(plan.permute_axes), to="reduced"),)
    if invariant:  # psum's and all_gather_invariant's transposes: this rank's part, no traffic
        ct = _compat.pvary(ct, plan.axes)
        record = RECORDS[schedule.collective]
        if record.rows_in == record.rows_out:
            return (ct,)
        rows = ct if layout is None else layout.dual().to_rows(ct)  # (n, w)
        mine = lax.dynamic_slice_in_dim(rows, plan.index(), 1, axis=0)  # (1, w)
        return (mine if layout is None else layout.dual().from_rows(mine, ct.shape),)
    return (_transpose_bind(ct, schedule=schedule, plan=plan, invariant=invariant,
                            layout=layout, partials=partials, reduced=reduced,
                            executor=executor),)


def _batch(axis_data, vals, dims, *, schedule: Schedule, plan, op: str, invariant: bool,
           compress=None, layout: Layout | None = None, partials: bool = False,
           reduced: bool = False, executor="xla"):
    (x,), (d,) = vals, dims
    params = dict(schedule=schedule, plan=plan, op=op, invariant=invariant, compress=compress,
                  partials=partials, reduced=reduced, executor=executor)
    if layout is not None:  # a batched leaf: packed into rows here, batched as rows below
        return _batch_leaf(axis_data, x, d, layout, params)
    if axis_data.name in plan.axes:  # vmap(axis_name=...) over the collective's own axis
        if plan.stacked:
            raise ValueError(f"jaxcoll_{schedule.collective}: axis {axis_data.name!r} is "
                             "vmapped twice")
        if d is None:
            x, d = jnp.broadcast_to(x, (axis_data.size, *x.shape)), 0
        stacked = dict(params, plan=replace(plan, stacked=True), invariant=False)
        out = _bind(jnp.moveaxis(x, d, 0), **stacked)  # (ranks, rows_out, width)
        # the same bits on every rank, as lax's: unmapped (with groups, within a group only)
        if RECORDS[schedule.collective].replicated and not plan.groups:
            return out[0], None
        return out, 0
    if d is None:
        return _bind(x, **params), None
    ranks = 1 if plan.stacked else 0  # a stacked buffer is (n, rows, width)

    def folded(x):  # the batch rides along in the width: one collective
        moved = jnp.moveaxis(x, d, ranks + 1)  # ([n,] rows, batch, width)
        *lead, batch, width = moved.shape
        out = _bind(moved.reshape(*lead, batch * width), **params)
        return out.reshape(*out.shape[:-1], batch, width)  # ([n,] rows_out, batch, width)

    # a batch sharded over Explicit mesh axes is folded on each device's local shards
    def result_spec(specs):  # ([n,] rows_out, batch, width): ranks and rows whole
        *_, width = (entry for i, entry in enumerate(specs[0]) if i != d)
        return P(*[None] * (ranks + 1), specs[0][d], width)

    local = _compat.on_local_shards(folded, x, result_spec)
    return (folded(x) if local is None else local), ranks + 1


def _batch_leaf(axis_data, x, d, layout: Layout, params: dict):
    """The batching rule for one leaf: each batch element (and each stacked rank) packed into
    rows as the lowering would, the rows batched by :func:`_batch`, the result unpacked."""
    lead = 1 if params["plan"].stacked else 0  # a stacked leaf: (n, *leaf)

    def per_element(fn, value, axis):  # fn on every batch element and stacked rank
        for _ in range(lead):
            fn = jax.vmap(fn)
        return fn(value) if axis is None else jax.vmap(fn, in_axes=axis)(value)
    shape = (x.shape if d is None else x.shape[:d] + x.shape[d + 1:])[lead:]
    rows = per_element(layout.to_rows, x, d)  # ([batch,] [n,] rows, width)
    out, out_d = _batch(axis_data, (rows,), (None if d is None else 0,), **params)
    return per_element(lambda r: layout.from_rows(r, shape), out, out_d), (
        None if out_d is None else 0)


def define(name: str, *, abstract_eval: Callable, program_of: Callable, batch: Callable,
           jvp: Callable | None = None, transpose: Callable | None = None,
           multiple_results: bool = False,
           standalone: Callable[[dict], bool] = lambda params: False) -> Primitive:
    """One scaffold for every jaxcoll primitive (the collectives, the error-feedback allreduce,
    the collective matmuls): registered as ``jaxcoll_<name>``, lowered by tracing
    ``program_of(params)`` (its ppermute program), with its own jvp, transpose and batching
    rules. Outside any trace it runs compiled where ``standalone(params)`` (every rank's data
    at hand: a vmap over its own axis), and is refused otherwise, as lax's collectives are."""
    p = Primitive(f"jaxcoll_{name}")
    p.multiple_results = multiple_results
    _compat.takes_high_values(p)  # a partial sum's unreduced type, on jax >= 0.12.1

    def impl(*args, **params):
        if standalone(params):
            return jax.jit(partial(p.bind, **params))(*args)
        raise NameError(f"{p.name} must be called inside jax.shard_map or jax.vmap with its "
                        "axis")

    def lowering(ctx, *args, **params):
        if any(_compat.unreduced_axes(a) for a in ctx.avals_in):
            # the program moves values, whatever lax's types say of them: a partial sum
            # (unreduced over an axis) is read as varying over it, reduced axes are left out
            ctx = replace(ctx, avals_in=[_compat.typed(
                a, unreduced=(), reduced=(),
                varying=_compat.varying_axes(a) | _compat.unreduced_only(a))
                for a in ctx.avals_in])
        return mlir.lower_fun(program_of(params), multiple_results=multiple_results)(ctx, *args)

    p.def_impl(impl)
    p.def_effectful_abstract_eval(lambda *args, **params: (
        abstract_eval(*args, **params), effects(params.get("executor"))))
    mlir.register_lowering(p, lowering)
    if jvp is not None:
        ad.primitive_jvps[p] = jvp
    if transpose is not None:
        ad.primitive_transposes[p] = transpose
    batching.fancy_primitive_batchers[p] = batch
    return p


def _stacked(params: dict) -> bool:
    return params["plan"].stacked


PRIMITIVES: dict[str, Primitive] = {name: define(
    name, abstract_eval=_abstract_eval, program_of=_per_rank_program, batch=_batch, jvp=_jvp,
    transpose=_transpose, standalone=_stacked) for name in RECORDS}


# ----------------------------------------------------------------------------- error feedback

def _feedback_abstract_eval(x, *, schedule: Schedule, plan, op: str, invariant: bool,
                            compress, partials: bool = False, reduced: bool = False):
    """(the allreduce's result, typed as allreduce's; the residual, typed as ``x``)."""
    return _abstract_eval(x, schedule=schedule, plan=plan, op=op, invariant=invariant), x


def _feedback_jvp(primals, tangents, **params):
    raise NotImplementedError("jaxcoll: an allreduce with error feedback is not differentiable "
                              "(it is meant for gradients that are already computed)")


def _feedback_batch(axis_data, vals, dims, **params):
    (x,), (d,) = vals, dims
    if d is None or axis_data.name in params["plan"].axes:
        raise NotImplementedError("jaxcoll: an allreduce with error feedback under vmap")
    moved = jnp.moveaxis(x, d, 1)  # (rows, batch, width): the batch rides in the width
    rows, batch, width = moved.shape
    out, residual = FEEDBACK.bind(moved.reshape(rows, batch * width), **params)
    return (out.reshape(out.shape[0], batch, width), residual.reshape(rows, batch, width)), (1, 1)


FEEDBACK = define("allreduce_with_feedback", abstract_eval=_feedback_abstract_eval,
                  program_of=partial(_per_rank_program, feedback=True), batch=_feedback_batch,
                  jvp=_feedback_jvp, multiple_results=True)
