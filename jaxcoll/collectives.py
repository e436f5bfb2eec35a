"""The public collectives: validate the arguments, pick a schedule, run it, bind it.

Every function is called inside ``jax.shard_map`` (or ``jax.vmap`` with ``axis_name``), like
the ``lax`` collectives it matches. Costs are given in the α-β-γ model for N bytes per rank on
n ranks: α per message round, β per byte sent, γ per byte reduced.

Here: the argument checks (``_arguments``, ``_check_schedule``, ``_compressed``, ...), the
runner (``_runner``) and the public functions. The runner packs a pytree's leaves into
buckets (packing.py's ``pack``), binds one primitive per bucket itself and cuts the results
back into leaves (``unpack``); a public function whose leaf is sharded over mesh axes outside
the collective runs on its local shards (sharded.py's ``local_shards``). Both are plain
functions that return their values, so that the path from a public function to the primitive
is short (docs/guide/path.md).

``algorithm="xla"`` runs the ``lax`` built-in instead, one per leaf (references.py).

``hierarchical`` runs on a tuple axis of k levels (outermost first); its schedule is built
from their sizes.

One job, the public collectives; most of the module's length is their docstrings (Args, Raises,
examples run as doctests by tests/test_docstrings.py).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcoll.analysis.compression import Compress, compress_arg
from jaxcoll.analysis.model import choose, pieces_for
from jaxcoll.ir.families import SCHEDULES, build_schedule, two_level
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Schedule
from jaxcoll.ir.symbolic import ScheduleError, verify
from jaxcoll.lowering import _compat, references
from jaxcoll.lowering._checks import (
    alltoall_dims,
    array_leaves,
    axis_size,
    check_choice,
    check_groups,
    check_op_dtype,
    check_root,
    check_two_level_axis,
    gather_dim,
    scatter_dim,
)
from jaxcoll.lowering.execute import after, in_sequence
from jaxcoll.lowering.layout import Layout
from jaxcoll.lowering.pallas_kernel import as_executor
from jaxcoll.lowering.primitives import collective
from jaxcoll.packing import bucket_plan  # noqa: F401 (re-exported: tutorials/06 imports it)
from jaxcoll.packing import mean, narrowed, pack, typed_as_lax, unpack, whole, widened
from jaxcoll.sharded import local_shards

OPS = ("sum", "mean", "max", "min")
BUCKET_BYTES = 25 * 2**20  # PyTorch DDP's default bucket_cap_mb


def algorithms(primitive: str) -> tuple[str, ...]:
    """The algorithm names ``primitive`` accepts, ``"auto"`` and ``"xla"`` included.

    Args:
      primitive: a collective's name: ``"allreduce"``, ``"reduce_scatter"``, ``"allgather"``,
        ``"alltoall"``, ``"broadcast"``, ``"reduce"``, ``"gather"`` or ``"scatter"``.

    Returns:
      A tuple of names, each one the collective's ``algorithm=`` takes — ``"auto"`` (the
      cost model's pick), ``"xla"`` (lax's built-in), then its schedules' algorithms, sorted.

    Raises:
      ValueError: if ``primitive`` is not one of the eight collectives (the message lists
        them).
    """
    check_choice("algorithms", "primitive", primitive, tuple(SCHEDULES))
    return ("auto", "xla", *sorted(SCHEDULES[primitive]))


def _positive_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1


def schedule(primitive: str, algorithm: str, n, *, root: int = 0, pieces: int = 1) -> Schedule:
    """The schedule ``algorithm`` runs for ``primitive`` on ``n`` ranks (plain data, no JAX).

    A schedule is rounds of ``src -> dst`` chunk transfers: ``print`` shows them,
    :func:`verify` proves them, :func:`cost` prices them, and a collective runs one given as
    its ``algorithm=`` (the one it was built for, on as many ranks).

    Args:
      primitive: the collective: ``"allreduce"``, ``"reduce_scatter"``, ``"allgather"``,
        ``"alltoall"``, ``"broadcast"``, ``"reduce"``, ``"gather"`` or ``"scatter"``.
      algorithm: one of its algorithms, as :func:`algorithms` lists them less ``"auto"``
        and ``"xla"`` (which are no schedule), e.g. ``"ring"`` or ``"binomial"``.
      n: the number of ranks, an int >= 1; for ``hierarchical``, the tuple of the levels'
        sizes, outermost first, e.g. ``(2, 4)`` or ``(2, 2, 2)``.
      root: the rank that sends (broadcast, scatter) or receives (reduce, gather), in
        ``0..n-1``; the collectives with no root take the default, 0.
      pieces: how many pieces a pipelined algorithm cuts the buffer into, an int >= 1
        (only a pipelined algorithm, such as ``tree``, takes more than 1).

    Returns:
      The :class:`~jaxcoll.Schedule`, its ``primitive`` set, so that :func:`verify` checks
      it and a collective accepts it as ``algorithm=``.

    Raises:
      ValueError: if ``primitive`` is not a collective or ``algorithm`` not one of its
        algorithms; if ``n`` is not an int >= 1 (for ``hierarchical``, not a non-empty
        tuple of them); if ``pieces`` is not an int >= 1, or is more than 1 for an
        algorithm that is not pipelined; if ``root`` is outside ``0..n-1``.
      TypeError: if ``root`` is not a Python int (a float, a bool or a traced
        value).

    Examples:
      The ring allreduce on 4 ranks: a ring reduce-scatter (``+``: the receiver adds the
      chunk) then a ring allgather (``=``: it copies it), 2(n-1) rounds:

      >>> import jaxcoll
      >>> ring = jaxcoll.schedule("allreduce", "ring", 4)
      >>> print(ring)
      ring reduce_scatter + ring allgather: 4 ranks, 4 chunks, 6 rounds ...
        round 0 | 0->1 [3]+  1->2 [0]+  2->3 [1]+  3->0 [2]+
        round 1 | 0->1 [2]+  1->2 [3]+  2->3 [0]+  3->0 [1]+
        round 2 | 0->1 [1]+  1->2 [2]+  2->3 [3]+  3->0 [0]+
        round 3 | 0->1 [0]=  1->2 [1]=  2->3 [2]=  3->0 [3]=
        round 4 | 0->1 [3]=  1->2 [0]=  2->3 [1]=  3->0 [2]=
        round 5 | 0->1 [2]=  1->2 [3]=  2->3 [0]=  3->0 [1]=
      >>> jaxcoll.verify(ring)  # silent: every rank ends with every contribution once

      A binomial broadcast from rank 2 on 8 ranks doubles the ranks that hold the data in
      each round, ceil(log2 8) = 3 rounds:

      >>> print(jaxcoll.schedule("broadcast", "binomial", 8, root=2))
      binomial broadcast: 8 ranks, 1 chunks, 3 rounds ...
        round 0 | 2->6 [0]=
        round 1 | 2->4 [0]=  6->0 [0]=
        round 2 | 2->3 [0]=  4->5 [0]=  6->7 [0]=  0->1 [0]=
    """
    check_choice("schedule", "primitive", primitive, tuple(SCHEDULES))
    check_choice("schedule", "algorithm", algorithm, tuple(sorted(SCHEDULES[primitive])))
    if two_level(primitive, algorithm):
        if not (isinstance(n, tuple) and n and all(map(_positive_int, n))):
            raise ValueError(f"jaxcoll.schedule: n={n!r} must be a non-empty tuple of ints "
                             f">= 1, the levels' sizes from the outermost, for {algorithm!r}, "
                             "e.g. (2, 4) or (2, 2, 2)")
        ranks = tuple(int(size) for size in n)
    elif _positive_int(n):
        ranks = int(n)
    else:
        raise ValueError(f"jaxcoll.schedule: n={n!r} must be an int >= 1")
    if not _positive_int(pieces):
        raise ValueError(f"jaxcoll.schedule: pieces={pieces!r} must be an int >= 1")
    if pieces != 1 and not SCHEDULES[primitive][algorithm].pipelined:
        pipelined = sorted(name for name, entry in SCHEDULES[primitive].items() if entry.pipelined)
        raise ValueError(f"jaxcoll.schedule: pieces={pieces!r} needs a pipelined algorithm; "
                         f"{algorithm!r} is not (pipelined for {primitive}: "
                         f"{', '.join(pipelined) or 'none'})")
    root = check_root("schedule", root, int(np.prod(ranks)))
    return build_schedule(primitive, algorithm, ranks, root, int(pieces))


def _check_bucket_bytes(primitive: str, bucket_bytes) -> None:
    if bucket_bytes is not None and not _positive_int(bucket_bytes):
        error = ValueError if isinstance(bucket_bytes, (int, np.integer)) else TypeError
        raise error(f"jaxcoll.{primitive}: bucket_bytes={bucket_bytes!r} must be an int >= 1 "
                    "(the most bytes of x one collective carries) or None (one bucket per "
                    "dtype)")


_TAKES_NONE = object()  # the op or root of a primitive that has none (None is a user's value)


def _arguments(primitive: str, x, axis, algorithm, bucket_bytes, *, op=_TAKES_NONE,
               root=_TAKES_NONE, groups=None, fn: str | None = None, executor="xla"):
    """The checked arguments of a public collective: (algorithm, n, root, leaves, treedef,
    groups); ``n`` is the ranks one collective runs on (a group's, with ``groups``; None for
    allreduce's groups of different sizes, which lax's psum, pmax and pmin take).

    ``"auto"`` stays as it is: it is resolved per packed buffer, once its size is known.
    ``groups``: lax's ``axis_index_groups``. ``fn``: the public function's name in errors
    (default: ``primitive``). ``executor``: how a schedule runs (``"xla"``, ``"pallas"``).
    """
    fn = fn or primitive
    if as_executor(executor, f"jaxcoll.{fn}") != "xla" and algorithm == "xla":
        raise ValueError(f"jaxcoll.{fn}: algorithm='xla' calls lax's own collective, which no "
                         f"executor runs; executor={executor!r} needs a schedule's algorithm")
    if isinstance(algorithm, Schedule):
        _check_schedule(fn, primitive, algorithm)
    else:
        check_choice(fn, "algorithm", algorithm, algorithms(primitive))
    _check_bucket_bytes(fn, bucket_bytes)
    if op is not _TAKES_NONE:
        check_choice(fn, "op", op, OPS)
    n = axis_size(fn, axis)
    if two_level(primitive, algorithm):
        check_two_level_axis(fn, algorithm, axis)
    groups = check_groups(fn, groups, n, uneven=RECORDS[primitive].uneven_groups)
    if groups and two_level(primitive, algorithm):
        raise ValueError(f"jaxcoll.{fn}: algorithm={algorithm!r} runs on the levels of a tuple "
                         "axis and takes no axis_index_groups; pass another algorithm")
    n = (None if len(set(map(len, groups))) > 1 else len(groups[0])) if groups else n
    if n is None and isinstance(algorithm, Schedule):
        raise ValueError(f"jaxcoll.{fn}: algorithm={algorithm!r} is a schedule for one group "
                         f"size; axis_index_groups={[list(g) for g in groups]} has groups of "
                         "different sizes: pass an algorithm's name")
    if algorithm != "xla" and _several_vmap_axes(axis):
        raise ValueError(f"jaxcoll.{fn}: axis={axis!r} names several vmap axes, but "
                         "JAX's ppermute under vmap takes one axis name at a time; use one "
                         "vmap axis, or jax.shard_map over a mesh with these axes")
    root = None if root is _TAKES_NONE else check_root(fn, root, n)
    if isinstance(algorithm, Schedule) and (algorithm.n_ranks, algorithm.root) != (
            n, algorithm.root if root is None else root):
        raise ValueError(f"jaxcoll.{fn}: algorithm={algorithm!r} is a schedule for "
                         f"{algorithm.n_ranks} ranks from root {algorithm.root}; this call runs "
                         f"on {n} ranks" + ("" if root is None else f" from root {root}"))
    leaves, treedef = array_leaves(fn, x)
    if op is not _TAKES_NONE:
        for leaf in leaves:
            check_op_dtype(fn, primitive, op, leaf.dtype)
    return algorithm, n, root, leaves, treedef, groups


def _check_schedule(fn: str, primitive: str, schedule: Schedule) -> None:
    """A schedule given as ``algorithm=``: it must be for ``primitive`` and keep its promise
    (``verify``, once per schedule)."""
    if schedule.collective != primitive:
        raise ValueError(f"jaxcoll.{fn}: algorithm={schedule!r} is a schedule for "
                         f"{schedule.collective or 'no primitive'!r}, not {primitive!r} (build it "
                         "with jaxcoll.schedule, or give Schedule its primitive)")
    schedule.refuse_in_switch(f"jaxcoll.{fn}: jaxcoll's XLA and Pallas executors")
    try:
        _verified(schedule)
    except ScheduleError as error:
        raise ScheduleError(f"jaxcoll.{fn}: algorithm={schedule!r} does not do what "
                            f"{primitive} promises: {error}") from None


@functools.lru_cache(maxsize=64)
def _verified(schedule: Schedule) -> None:
    verify(schedule)


def _several_vmap_axes(axis) -> bool:
    """True where ``axis`` is a tuple naming axes that are not all shard_map's (vmap's)."""
    return isinstance(axis, tuple) and len(axis) > 1 and not set(axis) <= set(
        _compat.manual_mesh_axes())


def _group_size(axis, groups):
    """This rank's group's size (traced), where the groups' sizes differ."""
    sizes = np.zeros(sum(map(len, groups)), np.int32)
    for group in groups:
        sizes[list(group)] = len(group)
    return jnp.asarray(sizes)[lax.axis_index(axis)]


