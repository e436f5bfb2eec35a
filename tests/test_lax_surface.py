"""lax's whole collective surface: ``jaxcoll.lax`` (lax's names and signatures) and
``axis_index_groups``, against jax.lax itself."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax as jax_lax
from jax.sharding import PartitionSpec as P

import jaxcoll
from jaxcoll import lax as coll_lax
from jaxcoll.ir.families import SCHEDULES

from helpers import AXIS, assert_same, count_permutes, exact_inputs, mesh

N = 8
GROUPS = {
    "strided": [[0, 2, 4, 6], [1, 3, 5, 7]],
    "contiguous": [[0, 1, 2, 3], [4, 5, 6, 7]],
    "permuted": [[3, 1, 5, 7], [0, 6, 4, 2]],  # a group's order is its ranks' numbering
}


def _lax_program(lax):
    """A shard_map body written against ``lax`` (jax.lax or jaxcoll.lax), unchanged."""
    def body(b):
        b = b[0]
        results = (lax.psum(b, AXIS), lax.pmean(b, AXIS), lax.pmax(b, AXIS), lax.pmin(b, AXIS),
                   lax.pmean(jnp.arange(3), AXIS), lax.all_gather(b, AXIS, to="invarying"),
                   lax.all_gather(b, AXIS, axis=1, tiled=True),
                   lax.psum_scatter(b, AXIS, scatter_dimension=0, tiled=True),
                   lax.all_to_all(b, AXIS, 0, 1, tiled=True),
                   lax.psum_scatter(b, AXIS, axis_index_groups=GROUPS["permuted"], tiled=True))
        types = [str(jax.typeof(r)) for r in results]
        return results[:6], tuple(r[None] for r in results[6:]), types
    return body


@pytest.mark.parametrize("check_vma", [True, False])
def test_code_written_for_jax_lax_runs_unchanged(check_vma):
    """The same body with ``from jaxcoll import lax``: the same values, dtypes and types."""
    x = exact_inputs(N, (N, 3), jnp.float32)
    seen = {}
    results = {}
    for name, lax in (("jax", jax_lax), ("jaxcoll", coll_lax)):
        def body(b, lax=lax, name=name):
            invariant, varying, seen[name] = _lax_program(lax)(b)
            return invariant, varying
        step = jax.jit(jax.shard_map(body, mesh=mesh(N), in_specs=P(AXIS),
                                     out_specs=((P(),) * 6, (P(AXIS),) * 4),
                                     check_vma=check_vma))
        results[name] = step(x)
    assert seen["jaxcoll"] == seen["jax"]
    for ours, theirs in zip(jax.tree_util.tree_leaves(results["jaxcoll"]),
                            jax.tree_util.tree_leaves(results["jax"])):
        assert_same(ours, theirs)


def test_other_names_are_jax_lax_own():
    assert coll_lax.ppermute is jax_lax.ppermute and coll_lax.axis_index is jax_lax.axis_index
    assert coll_lax.dot_general is jax_lax.dot_general
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        coll_lax.nope  # noqa: B018


def test_algorithm_is_keyword_only_and_reaches_the_schedule():
    """lax's positional arguments are lax's; ``algorithm=`` picks the schedule (HLO evidence:
    collective-permutes only, where lax would compile an all-reduce)."""
    step = jax.jit(jax.shard_map(lambda b: coll_lax.psum(b, AXIS, algorithm="ring"),
                                 mesh=mesh(N), in_specs=P(AXIS), out_specs=P()))
    hlo = step.lower(jnp.ones((N, 4))).compile().as_text()
    assert "collective-permute" in hlo and "all-reduce" not in hlo
    with pytest.raises(TypeError):
        coll_lax.psum(jnp.ones(3), AXIS, None, "ring")  # too many positional arguments


def _grouped(primitive: str, algorithm: str, groups):
    """``primitive`` over AXIS in ``groups``, jaxcoll's (``algorithm``) or lax's (``None``)."""
    if algorithm is None:
        return {"allreduce": lambda b: jax_lax.psum(b, AXIS, axis_index_groups=groups),
                "allgather": lambda b: jax_lax.all_gather(b, AXIS, axis_index_groups=groups),
                "reduce_scatter": lambda b: jax_lax.psum_scatter(
                    b, AXIS, axis_index_groups=groups, tiled=True),
                "alltoall": lambda b: jax_lax.all_to_all(
                    b, AXIS, 0, 0, axis_index_groups=groups, tiled=True)}[primitive]
    kwargs = dict(algorithm=algorithm, axis_index_groups=groups)
    return {"allreduce": lambda b: jaxcoll.allreduce(b, AXIS, **kwargs),
            "allgather": lambda b: jaxcoll.allgather(b, AXIS, **kwargs),
            "reduce_scatter": lambda b: jaxcoll.reduce_scatter(b, AXIS, tiled=True, **kwargs),
            "alltoall": lambda b: jaxcoll.alltoall(b, AXIS, split_dim=0, concat_dim=0,
                                                   tiled=True, **kwargs)}[primitive]


def _per_rank(fn, check_vma=False):
    """jit(shard_map(fn)) over N ranks, every result with a leading rank axis."""
    return jax.jit(jax.shard_map(
        lambda b: jax.tree_util.tree_map(lambda y: y[None], fn(b[0])), mesh=mesh(N),
        in_specs=P(AXIS), out_specs=P(AXIS), check_vma=check_vma))


def _every_algorithm(primitive: str) -> list[str]:
    return sorted(name for name, entry in SCHEDULES[primitive].items() if not entry.two_level)


@pytest.mark.parametrize("primitive", ["allreduce", "allgather", "reduce_scatter", "alltoall"])
def test_axis_index_groups_every_algorithm(primitive):
    """Each group runs the schedule among its members, in the group's order, as lax's groups:
    every algorithm with strided, contiguous and permuted groups."""
    x = exact_inputs(N, (N, 3), jnp.float32)
    cases = [(algorithm, groups) for algorithm in _every_algorithm(primitive)
             for groups in GROUPS]
    out = _per_rank(lambda b: [jnp.stack(pair) for pair in jaxcoll.tools.check.ours_and_reference(
        cases, [b] * len(cases), lambda c, v: _grouped(primitive, c[0], GROUPS[c[1]])(v),
        lambda c, v: _grouped(primitive, None, GROUPS[c[1]])(v))])(x)
    for case, pair in zip(cases, out):  # each (ranks, ours | lax's, ...)
        assert_same(pair[:, 0], pair[:, 1], f"{primitive} {case}")


@pytest.mark.parametrize("primitive, algorithm", [("allreduce", "recursive_doubling"),
                                                  ("allgather", "bruck"),
                                                  ("reduce_scatter", "ring"),
                                                  ("alltoall", "naive")])
def test_axis_index_groups_gradients_match_lax(primitive, algorithm):
    x = exact_inputs(N, (N, 3), jnp.float32)

    def loss(fn):
        return lambda v: jnp.sum(jnp.sin(_per_rank(fn)(v)))
    ours = jax.grad(loss(_grouped(primitive, algorithm, GROUPS["permuted"])))(x)
    theirs = jax.grad(loss(_grouped(primitive, None, GROUPS["permuted"])))(x)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


@pytest.mark.parametrize("primitive", ["allreduce", "allgather", "reduce_scatter", "alltoall",
                                       "broadcast"])
def test_axis_index_groups_under_vmap(primitive):
    """Under vmap(axis_name=...) groups run as under shard_map (lax's groups raise
    NotImplementedError there): the same values, and grad of the vmap equals grad of the
    shard_map; a group's result is mapped (the same within a group, not over the axis)."""
    x = exact_inputs(N, (N, 3), jnp.float32)
    groups = GROUPS["permuted"]
    if primitive == "broadcast":
        def fn(b):
            return jaxcoll.broadcast(b, AXIS, root=1, axis_index_groups=groups)
    else:
        fn = _grouped(primitive, "naive" if primitive == "alltoall" else "ring", groups)
    vmapped = jax.vmap(fn, axis_name=AXIS)
    assert_same(vmapped(x), _per_rank(fn)(x))

    def loss(run):
        return lambda v: jnp.sum(jnp.sin(run(v)))
    np.testing.assert_allclose(jax.grad(loss(vmapped))(x), jax.grad(loss(_per_rank(fn)))(x),
                               rtol=1e-6)


