"""Every place jaxcoll depends on a JAX detail that differs between the versions it supports
(jax 0.10.2 on Python 3.11, the newest on 3.12) or that JAX does not export publicly.

Nothing else in jaxcoll reads ``jax._src``, an aval's internals or a jaxlib version. (The
primitives in primitives.py use JAX's extension interfaces, ``jax.extend.core`` and
``jax.interpreters``, the same on every version we support.)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata

import jax
import numpy as np
from jax import lax
from jax._src import config as _config  # check_vma's state while tracing
from jax._src import core as _core  # the axis names bound (error messages)
from jax._src import dispatch as _dispatch  # effects' tokens: no public way to drop a failed one
from jax._src import distributed as _distributed  # the client has no public barrier
from jax._src import effects as _effects  # which effects are ordered
from jax._src.lax import lax as _lax_internal  # weak types: no public way to set one
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as _interpreter
from jax._src.pallas.mosaic.interpret import params as _interpret_params
from jax.interpreters import ad
from jax.sharding import PartitionSpec as P


@lru_cache(maxsize=None)
def _jaxlib_version() -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in metadata.version("jaxlib").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):  # a source build: assume it is new
        return (99,)


def serialize_collectives() -> bool:
    """True where independent collectives of one program must not run at the same time.

    jaxlib < 0.11 gives every collective the same channel id and its CPU runtime runs
    independent ones concurrently under the same rendezvous key, which aborts the process.
    """
    return _jaxlib_version() < (0, 11) and jax.default_backend() == "cpu"


def check_vma() -> bool:
    """True while tracing the body of a ``shard_map(..., check_vma=True)``: values are typed
    varying or invariant over each mesh axis, as ``lax.psum`` reads them."""
    return bool(_config._check_vma.value)


def _manual_type(aval):
    """The aval's varying/unreduced/reduced record (``aval.mat`` in jax 0.10 and 0.12)."""
    return getattr(aval, "mat", None)


def varying_axes(aval) -> frozenset:
    """The mesh axes ``aval`` is typed varying over (empty outside check_vma)."""
    mat = _manual_type(aval)
    return frozenset(getattr(mat, "varying", ()) or ())


def unreduced_axes(aval) -> frozenset:
    """The mesh axes ``aval`` is typed unreduced or reduced over."""
    return unreduced_only(aval) | reduced_only(aval)


def unreduced_only(aval) -> frozenset:
    """The mesh axes ``aval`` is typed unreduced over (partial sums, to be summed)."""
    return frozenset(getattr(_manual_type(aval), "unreduced", ()) or ())


def reduced_only(aval) -> frozenset:
    """The mesh axes ``aval`` is typed reduced over."""
    return frozenset(getattr(_manual_type(aval), "reduced", ()) or ())


def typed(aval, **axes):
    """``aval`` with its varying/unreduced/reduced axes replaced by those given."""
    mat = _manual_type(aval)
    if mat is None:
        return aval
    update = {kind: frozenset(names) for kind, names in axes.items()}
    if "unreduced" in update and not update["unreduced"] and hasattr(mat, "unreduced_kind"):
        update["unreduced_kind"] = None  # jax 0.12: no kind without unreduced axes
    return aval.update(manual_axis_type=mat.update(**update))


def with_varying(aval, varying: frozenset):
    """``aval`` typed varying over exactly ``varying``."""
    return typed(aval, varying=varying)


def takes_high_values(primitive) -> None:
    """Let ``primitive`` take values typed unreduced inside ``shard_map`` on jax >= 0.12.1.

    There such a value is a "high" one (an ``UnreducedArray`` over a plain array typed varying
    over the axes), and a primitive that takes one must say so (``is_high``) and bind itself
    on the plain value (``to_lojax``), as lax's collectives do (jax/_src/lax/parallel.py,
    ``_unreduced_all_reduce_to_lojax``); jaxcoll's already read a partial sum as varying
    (its ``partials`` parameter). Older jax: nothing to do.
    """
    if not hasattr(_core.ShapedArray, "lower_val"):
        return

    def to_lojax(*values, **params):
        avals = [_core.typeof(v) for v in values]
        out, _ = primitive.abstract_eval(*avals, **params)
        lowered = [low for aval, v in zip(avals, values) for low in aval.lower_val(v)]
        result = primitive.bind(*lowered, **params)
        if primitive.multiple_results:
            return [aval.raise_val(r) for aval, r in zip(out, result)]
        return out.raise_val(result)

    primitive.is_high = lambda *avals, **_: any(getattr(a, "is_high", False) for a in avals)
    primitive.to_lojax = to_lojax


def zero_tangent(primal):
    """The symbolic zero tangent of ``primal`` (a rule's answer to a zero tangent)."""
    return ad.Zero(jax.typeof(primal).to_tangent_aval())