def _runner(primitive: str, algorithm: str, n, axis, op: str = "sum", root: int = 0,
            compress: Compress | None = None, feedback: bool = False, groups=None,
            to: str = "varying", executor="xla"):
    """``run(leaves, layouts, bucket_bytes, whole_leaves=True)``: the leaves packed into buckets
    (``packing.pack``), the schedule run on each bucket's buffer as one primitive
    (primitives.py), each after the one before where jaxlib needs it (``_compat.
    serialize_collectives``), and the results cut back into leaves (``packing.unpack``).
    ``auto`` picks, per bucket, the schedule the cost model predicts fastest for its buffer
    (and, compressed, among those with the smallest error bounds), at trace time. Groups of
    different sizes (allreduce): the groups of each size run their schedule, and each rank
    keeps its own group's result. ``executor``: ``"xla"`` or ``"pallas"`` (pallas_kernel.py),
    the same plan run."""
    executor = as_executor(executor)
    if executor != "xla" and compress is not None:
        raise ValueError(f"jaxcoll.{primitive}: compress={compress.kind!r} runs on "
                         "executor='xla' only (the Pallas kernel moves chunks as they are)")
    sizes = sorted(set(map(len, groups))) if groups else [n]
    several = len(sizes) > 1  # groups of different sizes: each size's groups on their own
    members = [tuple(g for g in groups if len(g) == size) if several else groups
               for size in sizes]
    mine = _group_size(axis, groups) if several else None
    levels = tuple(axis_size(primitive, name) for name in axis) if two_level(
        primitive, algorithm) else None
    combine = "sum" if op == "mean" else op

    def run(leaves: list, layouts: list[Layout], bucket_bytes, whole_leaves: bool = True):
        buffers, buckets = pack(leaves, layouts, bucket_bytes, whole_leaves)
        serial, results = _compat.serialize_collectives(), []
        for buf, bucket in zip(buffers, buckets):
            outs = []  # one per group size
            for size, size_groups in zip(sizes, members):
                if serial:  # after the collective before: this bucket's, else the last
                    # bucket's (jaxlib 0.10's CPU collectives)
                    buf = after(buf, (outs or results)[-1:])
                outs.append(collective(
                    _schedule_for(primitive, algorithm, size, levels or size, root, compress,
                                  buf), buf, axis, combine, compress, feedback, size_groups,
                    to, bucket.layout, executor))
            results.append(functools.reduce(
                lambda out, pair: jnp.where(mine == pair[0], pair[1], out),
                zip(sizes[1:], outs[1:]), outs[0]))
        return unpack(results, buckets, leaves, layouts)
    return run


def _schedule_for(primitive: str, algorithm, n: int, ranks, root: int,
                  compress: Compress | None, buf) -> Schedule:
    """The schedule that runs ``buf`` on ``n`` ranks (``ranks``: a two-level algorithm's
    levels): the caller's own (verified), else ``algorithm``'s, ``"auto"`` the cost model's
    pick for the buffer's size."""
    if isinstance(algorithm, Schedule):
        return algorithm
    nbytes = buf.size * buf.dtype.itemsize
    name = choose(primitive, n, nbytes, compress=compress) if algorithm == "auto" else algorithm
    return build_schedule(primitive, name, ranks, root, pieces_for(primitive, name, n, nbytes))


def _compressed(primitive: str, compress, algorithm: str, leaves: list, op: str = "sum",
                accum_dtype=None) -> tuple[Compress | None, list]:
    """The checked ``compress`` and the leaves to run: as they are without it, else float32
    (the buffers and sums of a compressed collective are float32)."""
    compress = compress_arg(primitive, compress)
    if compress is None:
        return None, leaves
    if algorithm == "xla":
        raise ValueError(f"jaxcoll.{primitive}: compress={compress.kind!r} needs one of "
                         "jaxcoll's algorithms; algorithm='xla' runs the lax built-in, which "
                         "sends the values as they are")
    if op not in ("sum", "mean"):
        raise ValueError(f"jaxcoll.{primitive}: compress={compress.kind!r} takes op='sum' or "
                         f"op='mean' (its error model bounds sums), got op={op!r}")
    if accum_dtype is not None and np.dtype(accum_dtype) != np.float32:
        raise TypeError(f"jaxcoll.{primitive}: compress={compress.kind!r} reduces in float32; "
                        f"accum_dtype={np.dtype(accum_dtype)} must be None or float32")
    for leaf in leaves:
        if not jnp.issubdtype(leaf.dtype, jnp.floating) or leaf.dtype.itemsize > 4:
            raise TypeError(f"jaxcoll.{primitive}: compress={compress.kind!r} takes floating "
                            f"leaves of at most 32 bits; x has a leaf of dtype {leaf.dtype}")
    return compress, [leaf.astype(jnp.float32) for leaf in leaves]


# ----------------------------------------------------------------------------- collectives
#
# Every function takes ``bucket_bytes`` (default BUCKET_BYTES = 25 MiB, ``None``: one bucket per
# dtype): a pytree costs one collective per bucket (see ``packing.bucket_plan``); ``xla`` runs one
# built-in per leaf and ignores it. The reducing ones take ``accum_dtype``: every leaf is cast to
# it, reduced (and, for ``mean``, divided) in it, and cast back, ``xla`` included. bfloat16 in
# float32 moves and adds twice the bytes; on 8 ranks of 1M normal bfloat16 values the ring's largest
# error against the float64 sum falls from 0.119 to 0.031 (mean 0.0073 to 0.0032): one rounding of
# the result instead of one per hop (``python bench/training.py --parts 2``).