def test_rooted_collectives_take_groups_with_a_root_per_group():
    """A root is a place in each group (lax has no rooted collectives; the xla reference is
    built from lax.all_gather with the same groups)."""
    x = exact_inputs(N, (N, 3), jnp.float32)
    groups = GROUPS["permuted"]
    cases = [("broadcast", "binomial"), ("reduce", "tree"), ("gather", "naive"),
             ("scatter", "binomial")]

    def call(case, algorithm, v):
        primitive, _ = case
        kwargs = dict(root=1, algorithm=algorithm, axis_index_groups=groups)
        if primitive in ("gather", "scatter"):
            kwargs["tiled"] = True
        return getattr(jaxcoll, primitive)(v, AXIS, **kwargs)
    out = _per_rank(lambda b: [jnp.stack(pair) for pair in jaxcoll.tools.check.ours_and_reference(
        cases, [b] * len(cases), lambda c, v: call(c, c[1], v),
        lambda c, v: call(c, "xla", v))])(x)
    for case, pair in zip(cases, out):
        assert_same(pair[:, 0], pair[:, 1], str(case))


def test_groups_under_check_vma_are_typed_varying():
    """A group's result is not the whole axis': typed varying (lax's pmax with groups says
    invariant, and its psum refuses check_vma; docs/sharp_bits.md)."""
    x = exact_inputs(N, (3,), jnp.float32)
    seen = []

    def body(b):
        y = jaxcoll.allreduce(b, AXIS, algorithm="ring", axis_index_groups=GROUPS["strided"])
        seen.append(jax.typeof(y))
        return y
    out = jax.jit(jax.shard_map(body, mesh=mesh(N), in_specs=P(AXIS), out_specs=P(AXIS)))(x)
    assert AXIS in jaxcoll.lowering._compat.varying_axes(seen[0])
    want = np.asarray(x).reshape(4, 2, 3).sum(0)  # strided groups: even and odd ranks
    assert_same(out, np.tile(want, (4, 1)))