def zeros_like_struct(struct):
    """Zeros of a ``jax.eval_shape`` result's shape, dtype and varying axes (what the built-in
    would have returned)."""
    mat = getattr(struct, "manual_axis_type", None)
    zeros = jax.numpy.zeros(struct.shape, struct.dtype)
    varying = tuple(sorted(getattr(mat, "varying", ()) or ()))
    return pvary(zeros, varying) if varying and check_vma() else zeros


def with_weak_type(x, weak: bool):
    """``x`` typed weak (as a Python scalar's result is) or not, its values as they are."""
    return _lax_internal._convert_element_type(x, x.dtype, weak_type=weak)


def weak_type(x) -> bool:
    return bool(getattr(jax.typeof(x), "weak_type", False))


def pvary(x, names: tuple):
    """``x`` typed varying over ``names`` as well (no communication)."""
    missing = tuple(name for name in names if name not in varying_axes(jax.typeof(x)))
    return lax.pcast(x, missing, to="varying") if missing else x


def manual_mesh_axes() -> tuple:
    """The shard_map (manual) mesh axes bound here, in the mesh's order; () under vmap."""
    mesh = jax.sharding.get_abstract_mesh()
    manual = set(getattr(mesh, "manual_axes", ()) or ())
    return tuple(name for name in getattr(mesh, "axis_names", ()) if name in manual)


def bound_axis_names() -> tuple:
    """Every axis name bound here (for error messages only)."""
    try:
        return tuple(_core.unsafe_get_axis_names())
    except Exception:  # pragma: no cover - depends on the jax version
        return ()


@dataclass(frozen=True)
class AxisPlan:
    """How a collective over ``axes`` numbers its ranks, fixed when it is traced.

    Ranks are numbered as ``lax.axis_index(axes)`` numbers them: row-major in the order the
    user wrote the names. ``ppermute`` is given the names in the mesh's order (jax 0.10 numbers
    its pairs that way whatever the order given; newer jax refuses another order), so rank r is
    ``permute_rank[r]`` there. ``in_mesh`` is False under ``vmap``, whose ppermute needs a
    permutation of every rank. ``stacked``: no axis is bound; the ranks are the leading
    dimension of the operand (a collective under ``vmap`` over its own axis, as a primitive).
    ``groups`` (lax's ``axis_index_groups``): equal-size groups of ranks, each running the
    schedule among its members (schedule rank j of group g is rank ``groups[g][j]``); all
    groups' transfers of a matching are one ppermute.
    """

    axes: tuple
    permute_axes: tuple
    permute_rank: tuple[int, ...]
    in_mesh: bool
    stacked: bool = False
    groups: tuple[tuple[int, ...], ...] | None = None

    @property
    def n_ranks(self) -> int:
        """The ranks one schedule runs on: the axis' size, or a group's."""
        return len(self.groups[0]) if self.groups else len(self.permute_rank)

    @property
    def axis_ranks(self) -> int:
        """The ranks of the whole axis (every group's)."""
        return len(self.permute_rank)

    def pairs(self, perm) -> tuple:
        """``perm``'s (src, dst) pairs (schedule ranks), in every group, numbered as ppermute
        numbers the ranks."""
        groups = self.groups or (range(len(self.permute_rank)),)
        return tuple((self.permute_rank[group[src]], self.permute_rank[group[dst]])
                     for group in groups for src, dst in perm)

    def index(self):
        """This rank's number in the schedule (its place in its group), traced."""
        return rank_in_group(self.axes, self.groups)


def rank_in_group(axis, groups=None):
    """``lax.axis_index(axis)``, or with ``axis_index_groups`` this rank's place in its group
    (traced)."""
    me = lax.axis_index(axis)
    if not groups:
        return me
    # rank -> its place in its group (0 for a rank in none: groups of one size of uneven ones)
    place = np.zeros(int(lax.axis_size(axis)), np.int32)
    for group in groups:
        place[list(group)] = np.arange(len(group))
    return jax.numpy.asarray(place)[me]


def axis_plan(axis, groups=None) -> AxisPlan:
    """The :class:`AxisPlan` of ``axis`` (a name or a tuple of names) where it is bound now;
    ``groups``: checked ``axis_index_groups`` (a tuple of tuples) or None."""
    axes = axis if isinstance(axis, tuple) else (axis,)
    sizes = {name: int(lax.axis_size(name)) for name in axes}
    manual = manual_mesh_axes()
    in_mesh = all(name in manual for name in axes)
    permute_axes = tuple(name for name in manual if name in axes) if in_mesh else axes
    return AxisPlan(axes, permute_axes, _permute_ranks(axes, permute_axes, tuple(sizes.items())),
                    in_mesh, groups=groups)