def allreduce(x, axis, *, op: str = "sum", algorithm: str = "auto",
              bucket_bytes: int | None = BUCKET_BYTES, accum_dtype=None, compress=None,
              axis_index_groups=None, executor="xla"):
    """Every rank gets ``op`` of ``x`` over ``axis``.

    Like ``lax.psum``, ``lax.pmean``, ``lax.pmax`` and ``lax.pmin``, run by one of jaxcoll's
    schedules (or, ``algorithm="xla"``, by the built-in itself).

    Cost, ring: 2(n-1)α + 2(n-1)/n·Nβ + (n-1)/n·Nγ; naive: 2(n-1)α + 2(n-1)·Nβ + (n-1)·Nγ;
    tree (p = pipeline_pieces(N) pieces, M <= 4(floor(log2 n) + p - 1) messages):
    M(α + Nβ/p) + M/2·Nγ/p (half of them add into the receiver). Compressed: N is the
    encoded size (int8: 0.258x float32 with blocks of 128).

    Args:
      x: an array or a pytree of arrays (a number counts as a 0-d array), this rank's
        block.
      axis: the axis name it runs over, bound by ``jax.shard_map`` (a mesh axis) or by
        ``jax.vmap(..., axis_name=...)``; or a tuple (or list) of names, ranks row-major.
      op: the reduction: ``"sum"`` (default), ``"mean"``, ``"max"`` or
        ``"min"``.
      algorithm: ``"auto"`` (default: the cost model's fastest for each bucket), ``"xla"``
        (lax's built-in), a name from ``algorithms("allreduce")``, or a
        :class:`~jaxcoll.Schedule` from :func:`schedule` for it, on this many ranks.
      bucket_bytes: the most bytes of ``x`` one collective carries (default
        ``BUCKET_BYTES``, 25 MiB): a pytree's leaves are packed into buckets of at most this
        many, one collective each; None: one bucket per dtype. ``"xla"`` ignores it.
      accum_dtype: a dtype every leaf is cast to, reduced (and, for ``"mean"``, divided)
        in, and cast back from, ``"xla"`` included; None (default): each leaf's own.
      compress: None (default), ``"bf16"``, ``"fp8"``, ``"int8"`` or a :class:`Compress`:
        transfers carry quantized blocks, sums stay float32; error bound in compression.py
        (``two_shot``: each value quantized at most twice; ``ring``: at every hop).
      axis_index_groups: lax's groups: lists of ranks of ``axis`` that hold each rank once
        (of different sizes too, as psum's); each group reduces on its own.
      executor: how a schedule runs: ``"xla"`` (default: XLA collective-permutes),
        ``"pallas"`` or a :class:`~jaxcoll.Pallas` (one Pallas TPU kernel).

    Returns:
      ``op`` of ``x`` over the ranks of ``axis`` (of this rank's group), on every rank —
      ``x``'s structure, shapes and dtypes (a sum of bools is int32, as psum's), typed
      invariant over ``axis`` as lax's (varying, with groups).

    Raises:
      ValueError: if ``algorithm``, ``op``, ``compress`` or ``executor`` is not one of those
        allowed (a schedule for another collective or rank count included);
        ``bucket_bytes`` < 1; ``axis_index_groups`` that do not hold every rank once;
        ``"hierarchical"`` on an axis that is not a tuple of names, or with groups;
        ``compress`` with ``"xla"``, ``op="max"``/``"min"`` or ``executor="pallas"``;
        ``algorithm="xla"`` with ``executor="pallas"``.
      TypeError: if a leaf of ``x`` is not an array or a number of a numeric dtype;
        ``axis`` is not a name or a tuple of names; ``bucket_bytes`` is not an int;
        ``op="mean"`` of integers or ``"max"``/``"min"`` of complex numbers; ``accum_dtype``
        is not a numeric dtype, or is narrower than a leaf; ``compress`` of leaves that
        are not floats of at most 32 bits, or with an ``accum_dtype`` other than float32.
      NameError: if ``axis`` is not bound here: a misspelt name, or a call outside
        ``jax.shard_map`` and ``jax.vmap`` (JAX's words first: "unbound axis name").
      ScheduleError: a ``ValueError``: a :class:`~jaxcoll.Schedule` given as
        ``algorithm`` does not do what allreduce promises.

    Examples:
      Each of 4 ranks holds one row of ``x`` and gets the sum of the four, from a ring of
      ppermutes:

      >>> import jax, jaxcoll, numpy as np
      >>> from jax.sharding import Mesh, PartitionSpec as P
      >>> mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
      >>> @jax.shard_map(mesh=mesh, in_specs=P("i"), out_specs=P())
      ... def total(x):  # x: this rank's row, shape (1, 3)
      ...     return jaxcoll.allreduce(x, "i", algorithm="ring")
      >>> x = np.arange(12).reshape(4, 3)
      >>> print(np.asarray(total(x)))
      [[18 22 26]]

      ``op="mean"`` is ``lax.pmean``'s; here ``"auto"`` picks the algorithm:

      >>> mean = jax.shard_map(lambda x: jaxcoll.allreduce(x, "i", op="mean"), mesh=mesh,
      ...                      in_specs=P("i"), out_specs=P())
      >>> print(np.asarray(mean(x.astype(np.float32))))
      [[4.5 5.5 6.5]]
    """
    if ran := local_shards("allreduce", allreduce, locals()):
        return ran[0]
    if (algorithm != "xla" and _several_vmap_axes(axis) and compress is None
            and axis_index_groups is None and not two_level("allreduce", algorithm)):
        # JAX's ppermute under vmap takes one axis name: one axis at a time, each its own
        # ranks (ranks over a tuple are row-major, and every op here is associative)
        _arguments("allreduce", x, axis[0], algorithm, bucket_bytes, op=op)  # the checks
        combine = "sum" if op == "mean" else op
        for name in axis:
            x = allreduce(x, name, op=combine, algorithm=algorithm, bucket_bytes=bucket_bytes,
                          accum_dtype=accum_dtype, executor=executor)
        n = int(np.prod([axis_size("allreduce", name) for name in axis]))
        return jax.tree_util.tree_map(lambda leaf: leaf / n, x) if op == "mean" else x
    algorithm, n, _, leaves, treedef, groups = _arguments(
        "allreduce", x, axis, algorithm, bucket_bytes, op=op, groups=axis_index_groups,
        executor=executor)
    # groups of different sizes (n None): each rank's own group's size
    size = _group_size(axis, groups) if n is None else n
    if op == "sum" and not any(isinstance(leaf, jax.core.Tracer)
                               for leaf in jax.tree_util.tree_leaves(x)):
        return jax.tree_util.tree_map(lambda leaf: leaf * size, x)  # a constant: n x, as psum
    if op == "sum":  # as psum: bools are summed as int32
        leaves = [leaf.astype(jnp.int32) if leaf.dtype == bool else leaf for leaf in leaves]
    compress, wide = _compressed("allreduce", compress, algorithm, leaves, op, accum_dtype)
    wide = wide if compress else widened("allreduce", leaves, accum_dtype)
    if algorithm == "xla":
        return treedef.unflatten(narrowed(in_sequence(
            lambda leaf: references.allreduce(leaf, axis, op, groups), wide), leaves))
    # pmax and pmin of bools: of 0s and 1s, as uint8 (cast back to bool by narrowed)
    wide = [leaf.astype(jnp.uint8) if leaf.dtype == bool else leaf for leaf in wide]
    run = _runner("allreduce", algorithm, n, axis, op, compress=compress, groups=groups,
                  executor=executor)
    out = mean(run(wide, whole(wide, n), bucket_bytes), op, size)
    return treedef.unflatten(typed_as_lax(narrowed(out, leaves), leaves, axis, lambda leaf:
                                          references.allreduce(leaf, axis, op, groups)))