def test_allgather_to_invarying_transposes_without_traffic():
    """``to="invarying"``: typed invariant like lax's, and the gradient (check_vma=True) is
    this rank's block of the cotangent, as lax's all_gather_invariant."""
    x = exact_inputs(N, (2,), jnp.float32)

    def loss(gather):
        return lambda v: jnp.sum(jnp.sin(jax.shard_map(
            gather, mesh=mesh(N), in_specs=P(AXIS), out_specs=P())(v))
            * jnp.arange(N * 2).reshape(N, 2))
    ours = jax.jit(jax.grad(loss(lambda b: jaxcoll.allgather(
        b, AXIS, tiled=True, to="invarying", algorithm="ring"))))
    theirs = jax.grad(loss(lambda b: jax_lax.all_gather(b, AXIS, tiled=True, to="invarying")))
    np.testing.assert_allclose(ours(x), theirs(x), rtol=1e-6)
    forward = jax.jit(loss(lambda b: jaxcoll.allgather(b, AXIS, tiled=True, to="invarying",
                                                       algorithm="ring")))
    backward_permutes = count_permutes(ours.lower(x).compile().as_text())
    assert backward_permutes == count_permutes(forward.lower(x).compile().as_text()) > 0


def test_psum_of_a_constant_is_n_times_it_without_communication():
    """lax's idiom ``n = lax.psum(1, axis)`` gives a Python int to loop over, with jaxcoll's
    too (found by JAX's own pmap tests)."""
    def body(b):
        n = coll_lax.psum(1, AXIS, algorithm="ring")
        assert n == jax_lax.psum(1, AXIS) == N and isinstance(n, int)
        return jax_lax.ppermute(b, AXIS, [(i, (i + 1) % n) for i in range(n)])
    x = jnp.arange(float(N))
    out = jax.jit(jax.shard_map(body, mesh=mesh(N), in_specs=P(AXIS), out_specs=P(AXIS)))(x)
    assert_same(out, jnp.roll(x, 1))