@lru_cache(maxsize=256)
def _permute_ranks(axes: tuple, permute_axes: tuple, sizes: tuple) -> tuple[int, ...]:
    """For each rank in ``axes``' row-major order, its number in ``permute_axes``' order."""
    sizes = dict(sizes)
    coords = np.indices([sizes[name] for name in axes]).reshape(len(axes), -1)  # (axes, ranks)
    by_name = dict(zip(axes, coords))
    permuted = [by_name[name] for name in permute_axes]
    return tuple(int(r) for r in np.ravel_multi_index(
        permuted, [sizes[name] for name in permute_axes]))


def sharded_spec(x) -> tuple:
    """The mesh axes each dimension of ``x`` is sharded over in its type, one entry per
    dimension (None: whole): under sharding in types, the Explicit mesh axes that a shard_map
    over some axes (``axis_names=``) leaves global. Empty entries outside such meshes."""
    if not isinstance(x, jax.Array):  # numpy arrays, numbers (and what jaxcoll will refuse)
        return (None,) * np.ndim(x)
    spec = getattr(getattr(jax.typeof(x), "sharding", None), "spec", None) or ()
    manual = set(manual_mesh_axes())  # a shard_map's own axes: each device sees its shard
    spec = [tuple(name for name in _names(entry) if name not in manual) for entry in spec]
    return tuple(None if not names else names[0] if len(names) == 1 else names
                 for names in spec) + (None,) * (x.ndim - len(spec))


def _names(entry) -> tuple:
    return () if entry is None else entry if isinstance(entry, tuple) else (entry,)


def on_local_shards(fn, tree, out_specs):
    """``fn(tree)``, run inside a shard_map over the mesh axes that ``tree``'s leaves are
    sharded over in their types, so that ``fn`` sees each device's local shards (jaxcoll packs
    and slices buffers, which sharding in types refuses on sharded dimensions); None if no
    leaf is sharded. ``out_specs(specs)``: the result's specs from the leaves' ``sharded_spec``s.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    specs = [sharded_spec(leaf) for leaf in leaves]
    axes = {name for spec in specs for entry in spec for name in _names(entry)}
    if not axes:
        return None
    in_specs = treedef.unflatten([P(*spec) for spec in specs])
    # jit: an eager shard_map (vmapped) hands an inner eager one its global shapes
    return jax.jit(jax.shard_map(fn, in_specs=(in_specs,), out_specs=out_specs(specs),
                                 axis_names=axes, check_vma=check_vma()))(tree)


_barriers = iter(range(1 << 62))  # each barrier of the coordination service needs its own id


def all_processes_here(timeout_ms: int = 600_000) -> None:
    """Wait until every process of ``jax.distributed`` reaches this call (its coordination
    service's barrier, no device work); alone, return at once."""
    if jax.process_count() == 1:
        return
    _distributed.global_state.client.wait_at_barrier(f"jaxcoll-{next(_barriers)}", timeout_ms)


def interpreter_ordered_effects() -> set:
    """The ordered effects of Pallas's TPU interpret mode (its callbacks simulate the devices;
    no public name)."""
    return {effect for effect in _interpret_params.get_interpret_effects()
            if _effects.ordered_effects.contains(effect)}


def interpreter_races_found() -> bool:
    """True if the race detector of Pallas's TPU interpret mode found a race in the kernels
    interpreted since its state was last reset (no public name)."""
    return bool(_interpreter.races and _interpreter.races.races_found)


def interpreter_abort(error: Exception) -> bool:
    """Fail the kernels Pallas's TPU interpret mode is running now with ``error`` (no public
    way): each simulated device raises at its next semaphore wait, barrier or callback, so a
    kernel that would wait for ever ends and the call waiting on it raises (a watchdog's
    remedy, tests/helpers.py). False if no kernel is being interpreted.

    Its barriers are broken too: a device that failed leaves the program, so its peers would
    wait for it for ever at the barrier that ends a kernel (where the failed devices meet).
    The interpreter's state is then unusable until ``reset_tpu_interpret_mode_state()``."""
    memory = getattr(_interpreter, "_shared_memory", None)
    if memory is None or not hasattr(memory, "set_failed"):
        return False
    memory.set_failed(error, top_level=False)  # top level: would wait for every device
    if hasattr(memory, "clean_up_barrier"):
        memory.clean_up_barrier.abort()
    return True


def effects_settled() -> None:
    """Wait for the side effects of every program dispatched from this thread, then forget
    their tokens, also where one failed: ``jax.effects_barrier()`` raises on a failed one and
    keeps it, and every later program with ordered effects (an interpreted kernel) then fails
    on it."""
    tokens = _dispatch.runtime_tokens
    if not hasattr(tokens, "current_tokens"):  # another layout: at least wait for them
        try:
            jax.effects_barrier()
        except jax.errors.JaxRuntimeError:
            pass
        return
    for token in (*tokens.current_tokens.values(), *tokens.output_runtime_tokens.values()):
        try:
            token.block_until_ready()
        except jax.errors.JaxRuntimeError:  # its failure was reported where it was waited on
            pass
    tokens.clear()