def allreduce_with_feedback(x, residual, axis, *, compress, op: str = "mean",
                            algorithm: str = "auto", bucket_bytes: int | None = BUCKET_BYTES):
    """A compressed allreduce with error feedback: ``allreduce(x + residual, compress=...)``.

    It also returns the next residual, what compression dropped at this rank: pass it back
    in at the next step. Summed over ranks, the residuals are exactly what the result lacks
    (of the sum; ``op="mean"`` divides the result only), so adding them back at the next
    step leaves no error behind, only a delay.

    Args:
      x: an array or a pytree of arrays (a number counts as a 0-d array), this rank's
        block.
      residual: what compression dropped at the last step, ``x``'s structure and shapes,
        float32 (zeros at the first step).
      axis: the axis name it runs over, bound by ``jax.shard_map`` (a mesh axis) or by
        ``jax.vmap(..., axis_name=...)``; or a tuple (or list) of names, ranks row-major.
      compress: ``"bf16"``, ``"fp8"``, ``"int8"`` or a :class:`Compress`, keyword-only and
        required: as :func:`allreduce`'s.
      op: ``"mean"`` (default) or ``"sum"``, the reductions whose error the model
        bounds.
      algorithm: ``"auto"`` (default: the cost model's fastest for each bucket), ``"xla"``
        (lax's built-in), a name from ``algorithms("allreduce")``, or a
        :class:`~jaxcoll.Schedule` from :func:`schedule` for it, on this many ranks.
      bucket_bytes: the most bytes of ``x`` one collective carries (default
        ``BUCKET_BYTES``, 25 MiB): a pytree's leaves are packed into buckets of at most this
        many, one collective each; None: one bucket per dtype. ``"xla"`` ignores it.

    Returns:
      A pair ``(result, residual)`` — the allreduce of ``x + residual`` (``x``'s structure,
      shapes and dtypes), and this rank's next residual (float32, ``x``'s structure).

    Raises:
      ValueError: if ``compress`` is None or not one, ``residual`` does not match ``x``'s
        structure and shapes, ``op`` is neither ``"sum"`` nor ``"mean"``, or as
        :func:`allreduce` raises (``algorithm="xla"`` included: it compresses nothing).
      TypeError: as :func:`allreduce` raises, e.g. for a leaf that is not an
        array.
      NameError: if ``axis`` is not bound here (a misspelt name, or a call outside
        ``jax.shard_map`` and ``jax.vmap``).
    """
    algorithm, n, _, leaves, treedef, _ = _arguments("allreduce", x, axis, algorithm, bucket_bytes,
                                                     op=op, fn="allreduce_with_feedback")
    compress = compress_arg("allreduce_with_feedback", compress)
    if compress is None:
        raise ValueError("jaxcoll.allreduce_with_feedback: compress=None has nothing to feed "
                         "back; pass one of bf16, fp8, int8")
    carried, carried_def = array_leaves("allreduce_with_feedback", residual)
    if carried_def != treedef or any(np.shape(r) != np.shape(leaf)
                                     for r, leaf in zip(carried, leaves)):
        raise ValueError("jaxcoll.allreduce_with_feedback: residual has structure "
                         f"{carried_def} and shapes {[np.shape(r) for r in carried]}; it must "
                         f"match x's ({treedef}, {[np.shape(leaf) for leaf in leaves]})")
    compress, wide = _compressed("allreduce_with_feedback", compress, algorithm, leaves, op)
    corrected = [leaf + r.astype(jnp.float32) for leaf, r in zip(wide, carried)]
    run = _runner("allreduce", algorithm, n, axis, op, compress=compress, feedback=True)
    pairs = run(corrected, whole(corrected, n), bucket_bytes, whole_leaves=False)
    out = mean([result for result, _ in pairs], op, n)
    return (treedef.unflatten(narrowed(out, leaves)),
            treedef.unflatten([dropped for _, dropped in pairs]))


def reduce_scatter(x, axis, *, op: str = "sum", dim: int = 0, tiled: bool = False,
                   algorithm: str = "auto", bucket_bytes: int | None = BUCKET_BYTES,
                   accum_dtype=None, compress=None, axis_index_groups=None, executor="xla"):
    """Rank i gets block i (along ``dim``) of ``op`` of ``x`` over ``axis``.

    ``lax.psum_scatter(x, axis, scatter_dimension=dim, tiled=tiled)`` for ``op="sum"``.
    Cost, ring: (n-1)α + (n-1)/n·Nβ + (n-1)/n·Nγ; naive: 2(n-1)α + (n-1)(N + N/n)β
    + (n-1)·Nγ.

    Args:
      x: an array or a pytree of arrays (a number counts as a 0-d array), this rank's
        block.
      axis: the axis name it runs over, bound by ``jax.shard_map`` (a mesh axis) or by
        ``jax.vmap(..., axis_name=...)``; or a tuple (or list) of names, ranks row-major.
      op: the reduction: ``"sum"`` (default), ``"mean"``, ``"max"`` or
        ``"min"``.
      dim: the dimension of each leaf split into n blocks, block i for rank i
        (default 0).
      tiled: False (default): ``dim``'s size must be n, and the result drops it; True: a
        multiple of n, and the result keeps it, n times shorter.
      algorithm: ``"auto"`` (default: the cost model's fastest for each bucket), ``"xla"``
        (lax's built-in), a name from ``algorithms("reduce_scatter")``, or a
        :class:`~jaxcoll.Schedule` from :func:`schedule` for it, on this many ranks.
      bucket_bytes: the most bytes of ``x`` one collective carries (default
        ``BUCKET_BYTES``, 25 MiB): a pytree's leaves are packed into buckets of at most this
        many, one collective each; None: one bucket per dtype. ``"xla"`` ignores it.
      accum_dtype: a dtype every leaf is cast to, reduced (and, for ``"mean"``, divided)
        in, and cast back from, ``"xla"`` included; None (default): each leaf's own.
      compress: as :func:`allreduce`'s (``pairwise``: each value quantized once, at its
        source).
      axis_index_groups: lax's groups: lists of ranks of ``axis`` that hold each rank once;
        each group runs the collective on its own (None, default: the whole axis).
      executor: how a schedule runs: ``"xla"`` (default: XLA collective-permutes),
        ``"pallas"`` or a :class:`~jaxcoll.Pallas` (one Pallas TPU kernel).

    Returns:
      This rank's block of ``op`` of ``x`` over the ranks (of its group) — ``x``'s structure
      and dtypes, each leaf's ``dim`` dropped (``tiled=False``) or n times shorter.

    Raises:
      ValueError: if ``algorithm``, ``op``, ``compress`` or ``executor`` is not one of those
        allowed (a schedule for another collective or rank count included);
        ``bucket_bytes`` < 1; ``axis_index_groups`` that are not groups of equal size
        holding every rank once; ``"hierarchical"`` on an axis that is not a tuple of
        names, or with groups; ``dim`` out of range, a 0-d leaf, or ``dim``'s size not n
        (``tiled=False``) or not a multiple of it (``tiled=True``); ``compress`` with
        ``"xla"``, ``op="max"``/``"min"`` or ``executor="pallas"``.
      TypeError: if a leaf of ``x`` is not an array or a number of a numeric dtype;
        ``axis`` is not a name or a tuple of names; ``bucket_bytes`` or ``dim`` is not an
        int, or ``tiled`` not a bool; a leaf of dtype bool; ``op="mean"`` of integers or
        ``"max"``/``"min"`` of complex numbers; ``accum_dtype`` is not a numeric dtype, or
        is narrower than a leaf; ``compress`` of leaves that are not floats of at most 32 bits.
      NameError: if ``axis`` is not bound here: a misspelt name, or a call outside
        ``jax.shard_map`` and ``jax.vmap`` (JAX's words first: "unbound axis name").
      ScheduleError: a ``ValueError``: a :class:`~jaxcoll.Schedule` given as
        ``algorithm`` does not do what reduce_scatter promises.

    Examples:
      Each of 4 ranks holds 4 values; rank i gets the sum of the ranks' value i:

      >>> import jax, jaxcoll, numpy as np
      >>> from jax.sharding import Mesh, PartitionSpec as P
      >>> mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
      >>> f = jax.shard_map(lambda x: jaxcoll.reduce_scatter(x, "i", tiled=True),
      ...                   mesh=mesh, in_specs=P("i"), out_specs=P("i"))
      >>> print(np.asarray(f(np.arange(16))))  # rank i: i + (4 + i) + (8 + i) + (12 + i)
      [24 28 32 36]
    """
    if ran := local_shards("reduce_scatter", reduce_scatter, locals()):
        return ran[0]
    algorithm, n, _, leaves, treedef, groups = _arguments(
        "reduce_scatter", x, axis, algorithm, bucket_bytes, op=op, groups=axis_index_groups,
        executor=executor)
    dims = [scatter_dim("reduce_scatter", leaf.shape, dim, tiled, n) for leaf in leaves]
    compress, wide = _compressed("reduce_scatter", compress, algorithm, leaves, op, accum_dtype)
    wide = wide if compress else widened("reduce_scatter", leaves, accum_dtype)
    if algorithm == "xla":
        out = in_sequence(lambda leaf, d: references.reduce_scatter(
            leaf, axis, op, d, tiled, n, groups), wide, dims)
    else:
        run = _runner("reduce_scatter", algorithm, n, axis, op, compress=compress, groups=groups,
                      executor=executor)
        out = mean(run(wide, [Layout("scatter", n, d, tiled=tiled) for d in dims],
                       bucket_bytes), op, n)
        out = typed_as_lax(out, leaves, axis, lambda leaf: references.reduce_scatter(
            leaf, axis, op, scatter_dim("reduce_scatter", leaf.shape, dim, tiled, n), tiled, n,
            groups))
    return treedef.unflatten(narrowed(out, leaves))