@pytest.mark.parametrize("op", ["sum", "mean", "max"])
def test_allreduce_over_two_vmap_axes_is_one_axis_after_the_other(op):
    x = exact_inputs(3, (4, 2), jnp.float32)
    reference = {"sum": jax_lax.psum, "mean": jax_lax.pmean, "max": jax_lax.pmax}[op]

    def nested(reduce):
        return jax.vmap(jax.vmap(lambda v: reduce(v, ("i", "j")), axis_name="j"),
                        axis_name="i")
    ours = nested(lambda v, a: jaxcoll.allreduce(v, a, op=op, algorithm="ring"))(x)
    assert_same(ours, nested(reference)(x))


def test_eager_vmap_of_a_shard_map_over_explicit_axes():
    """A batch sharded over an Explicit axis, vmapped around an eager shard_map over another
    (found by JAX's shard_map tests): as lax's, eager and jitted."""
    from jax.sharding import AxisType
    grid = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2,
                         devices=jax.devices()[:4])
    with jax.set_mesh(grid):
        arr = jax.device_put(jnp.arange(16.0).reshape(2, 8), P("x", "y"))
        for psum in (jax_lax.psum, lambda v, a: coll_lax.psum(v, a, algorithm="ring")):
            f = jax.shard_map(lambda v, psum=psum: psum(v, "y"), in_specs=P("y"),
                              out_specs=P(None))
            assert_same(jax.vmap(f)(arr), jax.jit(jax.vmap(f))(arr))
            assert_same(jax.vmap(f)(arr), np.asarray(arr).reshape(2, 2, 4).sum(1))


@pytest.mark.parametrize("lax", [jax_lax, coll_lax], ids=["jax.lax", "jaxcoll.lax"])
def test_unreduced_inputs_and_reduced_results_as_lax(lax):
    """Partial sums (typed unreduced over the axis) summed by psum (typed invariant; its
    gradient cast to reduced) and psum_scatter (varying; its gradient an all_gather typed
    reduced), and all_gather(to="reduced") back: the values, types and shardings JAX's own
    shard_map tests expect of lax."""
    from jax.sharding import AxisType, NamedSharding
    grid = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,),
                         devices=jax.devices()[:2])
    a, b = np.arange(8.0).reshape(2, 4), np.arange(24.0).reshape(4, 6)
    with jax.set_mesh(grid):
        left, right = jax.device_put(a, P(None, "x")), jax.device_put(b, P("x", None))
        types = {}  # what each body saw first: (input's types, result's types)

        def summed(scatter):
            def body(z):
                out = (lax.psum_scatter(z, "x", tiled=True) if scatter
                       else lax.psum(z, "x"))
                types.setdefault(scatter, (_compat_types(z), _compat_types(out)))
                return out
            return jax.shard_map(body, in_specs=P(unreduced={"x"}),
                                 out_specs=P("x") if scatter else P())

        for scatter in (False, True):
            def f(x, y, scatter=scatter):
                z = jnp.einsum("ab,bc->ac", x, y, out_sharding=P(unreduced={"x"}))
                return summed(scatter)(z).sum()
            assert_same(jax.jit(f)(left, right), np.float32((a @ b).sum()))
            g_left, g_right = jax.jit(jax.grad(f, argnums=(0, 1)))(left, right)
            assert g_left.sharding == NamedSharding(grid, P(None, "x"))
            np.testing.assert_allclose(g_left, np.ones((2, 6)) @ b.T)
            np.testing.assert_allclose(g_right, a.T @ np.ones((2, 6)))
        assert types[False] == ((set(), {"x"}, set()), (set(), set(), set()))  # invariant
        assert types[True] == ((set(), {"x"}, set()), ({"x"}, set(), set()))  # varying

        def gathered(v):
            out = lax.all_gather(v, "x", tiled=True, to="reduced")
            types.setdefault("gathered", _compat_types(out))
            return out
        x = jax.device_put(np.arange(4.0), P("x"))
        g = jax.shard_map(gathered, in_specs=P("x"), out_specs=P(reduced={"x"}))
        assert_same(jax.jit(g)(x), np.arange(4.0, dtype=np.float32))
        assert types["gathered"] == (set(), set(), {"x"})
        np.testing.assert_allclose(jax.jit(jax.grad(lambda v: g(v).sum()))(x), np.ones(4))