def allgather(x, axis, *, dim: int = 0, tiled: bool = False, algorithm: str = "auto",
              bucket_bytes: int | None = BUCKET_BYTES, compress=None, axis_index_groups=None,
              to: str = "varying", executor="xla"):
    """Every rank gets all ranks' ``x`` stacked (or, ``tiled``, concatenated) along ``dim``.

    Matches ``lax.all_gather(x, axis, axis=dim, tiled=tiled)``.
    Cost, ring: (n-1)α + (n-1)·Nβ; naive: 2(n-1)α + (n-1)(N + nN)β (N = bytes of ``x``).

    Args:
      x: an array or a pytree of arrays (a number counts as a 0-d array), this rank's
        block.
      axis: the axis name it runs over, bound by ``jax.shard_map`` (a mesh axis) or by
        ``jax.vmap(..., axis_name=...)``; or a tuple (or list) of names, ranks row-major.
      dim: where the n blocks go, in rank order: a new dimension they are stacked along,
        or (``tiled``) the existing one they are concatenated along; default 0.
      tiled: False (default): stack the n blocks along a new dimension ``dim``; True:
        concatenate them along ``dim``.
      algorithm: ``"auto"`` (default: the cost model's fastest for each bucket), ``"xla"``
        (lax's built-in), a name from ``algorithms("allgather")``, or a
        :class:`~jaxcoll.Schedule` from :func:`schedule` for it, on this many ranks.
      bucket_bytes: the most bytes of ``x`` one collective carries, counted on the input (a
        bucket's gathered buffer is n times bigger); default ``BUCKET_BYTES``, 25 MiB;
        None: one bucket per dtype. ``"xla"`` ignores it.
      compress: None (default), ``"bf16"``, ``"fp8"``, ``"int8"`` or a :class:`Compress`:
        each value quantized once, at its source, whatever the algorithm; every rank gets
        the same decoded values.
      axis_index_groups: lax's groups: lists of ranks of ``axis``, of one size, that hold
        each rank once; each group runs the collective on its own (None: the whole axis).
      to: ``"varying"`` (default), ``"invarying"``: typed invariant under check_vma, as
        lax's (its transpose keeps this rank's block of the cotangent, no communication),
        or ``"reduced"`` (its transpose a reduce_scatter of the unreduced cotangent).
      executor: how a schedule runs: ``"xla"`` (default: XLA collective-permutes),
        ``"pallas"`` or a :class:`~jaxcoll.Pallas` (one Pallas TPU kernel).

    Returns:
      The ranks' ``x`` (of this rank's group), in rank order, with ``x``'s structure and
      dtypes: each leaf one dimension longer (n at ``dim``), or, ``tiled``, n times longer
      along ``dim``.

    Raises:
      ValueError: if ``algorithm`` or ``executor`` is not one of those allowed (a schedule
        for another collective or rank count included); ``bucket_bytes`` < 1;
        ``axis_index_groups`` that are not groups of one size holding every rank once;
        ``"hierarchical"`` on an axis that is not a tuple of names, or with groups;
        ``algorithm="xla"`` with ``executor="pallas"``;
        ``dim`` out of range, or ``tiled`` with a 0-d leaf; ``to`` not one of ``"varying"``,
        ``"invarying"``, ``"reduced"``, or not ``"varying"`` with groups; ``compress`` not
        one, or with ``"xla"`` or ``executor="pallas"``.
      TypeError: if a leaf of ``x`` is not an array or a number of a numeric dtype;
        ``axis`` is not a name or a tuple of names; ``bucket_bytes`` is not an int;
        ``dim`` is not an int or ``tiled`` not a bool; ``compress`` of leaves that are not
        floats of at most 32 bits.
      NameError: if ``axis`` is not bound here: a misspelt name, or a call outside
        ``jax.shard_map`` and ``jax.vmap`` (JAX's words first: "unbound axis name").
      ScheduleError: a ``ValueError``: a :class:`~jaxcoll.Schedule` given as
        ``algorithm`` does not do what allgather promises.

    Examples:
      Each of 4 ranks holds one value; each gets all four (``[None]`` makes each rank's
      result a row of what is printed):

      >>> import jax, jaxcoll, numpy as np
      >>> from jax.sharding import Mesh, PartitionSpec as P
      >>> mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
      >>> f = jax.shard_map(lambda x: jaxcoll.allgather(x, "i", tiled=True)[None],
      ...                   mesh=mesh, in_specs=P("i"), out_specs=P("i"))
      >>> print(np.asarray(f(np.arange(4))))
      [[0 1 2 3]
       [0 1 2 3]
       [0 1 2 3]
       [0 1 2 3]]
    """
    if ran := local_shards("allgather", allgather, locals()):
        return ran[0]
    algorithm, n, _, leaves, treedef, groups = _arguments(
        "allgather", x, axis, algorithm, bucket_bytes, groups=axis_index_groups,
        executor=executor)
    check_choice("allgather", "to", to, ("varying", "invarying", "reduced"))
    if to != "varying" and groups:
        raise ValueError(f"jaxcoll.allgather: to={to!r} takes no axis_index_groups (a "
                         "group's result is not the same over the whole axis), as lax's")
    dims = [gather_dim("allgather", leaf.shape, dim, tiled) for leaf in leaves]
    compress, wide = _compressed("allgather", compress, algorithm, leaves)
    if algorithm == "xla":
        return treedef.unflatten(in_sequence(lambda leaf, d: references.allgather(
            leaf, axis, d, tiled, groups, to), leaves, dims))

    run = _runner("allgather", algorithm, n, axis, compress=compress, groups=groups,
                  to=to, executor=executor)
    out = run(wide, [Layout("gather", n, d, tiled=tiled) for d in dims], bucket_bytes)
    return treedef.unflatten(typed_as_lax(narrowed(out, leaves), leaves, axis, lambda leaf:
                                          references.allgather(leaf, axis, gather_dim(
                                              "allgather", leaf.shape, dim, tiled), tiled,
                                              groups, to)))


def alltoall(x, axis, *, split_dim: int, concat_dim: int, tiled: bool = False,
             algorithm: str = "auto", bucket_bytes: int | None = BUCKET_BYTES,
             axis_index_groups=None, executor="xla"):
    """Rank i's block j (along ``split_dim``) goes to rank j, at place i along ``concat_dim``.

    ``lax.all_to_all(x, axis, split_dim, concat_dim, tiled=tiled)``. Blocks as in
    :func:`reduce_scatter`: ``tiled=False`` needs x.shape[split_dim] == n, drops that
    dimension and stacks the n received blocks as a new one at ``concat_dim``.
    Cost, naive (pairwise): (n-1)α + (n-1)/n·Nβ; bruck: ceil(log2 n)α + about
    ceil(log2 n)/2·Nβ.

    Args:
      x: an array or a pytree of arrays (a number counts as a 0-d array), this rank's
        block.
      axis: the axis name it runs over, bound by ``jax.shard_map`` (a mesh axis) or by
        ``jax.vmap(..., axis_name=...)``; or a tuple (or list) of names, ranks row-major.
      split_dim: the dimension of each leaf split into n blocks, block j for rank j;
        keyword-only, required.
      concat_dim: where the n received blocks go, in the senders' order (an index into the
        result); keyword-only, required.
      tiled: False (default): ``split_dim``'s size must be n, dropped, and the blocks are
        stacked along a new ``concat_dim``; True: a multiple of n, concatenated.
      algorithm: ``"auto"`` (default: the cost model's fastest for each bucket), ``"xla"``
        (lax's built-in), a name from ``algorithms("alltoall")``, or a
        :class:`~jaxcoll.Schedule` from :func:`schedule` for it, on this many ranks.
      bucket_bytes: the most bytes of ``x`` one collective carries (default
        ``BUCKET_BYTES``, 25 MiB): a pytree's leaves are packed into buckets of at most this
        many, one collective each; None: one bucket per dtype. ``"xla"`` ignores it.
      axis_index_groups: lax's groups: lists of ranks of ``axis``, of one size, that hold
        each rank once; each group runs the collective on its own (None: the whole axis).
      executor: how a schedule runs: ``"xla"`` (default: XLA collective-permutes),
        ``"pallas"`` or a :class:`~jaxcoll.Pallas` (one Pallas TPU kernel).

    Returns:
      The blocks the ranks (of this rank's group) sent to this one, with ``x``'s structure
      and dtypes: ``tiled``, each leaf's shape kept but for ``split_dim`` (n times shorter)
      and ``concat_dim`` (n times longer).

    Raises:
      ValueError: if ``algorithm`` or ``executor`` is not one of those allowed (a schedule
        for another collective or rank count included); ``bucket_bytes`` < 1;
        ``axis_index_groups`` that are not groups of one size holding every rank once;
        ``"hierarchical"`` on an axis that is not a tuple of names, or with groups;
        ``algorithm="xla"`` with ``executor="pallas"``;
        ``split_dim`` or ``concat_dim`` out of range, a 0-d leaf, or ``split_dim``'s size
        not n (``tiled=False``) or not a multiple of it (``tiled=True``).
      TypeError: if a leaf of ``x`` is not an array or a number of a numeric dtype;
        ``axis`` is not a name or a tuple of names; ``bucket_bytes`` is not an int;
        ``split_dim`` or ``concat_dim`` is not an int, or ``tiled`` not a bool.
      NameError: if ``axis`` is not bound here: a misspelt name, or a call outside
        ``jax.shard_map`` and ``jax.vmap`` (JAX's words first: "unbound axis name").
      ScheduleError: a ``ValueError``: a :class:`~jaxcoll.Schedule` given as
        ``algorithm`` does not do what alltoall promises.

    Examples:
      Each of 4 ranks holds 4 values, one for each rank; rank j gets value j of every rank
      (a transpose; ``[None]`` makes each rank's result a row):

      >>> import jax, jaxcoll, numpy as np
      >>> from jax.sharding import Mesh, PartitionSpec as P
      >>> mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
      >>> f = jax.shard_map(
      ...     lambda x: jaxcoll.alltoall(x, "i", split_dim=0, concat_dim=0)[None],
      ...     mesh=mesh, in_specs=P("i"), out_specs=P("i"))
      >>> print(np.asarray(f(np.arange(16))))  # rank i holds 4i .. 4i + 3
      [[ 0  4  8 12]
       [ 1  5  9 13]
       [ 2  6 10 14]
       [ 3  7 11 15]]
    """
    if ran := local_shards("alltoall", alltoall, locals()):
        return ran[0]
    if (algorithm != "xla" and _several_vmap_axes(axis) and axis_index_groups is None
            and not isinstance(algorithm, Schedule)):
        return _alltoall_axis_by_axis(x, axis, split_dim, concat_dim, tiled, algorithm,
                                      bucket_bytes, executor)
    algorithm, n, _, leaves, treedef, groups = _arguments(
        "alltoall", x, axis, algorithm, bucket_bytes, groups=axis_index_groups,
        executor=executor)
    dims = [alltoall_dims(leaf.shape, split_dim, concat_dim, tiled, n) for leaf in leaves]
    if algorithm == "xla":
        return treedef.unflatten(in_sequence(lambda leaf, d: references.alltoall(
            leaf, axis, d, tiled, groups), leaves, dims))

    run = _runner("alltoall", algorithm, n, axis, groups=groups, executor=executor)
    out = run(leaves, [Layout("exchange", n, split, concat, tiled) for split, concat in dims],
              bucket_bytes)
    return treedef.unflatten(typed_as_lax(out, leaves, axis, lambda leaf: references.alltoall(
        leaf, axis, alltoall_dims(leaf.shape, split_dim, concat_dim, tiled, n), tiled, groups)))