def _compat_types(value):
    """(varying, unreduced, reduced) axes of a value's type."""
    aval = jax.typeof(value)
    compat = jaxcoll.lowering._compat
    return (set(compat.varying_axes(aval)), set(compat.unreduced_only(aval)),
            set(compat.reduced_only(aval)))


@pytest.mark.parametrize("name", ["psum", "all_gather"])
def test_an_unbound_axis_raises_lax_own_error(name):
    """Word for word (JAX's shard_map tests match psum's sentence)."""
    with pytest.raises(NameError) as theirs:
        jax.jit(lambda v: getattr(jax_lax, name)(v, "nope"))(jnp.ones(3))
    with pytest.raises(NameError) as ours:
        jax.jit(lambda v: getattr(coll_lax, name)(v, "nope", algorithm="ring"))(jnp.ones(3))
    assert str(ours.value).split("\n")[0] == str(theirs.value).split("\n")[0]


def _weak_inputs(b):
    """A Python scalar, a weak value varying over the axis and a strong one."""
    return {"scalar": 3.0, "weak": jax_lax.axis_index(AXIS) * 1.0, "strong": b[0, 0]}


_LAX_CALLS = {
    "psum": lambda lax, v: lax.psum(v, AXIS), "pmean": lambda lax, v: lax.pmean(v, AXIS),
    "pmax": lambda lax, v: lax.pmax(v, AXIS), "pmin": lambda lax, v: lax.pmin(v, AXIS),
    "all_gather": lambda lax, v: lax.all_gather(v, AXIS),
    "psum_scatter": lambda lax, v: lax.psum_scatter(jnp.stack([v] * N), AXIS),
    "all_to_all": lambda lax, v: lax.all_to_all(jnp.stack([v] * N), AXIS, 0, 0),
}


@pytest.mark.parametrize("check_vma", [True, False])
def test_weak_types_are_lax_own(check_vma):
    """A weak input's result is weak exactly where lax's is (lax drops it for pmax and pmin
    under check_vma=False and for all_to_all always), so ``psum(weak) + bf16`` has lax's
    dtype; traced only."""
    seen = {}

    def body(b):
        for name, value in _weak_inputs(b).items():
            for call, fn in _LAX_CALLS.items():
                seen[name, call] = [str(jax.typeof(fn(lax, value) + jnp.ones((), jnp.bfloat16)))
                                    for lax in (jax_lax, coll_lax)]
        return b
    jax.jit(jax.shard_map(body, mesh=mesh(N), in_specs=P(AXIS), out_specs=P(AXIS),
                          check_vma=check_vma)).lower(jnp.zeros((N, 3)))
    differ = {case: types for case, types in seen.items() if types[0] != types[1]}
    assert not differ, differ


def test_lax_axis_forms_and_bools():
    """Valid lax code jaxcoll.lax used to refuse: axis names as a list, the empty tuple (x
    itself, from every collective), pmax and pmin of bools."""
    x = exact_inputs(N, (3,), jnp.float32)

    def body(lax):
        def run(b):
            b = b[0]
            return [r[None] for r in (
                lax.psum(b, [AXIS]), lax.pmax(b > 0, AXIS), lax.pmin(b > 0, AXIS),
                lax.psum(b, ()), lax.all_gather(b, ()), lax.all_to_all(b[None], (), 0, 0)[0],
                lax.psum_scatter(b, ()), lax.pmean(b, ()))]
        return run
    got, want = (jax.jit(jax.shard_map(body(lax), mesh=mesh(N), in_specs=P(AXIS),
                                       out_specs=P(AXIS)))(x) for lax in (coll_lax, jax_lax))
    for ours, theirs in zip(got, want):
        assert_same(ours, theirs)