def _alltoall_axis_by_axis(x, axis: tuple, split_dim: int, concat_dim: int, tiled: bool,
                           algorithm: str, bucket_bytes, executor):
    """alltoall over several vmap axes (JAX's ppermute under vmap takes one name), one axis
    after the other: rank (r_0, ..., r_k-1) of the tuple (row-major, as lax numbers it) sends
    block (b_0, ..., b_k-1) to rank (b_0, ...); exchanging index m over axis m, for every m,
    leaves index m naming the sender's r_m: the blocks in the senders' order."""
    sizes = [axis_size("alltoall", name) for name in axis]
    n = int(np.prod(sizes))
    _arguments("alltoall", x, axis[0], algorithm, bucket_bytes,  # the checks, on one axis
               executor=executor)
    leaves, treedef = array_leaves("alltoall", x)
    out = []
    for leaf in leaves:
        layout = Layout("exchange", n, *alltoall_dims(leaf.shape, split_dim, concat_dim, tiled,
                                                      n), tiled)
        rows = layout.to_rows(leaf)  # (n, block size): block b in row b
        blocks = rows.reshape(*sizes, rows.shape[1])  # (s_0, ..., s_k-1, block size)
        for m, name in enumerate(axis):
            blocks = alltoall(blocks, name, split_dim=m, concat_dim=m, algorithm=algorithm,
                              bucket_bytes=bucket_bytes, executor=executor)
        out.append(layout.from_rows(blocks.reshape(rows.shape), leaf.shape))
    return treedef.unflatten(out)


def broadcast(x, axis, *, root: int = 0, algorithm: str = "auto",
              bucket_bytes: int | None = BUCKET_BYTES, axis_index_groups=None,
              executor="xla"):
    """Every rank gets rank ``root``'s ``x``.

    Cost, naive: (n-1)(α + Nβ); binomial: ceil(log2 n)(α + Nβ); tree: up to 2 floor(log2 n)
    (α + Nβ); scatter_allgather: (ceil(log2 n) + n - 1)α + about 2(n-1)/n·Nβ.
    ``xla`` is a reference built from ``lax.all_gather``: it moves n times the data.

    Args:
      x: an array or a pytree of arrays (a number counts as a 0-d array): rank ``root``'s
        is sent, the others' only give the result's structure, shapes and dtypes.
      axis: the axis name it runs over, bound by ``jax.shard_map`` (a mesh axis) or by
        ``jax.vmap(..., axis_name=...)``; or a tuple (or list) of names, ranks row-major.
      root: the root rank, a Python int in ``0..n-1`` (an index within each group, with
        ``axis_index_groups``); default 0.
      algorithm: ``"auto"`` (default: the cost model's fastest for each bucket), ``"xla"``
        (lax's built-in), a name from ``algorithms("broadcast")``, or a
        :class:`~jaxcoll.Schedule` from :func:`schedule` for it, on this many ranks.
      bucket_bytes: the most bytes of ``x`` one collective carries (default
        ``BUCKET_BYTES``, 25 MiB): a pytree's leaves are packed into buckets of at most this
        many, one collective each; None: one bucket per dtype. ``"xla"`` ignores it.
      axis_index_groups: lax's groups: lists of ranks of ``axis``, of one size, that hold
        each rank once; each group runs the collective on its own (None: the whole axis).
      executor: how a schedule runs: ``"xla"`` (default: XLA collective-permutes),
        ``"pallas"`` or a :class:`~jaxcoll.Pallas` (one Pallas TPU kernel).

    Returns:
      Rank ``root``'s ``x`` (of this rank's group's root), on every rank, with ``x``'s
      structure, shapes and dtypes.

    Raises:
      ValueError: if ``algorithm`` or ``executor`` is not one of those allowed (a schedule
        for another collective, rank count or root included); ``bucket_bytes`` < 1;
        ``axis_index_groups`` that are not groups of one size holding every rank once;
        ``"hierarchical"`` on an axis that is not a tuple of names, or with groups;
        ``algorithm="xla"`` with ``executor="pallas"``;
        ``root`` outside ``0..n-1`` (n: a group's size, with groups).
      TypeError: if a leaf of ``x`` is not an array or a number of a numeric dtype;
        ``axis`` is not a name or a tuple of names; ``bucket_bytes`` is not an int;
        ``root`` is not a Python int (a float, a bool, a traced value).
      NameError: if ``axis`` is not bound here: a misspelt name, or a call outside
        ``jax.shard_map`` and ``jax.vmap`` (JAX's words first: "unbound axis name").
      ScheduleError: a ``ValueError``: a :class:`~jaxcoll.Schedule` given as
        ``algorithm`` does not do what broadcast promises.

    Examples:
      Rank 2's two values reach the 4 ranks by a binomial tree, in ceil(log2 4) = 2 rounds
      (``[None]`` makes each rank's result a row of what is printed):

      >>> import jax, jaxcoll, numpy as np
      >>> from jax.sharding import Mesh, PartitionSpec as P
      >>> mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
      >>> f = jax.shard_map(
      ...     lambda x: jaxcoll.broadcast(x, "i", root=2, algorithm="binomial")[None],
      ...     mesh=mesh, in_specs=P("i"), out_specs=P("i"))
      >>> print(np.asarray(f(np.arange(8))))  # rank i holds 2i, 2i + 1
      [[4 5]
       [4 5]
       [4 5]
       [4 5]]

      The algorithms a broadcast can run:

      >>> jaxcoll.algorithms("broadcast")
      ('auto', 'xla', 'binomial', 'chain', 'naive', 'scatter_allgather', 'tree')
    """
    if ran := local_shards("broadcast", broadcast, locals()):
        return ran[0]
    algorithm, n, root, leaves, treedef, groups = _arguments(
        "broadcast", x, axis, algorithm, bucket_bytes, root=root, groups=axis_index_groups,
        executor=executor)
    if algorithm == "xla":
        return treedef.unflatten(in_sequence(
            lambda leaf: references.broadcast(leaf, axis, root, groups), leaves))

    run = _runner("broadcast", algorithm, n, axis, root=root, groups=groups, executor=executor)
    return treedef.unflatten(run(leaves, whole(leaves, n), bucket_bytes))


def reduce(x, axis, *, root: int = 0, op: str = "sum", algorithm: str = "auto",
           bucket_bytes: int | None = BUCKET_BYTES, accum_dtype=None, axis_index_groups=None,
           executor="xla"):
    """Rank ``root`` gets ``allreduce(x, axis, op=op)``; the other ranks get zeros.

    Cost, naive: (n-1)(α + Nβ + Nγ); binomial: ceil(log2 n)(α + Nβ + Nγ);
    reduce_scatter_gather: (n - 1 + ceil(log2 n))α + about 2(n-1)/n·Nβ + (n-1)/n·Nγ.

    Args:
      x: an array or a pytree of arrays (a number counts as a 0-d array), this rank's
        block.
      axis: the axis name it runs over, bound by ``jax.shard_map`` (a mesh axis) or by
        ``jax.vmap(..., axis_name=...)``; or a tuple (or list) of names, ranks row-major.
      root: the root rank, a Python int in ``0..n-1`` (an index within each group, with
        ``axis_index_groups``); default 0.
      op: the reduction: ``"sum"`` (default), ``"mean"``, ``"max"`` or
        ``"min"``.
      algorithm: ``"auto"`` (default: the cost model's fastest for each bucket), ``"xla"``
        (lax's built-in), a name from ``algorithms("reduce")``, or a
        :class:`~jaxcoll.Schedule` from :func:`schedule` for it, on this many ranks.
      bucket_bytes: the most bytes of ``x`` one collective carries (default
        ``BUCKET_BYTES``, 25 MiB): a pytree's leaves are packed into buckets of at most this
        many, one collective each; None: one bucket per dtype. ``"xla"`` ignores it.
      accum_dtype: a dtype every leaf is cast to, reduced (and, for ``"mean"``, divided)
        in, and cast back from, ``"xla"`` included; None (default): each leaf's own.
      axis_index_groups: lax's groups: lists of ranks of ``axis``, of one size, that hold
        each rank once; each group runs the collective on its own (None: the whole axis).
      executor: how a schedule runs: ``"xla"`` (default: XLA collective-permutes),
        ``"pallas"`` or a :class:`~jaxcoll.Pallas` (one Pallas TPU kernel).

    Returns:
      On rank ``root`` (of each group), ``op`` of ``x`` over the ranks; zeros on the
      others; with ``x``'s structure, shapes and dtypes.

    Raises:
      ValueError: if ``algorithm`` or ``executor`` is not one of those allowed (a schedule
        for another collective, rank count or root included); ``bucket_bytes`` < 1;
        ``axis_index_groups`` that are not groups of one size holding every rank once;
        ``"hierarchical"`` on an axis that is not a tuple of names, or with groups;
        ``algorithm="xla"`` with ``executor="pallas"``;
        ``op`` not one of ``OPS``; ``root`` outside ``0..n-1`` (n: a group's size, with
        groups).
      TypeError: if a leaf of ``x`` is not an array or a number of a numeric dtype;
        ``axis`` is not a name or a tuple of names; ``bucket_bytes`` is not an int;
        ``root`` is not a Python int; a leaf of dtype bool; ``op="mean"`` of integers or
        ``"max"``/``"min"`` of complex numbers; ``accum_dtype`` is not a numeric dtype, or
        is narrower than a leaf.
      NameError: if ``axis`` is not bound here: a misspelt name, or a call outside
        ``jax.shard_map`` and ``jax.vmap`` (JAX's words first: "unbound axis name").
      ScheduleError: a ``ValueError``: a :class:`~jaxcoll.Schedule` given as
        ``algorithm`` does not do what reduce promises.

    Examples:
      Rank 1 gets the sum of the 4 ranks' two values; the others get zeros (``[None]``
      makes each rank's result a row of what is printed):

      >>> import jax, jaxcoll, numpy as np
      >>> from jax.sharding import Mesh, PartitionSpec as P
      >>> mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
      >>> f = jax.shard_map(lambda x: jaxcoll.reduce(x, "i", root=1)[None],
      ...                   mesh=mesh, in_specs=P("i"), out_specs=P("i"))
      >>> print(np.asarray(f(np.arange(8))))  # rank i holds 2i, 2i + 1
      [[ 0  0]
       [12 16]
       [ 0  0]
       [ 0  0]]
    """
    if ran := local_shards("reduce", reduce, locals()):
        return ran[0]
    algorithm, n, root, leaves, treedef, groups = _arguments(
        "reduce", x, axis, algorithm, bucket_bytes, op=op, root=root, groups=axis_index_groups,
        executor=executor)
    wide = widened("reduce", leaves, accum_dtype)
    if algorithm == "xla":
        reduced = in_sequence(lambda leaf: references.allreduce(leaf, axis, op, groups), wide)
        out = references.on_root(reduced, axis, root, groups)
    else:  # zeros off the root
        run = _runner("reduce", algorithm, n, axis, op, root, groups=groups, executor=executor)
        out = mean(run(wide, whole(wide, n), bucket_bytes), op, n)
    return treedef.unflatten(narrowed(out, leaves))


def gather(x, axis, *, root: int = 0, dim: int = 0, tiled: bool = False,
           algorithm: str = "auto", bucket_bytes: int | None = BUCKET_BYTES,
           axis_index_groups=None, executor="xla"):
    """Rank ``root`` gets ``allgather(x, axis, dim=dim, tiled=tiled)``; the others get zeros.

    Cost, naive: (n-1)(α + Nβ); binomial: ceil(log2 n)α + (n-1)·Nβ (N = bytes of ``x``).

    Args:
      x: an array or a pytree of arrays (a number counts as a 0-d array), this rank's
        block.
      axis: the axis name it runs over, bound by ``jax.shard_map`` (a mesh axis) or by
        ``jax.vmap(..., axis_name=...)``; or a tuple (or list) of names, ranks row-major.
      root: the root rank, a Python int in ``0..n-1`` (an index within each group, with
        ``axis_index_groups``); default 0.
      dim: where the n blocks go, in rank order: a new dimension they are stacked along,
        or (``tiled``) the existing one they are concatenated along; default 0.
      tiled: False (default): stack the n blocks along a new dimension ``dim``; True:
        concatenate them along ``dim``.
      algorithm: ``"auto"`` (default: the cost model's fastest for each bucket), ``"xla"``
        (lax's built-in), a name from ``algorithms("gather")``, or a
        :class:`~jaxcoll.Schedule` from :func:`schedule` for it, on this many ranks.
      bucket_bytes: the most bytes of ``x`` one collective carries (default
        ``BUCKET_BYTES``, 25 MiB): a pytree's leaves are packed into buckets of at most this
        many, one collective each; None: one bucket per dtype. ``"xla"`` ignores it.
      axis_index_groups: lax's groups: lists of ranks of ``axis``, of one size, that hold
        each rank once; each group runs the collective on its own (None: the whole axis).
      executor: how a schedule runs: ``"xla"`` (default: XLA collective-permutes),
        ``"pallas"`` or a :class:`~jaxcoll.Pallas` (one Pallas TPU kernel).

    Returns:
      On rank ``root`` (of each group), the ranks' ``x`` in rank order, as
      :func:`allgather` gives them; zeros of that shape on the others.

    Raises:
      ValueError: if ``algorithm`` or ``executor`` is not one of those allowed (a schedule
        for another collective, rank count or root included); ``bucket_bytes`` < 1;
        ``axis_index_groups`` that are not groups of one size holding every rank once;
        ``"hierarchical"`` on an axis that is not a tuple of names, or with groups;
        ``algorithm="xla"`` with ``executor="pallas"``;
        ``root`` outside ``0..n-1`` (n: a group's size, with groups); ``dim`` out of
        range, or ``tiled`` with a 0-d leaf.
      TypeError: if a leaf of ``x`` is not an array or a number of a numeric dtype;
        ``axis`` is not a name or a tuple of names; ``bucket_bytes`` is not an int;
        ``root`` or ``dim`` is not a Python int, or ``tiled`` not a bool.
      NameError: if ``axis`` is not bound here: a misspelt name, or a call outside
        ``jax.shard_map`` and ``jax.vmap`` (JAX's words first: "unbound axis name").
      ScheduleError: a ``ValueError``: a :class:`~jaxcoll.Schedule` given as
        ``algorithm`` does not do what gather promises.

    Examples:
      Rank 0 gets the 4 ranks' two values each, concatenated; the others get zeros
      (``[None]`` makes each rank's result a row of what is printed):

      >>> import jax, jaxcoll, numpy as np
      >>> from jax.sharding import Mesh, PartitionSpec as P
      >>> mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
      >>> f = jax.shard_map(lambda x: jaxcoll.gather(x, "i", tiled=True)[None],
      ...                   mesh=mesh, in_specs=P("i"), out_specs=P("i"))
      >>> print(np.asarray(f(np.arange(8))))
      [[0 1 2 3 4 5 6 7]
       [0 0 0 0 0 0 0 0]
       [0 0 0 0 0 0 0 0]
       [0 0 0 0 0 0 0 0]]
    """
    if ran := local_shards("gather", gather, locals()):
        return ran[0]
    algorithm, n, root, leaves, treedef, groups = _arguments(
        "gather", x, axis, algorithm, bucket_bytes, root=root, groups=axis_index_groups,
        executor=executor)
    dims = [gather_dim("gather", leaf.shape, dim, tiled) for leaf in leaves]
    if algorithm == "xla":
        gathered = in_sequence(lambda leaf, d: references.allgather(leaf, axis, d, tiled, groups),
                               leaves, dims)
        return treedef.unflatten(references.on_root(gathered, axis, root, groups))

    run = _runner("gather", algorithm, n, axis, root=root, groups=groups,  # zeros off the root
                  executor=executor)
    return treedef.unflatten(run(leaves, [Layout("gather", n, d, tiled=tiled) for d in dims],
                                 bucket_bytes))