@pytest.mark.parametrize("axes", [("i", "j"), ("j", "i")])
def test_all_to_all_over_two_vmap_axes_is_lax_own(axes):
    """JAX's batching tests' all_to_all over two vmap axes (the tuple in either order, split
    and concat anywhere, tiled or not): one axis after the other, equal to lax's."""
    for split, concat, tiled, shape in [(0, 1, False, (6, 4)), (1, 0, True, (2, 12))]:
        x = jnp.arange(2 * 3 * 24.0).reshape(2, 3, *shape)  # (i, j, *rank's x)

        def run(lax):
            fn = lambda v: lax.all_to_all(v, axes, split, concat, tiled=tiled)  # noqa: E731
            return jax.vmap(jax.vmap(fn, axis_name="j"), axis_name="i")(x)
        assert_same(run(coll_lax), run(jax_lax), f"{axes} {split} {concat} {tiled}")


def test_uneven_axis_index_groups_of_psum_pmax_pmin():
    """Groups of different sizes, as lax's psum, pmax and pmin take them (JAX's pmap test
    testPsumUnevenReplicaGroups): each size's groups run their schedule, every rank keeps its
    own group's; equal to lax's under shard_map and under vmap. pmean divides by the rank's
    own group's size, where lax divides by the first group's (docs/sharp_bits.md); the other
    collectives take equal groups only, as lax's."""
    groups = [[0, 1], [2, 3, 4, 5, 6, 7]]
    x = exact_inputs(N, (3,), jnp.float32)

    def body(lax, algorithm=None):
        extra = {} if algorithm is None else {"algorithm": algorithm}

        def run(b):
            return [b - lax.psum(b, AXIS, axis_index_groups=groups, **extra),
                    lax.pmax(b, AXIS, axis_index_groups=groups, **extra),
                    lax.pmin(b, AXIS, axis_index_groups=groups, **extra)]
        return run
    want = _per_rank(body(jax_lax))(x)
    for algorithm in ("ring", "recursive_doubling"):
        for ours in (_per_rank(body(coll_lax, algorithm))(x),
                     jax.vmap(body(coll_lax, algorithm), axis_name=AXIS)(x)):
            for got, theirs in zip(ours, want):
                assert_same(got, theirs, algorithm)
    mean = _per_rank(lambda b: coll_lax.pmean(b, AXIS, axis_index_groups=groups))(x)
    np.testing.assert_allclose(mean[:2], np.broadcast_to(x[:2].mean(0), (2, 3)), rtol=1e-6)
    np.testing.assert_allclose(mean[2:], np.broadcast_to(x[2:].mean(0), (6, 3)), rtol=1e-6)
    with pytest.raises(ValueError, match="must be groups of equal size"):
        _per_rank(lambda b: coll_lax.all_gather(b, AXIS, axis_index_groups=groups))(x)


@pytest.mark.parametrize("lax", [jax_lax, coll_lax], ids=["jax.lax", "jaxcoll.lax"])
def test_an_axis_in_two_states_is_refused_as_lax_refuses_it(lax):
    """psum over ("j", "i") of x unreduced over i and varying over j: lax refuses it; jaxcoll
    did run it forward, and its gradient failed on a cotangent type."""
    from jax.sharding import AxisType
    grid = jax.make_mesh((2, 2), ("i", "j"), axis_types=(AxisType.Explicit,) * 2,
                         devices=jax.devices()[:4])
    with jax.set_mesh(grid):
        left = jax.device_put(np.ones((2, 4), np.float32), P("j", "i"))
        right = jax.device_put(np.ones((4, 6), np.float32), P("i", None))

        def f(x, y):
            z = jnp.einsum("ab,bc->ac", x, y, out_sharding=P("j", unreduced={"i"}))
            return jax.shard_map(lambda v: lax.psum(v, ("j", "i")),
                                 in_specs=P("j", unreduced={"i"}), out_specs=P())(z).sum()
        with pytest.raises(ValueError, match="unreduced"):
            jax.jit(f).lower(left, right)