def scatter(x, axis, *, root: int = 0, dim: int = 0, tiled: bool = False,
            algorithm: str = "auto", bucket_bytes: int | None = BUCKET_BYTES,
            axis_index_groups=None, executor="xla"):
    """Rank i gets block i (along ``dim``) of rank ``root``'s ``x``; other ranks' ``x`` is unused.

    Blocks as in :func:`reduce_scatter`: ``tiled=False`` needs x.shape[dim] == n and drops dim.
    Cost, naive: (n-1)(α + N/n·β); binomial: ceil(log2 n)α + (n-1)/n·Nβ.

    Args:
      x: an array or a pytree of arrays (a number counts as a 0-d array): rank ``root``'s
        is split and sent, the others' only give the result's structure and shapes.
      axis: the axis name it runs over, bound by ``jax.shard_map`` (a mesh axis) or by
        ``jax.vmap(..., axis_name=...)``; or a tuple (or list) of names, ranks row-major.
      root: the root rank, a Python int in ``0..n-1`` (an index within each group, with
        ``axis_index_groups``); default 0.
      dim: the dimension of each leaf split into n blocks, block i for rank i
        (default 0).
      tiled: False (default): ``dim``'s size must be n, and the result drops it; True: a
        multiple of n, and the result keeps it, n times shorter.
      algorithm: ``"auto"`` (default: the cost model's fastest for each bucket), ``"xla"``
        (lax's built-in), a name from ``algorithms("scatter")``, or a
        :class:`~jaxcoll.Schedule` from :func:`schedule` for it, on this many ranks.
      bucket_bytes: the most bytes of ``x`` one collective carries (default
        ``BUCKET_BYTES``, 25 MiB): a pytree's leaves are packed into buckets of at most this
        many, one collective each; None: one bucket per dtype. ``"xla"`` ignores it.
      axis_index_groups: lax's groups: lists of ranks of ``axis``, of one size, that hold
        each rank once; each group runs the collective on its own (None: the whole axis).
      executor: how a schedule runs: ``"xla"`` (default: XLA collective-permutes),
        ``"pallas"`` or a :class:`~jaxcoll.Pallas` (one Pallas TPU kernel).

    Returns:
      Block i of rank ``root``'s ``x`` on rank i (of each group), with ``x``'s structure
      and dtypes: each leaf's ``dim`` dropped (``tiled=False``) or n times shorter.

    Raises:
      ValueError: if ``algorithm`` or ``executor`` is not one of those allowed (a schedule
        for another collective, rank count or root included); ``bucket_bytes`` < 1;
        ``axis_index_groups`` that are not groups of one size holding every rank once;
        ``"hierarchical"`` on an axis that is not a tuple of names, or with groups;
        ``algorithm="xla"`` with ``executor="pallas"``;
        ``root`` outside ``0..n-1`` (n: a group's size, with groups); ``dim`` out of
        range, a 0-d leaf, or ``dim``'s size not n (``tiled=False``) or not a multiple of
        it (``tiled=True``).
      TypeError: if a leaf of ``x`` is not an array or a number of a numeric dtype;
        ``axis`` is not a name or a tuple of names; ``bucket_bytes`` is not an int;
        ``root`` or ``dim`` is not a Python int, or ``tiled`` not a bool.
      NameError: if ``axis`` is not bound here: a misspelt name, or a call outside
        ``jax.shard_map`` and ``jax.vmap`` (JAX's words first: "unbound axis name").
      ScheduleError: a ``ValueError``: a :class:`~jaxcoll.Schedule` given as
        ``algorithm`` does not do what scatter promises.

    Examples:
      Rank 3's four values, one to each of the 4 ranks:

      >>> import jax, jaxcoll, numpy as np
      >>> from jax.sharding import Mesh, PartitionSpec as P
      >>> mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
      >>> f = jax.shard_map(lambda x: jaxcoll.scatter(x, "i", root=3, tiled=True),
      ...                   mesh=mesh, in_specs=P("i"), out_specs=P("i"))
      >>> print(np.asarray(f(np.arange(16))))  # rank 3 holds 12 .. 15
      [12 13 14 15]
    """
    if ran := local_shards("scatter", scatter, locals()):
        return ran[0]
    algorithm, n, root, leaves, treedef, groups = _arguments(
        "scatter", x, axis, algorithm, bucket_bytes, root=root, groups=axis_index_groups,
        executor=executor)
    dims = [scatter_dim("scatter", leaf.shape, dim, tiled, n) for leaf in leaves]
    if algorithm == "xla":
        return treedef.unflatten(in_sequence(lambda leaf, d: references.my_block_of(
            references.broadcast(leaf, axis, root, groups), axis, d, tiled, n, groups), leaves,
            dims))

    run = _runner("scatter", algorithm, n, axis, root=root, groups=groups, executor=executor)
    return treedef.unflatten(run(leaves, [Layout("scatter", n, d, tiled=tiled) for d in dims],
                                 bucket_bytes))


# ----------------------------------------------------------------------------- shortcuts

def ring_allreduce(x, axis, *, op: str = "sum", bucket_bytes: int | None = BUCKET_BYTES,
                   accum_dtype=None, compress=None, executor="xla"):
    """``allreduce(x, axis, op=op, algorithm="ring", ...)``.

    Cost: 2(n-1)α + 2(n-1)/n·Nβ + (n-1)/n·Nγ.

    Args:
      x: an array or a pytree of arrays, this rank's block, as
        :func:`allreduce` takes it.
      axis: the axis name (or tuple of names) it runs over, bound by
        ``jax.shard_map`` or ``jax.vmap``.
      op: ``"sum"`` (default), ``"mean"``, ``"max"`` or ``"min"``, as
        :func:`allreduce`'s.
      bucket_bytes, accum_dtype, compress, executor: as :func:`allreduce`'s (defaults
        ``BUCKET_BYTES``, None, None, ``"xla"``).

    Returns:
      ``op`` of ``x`` over the ranks of ``axis``, on every rank, as :func:`allreduce`
      returns it.
    """
    return allreduce(x, axis, op=op, algorithm="ring", bucket_bytes=bucket_bytes,
                     accum_dtype=accum_dtype, compress=compress, executor=executor)


def ring_reduce_scatter(x, axis, *, op: str = "sum", dim: int = 0, tiled: bool = False,
                        bucket_bytes: int | None = BUCKET_BYTES, accum_dtype=None,
                        compress=None, executor="xla"):
    """``reduce_scatter(x, axis, op=op, dim=dim, tiled=tiled, algorithm="ring", ...)``.

    Cost: (n-1)α + (n-1)/n·Nβ + (n-1)/n·Nγ.

    Args:
      x: an array or a pytree of arrays, this rank's block, as
        :func:`reduce_scatter` takes it.
      axis: the axis name (or tuple of names) it runs over, bound by
        ``jax.shard_map`` or ``jax.vmap``.
      op: ``"sum"`` (default), ``"mean"``, ``"max"`` or ``"min"``, as
        :func:`reduce_scatter`'s.
      dim, tiled: the dimension split into n blocks, and whether it is kept (n times
        shorter) or dropped, as :func:`reduce_scatter`'s (defaults 0, False).
      bucket_bytes, accum_dtype, compress, executor: as :func:`reduce_scatter`'s
        (defaults ``BUCKET_BYTES``, None, None, ``"xla"``).

    Returns:
      This rank's block of ``op`` of ``x`` over the ranks, as :func:`reduce_scatter`
      returns it.
    """
    return reduce_scatter(x, axis, op=op, dim=dim, tiled=tiled, algorithm="ring",
                          bucket_bytes=bucket_bytes, accum_dtype=accum_dtype, compress=compress,
                          executor=executor)


def ring_allgather(x, axis, *, dim: int = 0, tiled: bool = False,
                   bucket_bytes: int | None = BUCKET_BYTES, compress=None, executor="xla"):
    """``allgather(x, axis, dim=dim, tiled=tiled, algorithm="ring", ...)``.

    Cost: (n-1)α + (n-1)·Nβ (N = bytes of ``x``).

    Args:
      x: an array or a pytree of arrays, this rank's block, as
        :func:`allgather` takes it.
      axis: the axis name (or tuple of names) it runs over, bound by
        ``jax.shard_map`` or ``jax.vmap``.
      dim, tiled: where the blocks are stacked or (``tiled``) concatenated, as
        :func:`allgather`'s (defaults 0, False).
      bucket_bytes, compress, executor: as :func:`allgather`'s (defaults
        ``BUCKET_BYTES``, None, ``"xla"``).

    Returns:
      Every rank's ``x``, in rank order, as :func:`allgather` returns
      them.
    """
    return allgather(x, axis, dim=dim, tiled=tiled, algorithm="ring", bucket_bytes=bucket_bytes,
                     compress=compress, executor=executor)


def tree_allreduce(x, axis, *, op: str = "sum", bucket_bytes: int | None = BUCKET_BYTES,
                   accum_dtype=None, compress=None, executor="xla"):
    """``allreduce(x, axis, op=op, algorithm="tree", ...)``.

    Cost (p pieces, M <= 4(floor(log2 n) + p - 1) messages): M(α + Nβ/p) + M/2·Nγ/p.

    Args:
      x: an array or a pytree of arrays, this rank's block, as
        :func:`allreduce` takes it.
      axis: the axis name (or tuple of names) it runs over, bound by
        ``jax.shard_map`` or ``jax.vmap``.
      op: ``"sum"`` (default), ``"mean"``, ``"max"`` or ``"min"``, as
        :func:`allreduce`'s.
      bucket_bytes, accum_dtype, compress, executor: as :func:`allreduce`'s (defaults
        ``BUCKET_BYTES``, None, None, ``"xla"``).

    Returns:
      ``op`` of ``x`` over the ranks of ``axis``, on every rank, as :func:`allreduce`
      returns it.
    """
    return allreduce(x, axis, op=op, algorithm="tree", bucket_bytes=bucket_bytes,
                     accum_dtype=accum_dtype, compress=compress, executor=executor)


def tree_broadcast(x, axis, *, root: int = 0, bucket_bytes: int | None = BUCKET_BYTES,
                   executor="xla"):
    """``broadcast(x, axis, root=root, algorithm="tree", ...)``.

    Cost: up to 2 floor(log2 n)(α + Nβ).

    Args:
      x: an array or a pytree of arrays, this rank's block, as
        :func:`broadcast` takes it.
      axis: the axis name (or tuple of names) it runs over, bound by
        ``jax.shard_map`` or ``jax.vmap``.
      root: the rank whose ``x`` every rank gets, a Python int in ``0..n-1``
        (default 0).
      bucket_bytes, executor: as :func:`broadcast`'s (defaults ``BUCKET_BYTES``,
        ``"xla"``).

    Returns:
      Rank ``root``'s ``x`` on every rank, as :func:`broadcast` returns
      it.
    """
    return broadcast(x, axis, root=root, algorithm="tree", bucket_bytes=bucket_bytes,
                     executor=executor)
