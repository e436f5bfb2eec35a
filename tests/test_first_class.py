"""Parity with lax in every transformation: each jaxcoll collective is a JAX primitive typed,
transposed and batched like the lax built-in it stands in for (primitives.py)."""

import contextlib
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.ad_checkpoint import print_saved_residuals
from jax.sharding import PartitionSpec as P

import jaxcoll
from jaxcoll.tools.check import call_collective, ours_and_reference
from jaxcoll.ir.families import SCHEDULES, build_schedule
from jaxcoll.ir.symbolic import dual, verify

from helpers import AXIS, assert_same, count_permutes, exact_inputs, mesh, other_collectives

N = 8
# (primitive, a lax expression of what it computes) for the typing comparisons
LAX = {
    "allreduce": lambda x: lax.psum(x, AXIS),
    "reduce_scatter": lambda x: lax.psum_scatter(x, AXIS, tiled=True),
    "allgather": lambda x: lax.all_gather(x, AXIS),
    "alltoall": lambda x: lax.all_to_all(x, AXIS, 0, 0, tiled=True),
}


@pytest.mark.parametrize("primitive", sorted(SCHEDULES))
def test_duals_verify_for_every_schedule(primitive):
    """The transpose of every registered schedule, n = 1..64, is proven to keep the dual
    primitive's promise (a reduce_scatter's dual is an allgather, a broadcast's a reduce)."""
    for algorithm, entry in SCHEDULES[primitive].items():
        for n in range(1, 65):
            if entry.two_level and n % 2:
                continue
            ranks = (2, n // 2) if entry.two_level else n
            for root in sorted({0, n - 1}) if entry.rooted else [0]:
                for pieces in (1, 3) if entry.pipelined and n <= 16 else (1,):
                    schedule = build_schedule(primitive, algorithm, ranks, root, pieces)
                    verify(dual(schedule))


def test_dual_names_the_transposed_primitive():
    ring_rs = build_schedule("reduce_scatter", "ring", 5)
    assert dual(ring_rs).collective == "allgather"
    assert dual(build_schedule("broadcast", "binomial", 6, 2)).collective == "reduce"
    allreduce = build_schedule("allreduce", "ring", 5)
    assert dual(allreduce) is allreduce  # its own transpose


def _typeof_program(fn, check_vma=True):
    """str(jax.typeof(fn(x))) inside a shard_map over N ranks."""
    seen = []

    def body(x):
        y = fn(x)
        seen.append(str(jax.typeof(y)))
        return jnp.zeros((1,))

    jax.eval_shape(jax.shard_map(body, mesh=mesh(N), in_specs=P(AXIS), out_specs=P(AXIS),
                                 check_vma=check_vma), jnp.zeros((N * N, 3)))
    return seen[0]


@pytest.mark.parametrize("primitive", sorted(LAX))
@pytest.mark.parametrize("check_vma", [True, False])
def test_types_match_lax(primitive, check_vma):
    algorithm = "naive" if primitive == "alltoall" else "ring"
    ours = _typeof_program(lambda x: call_collective(primitive, algorithm, x, AXIS), check_vma)
    assert ours == _typeof_program(LAX[primitive], check_vma)


def test_allreduce_of_a_replicated_input_is_typed_like_psum():
    """psum of an invariant value is cast to varying first (n times the value), typed invariant."""
    def body(x):
        w = jnp.ones(3)  # invariant
        return jaxcoll.allreduce(w, AXIS, algorithm="ring"), lax.psum(w, AXIS)

    ours, theirs = jax.jit(jax.shard_map(body, mesh=mesh(N), in_specs=P(AXIS),
                                         out_specs=(P(), P())))(jnp.zeros(N))
    assert_same(ours, theirs)


@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "tree"])
def test_replicated_out_specs_under_check_vma(algorithm):
    """out_specs=P() works with shard_map's default check_vma=True, as with psum."""
    x = exact_inputs(N, (6,), jnp.float32)
    step = jax.jit(jax.shard_map(lambda b: jaxcoll.allreduce(b[0], AXIS, algorithm=algorithm),
                                 mesh=mesh(N), in_specs=P(AXIS), out_specs=P()))
    assert_same(step(x), x.sum(0))


def test_eager_shard_map_can_branch_on_an_allreduce():
    """Un-jitted shard_map: an invariant result is one concrete value (psum's is too)."""
    def body(b):
        total = jaxcoll.allreduce(b, AXIS, algorithm="ring")
        return total if bool(total[0, 0] > 0) else -total

    x = exact_inputs(N, (3,), jnp.float32) + 9  # every entry > 0; (1, 3) per rank
    out = jax.shard_map(body, mesh=mesh(N), in_specs=P(AXIS), out_specs=P())(x)
    assert_same(out, x.sum(0, keepdims=True))


@pytest.mark.parametrize("algorithm", ["ring", "xla"])
def test_vmap_out_axes_none(algorithm):
    """An allreduce under vmap(axis_name=) is unmapped, like psum's."""
    x = exact_inputs(5, (4,), jnp.float32)
    out = jax.vmap(lambda v: jaxcoll.allreduce(v, "b", algorithm=algorithm), axis_name="b",
                   out_axes=None)(x)
    assert_same(out, x.sum(0))


def test_vmap_inside_shard_map_batches_in_one_collective():
    """A vmapped dimension rides along in the buffer: one ring, not one per batch element."""
    x = exact_inputs(N, (3, 5), jnp.float32)
    step = jax.jit(jax.shard_map(
        lambda b: jax.vmap(lambda u: jaxcoll.allreduce(u, AXIS, algorithm="ring"))(b[0]),
        mesh=mesh(N), in_specs=P(AXIS), out_specs=P()))
    assert_same(step(x), x.sum(0))
    assert count_permutes(step.lower(x).compile().as_text()) == 2  # the ring's two loops


def _saved(fn, x) -> list[str]:
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        print_saved_residuals(fn, x)
    return text.getvalue().splitlines()


def test_remat_saves_only_the_input():
    """Under jax.checkpoint nothing of the schedule (chunk-id tables) is saved: as psum."""
    def loss(collective):
        return jax.checkpoint(jax.shard_map(
            lambda v: jnp.sum(jnp.sin(collective(jnp.sin(v)))), mesh=mesh(N),
            in_specs=P(AXIS), out_specs=P()))

    x = jnp.ones((N, 5))
    ours = _saved(loss(lambda v: jaxcoll.allreduce(v, AXIS, algorithm="ring")), x)
    assert ours == _saved(loss(lambda v: lax.psum(v, AXIS)), x)


def test_bool_sum_is_int32_like_psum():
    x = jnp.arange(N * 4).reshape(N, 4) % 3 == 0

    def body(b):
        return jaxcoll.allreduce(b, AXIS, algorithm="ring"), lax.psum(b, AXIS)

    ours, theirs = jax.jit(jax.shard_map(body, mesh=mesh(N), in_specs=P(AXIS),
                                         out_specs=(P(), P())))(x)
    assert_same(ours, theirs)


def test_unbound_axis_is_a_name_error_like_lax():
    """The same class and JAX's own words (what JAX's tests match), then jaxcoll's detail."""
    with pytest.raises(NameError, match="unbound axis name: nope") as lax_error:
        lax.psum(jnp.ones(3), "nope")
    with pytest.raises(NameError, match="unbound axis name: nope. jaxcoll.allreduce: axis="):
        jaxcoll.allreduce(jnp.ones(3), "nope")
    assert "unbound axis name: nope" in str(lax_error.value)


def _every_case():
    """(primitive, algorithm) for every registered pair, and the tuple axis it runs on."""
    return [(p, a) for p in sorted(SCHEDULES) for a in sorted(SCHEDULES[p])]


@pytest.mark.parametrize("order", [("y", "z"), ("z", "y")])
def test_tuple_axes_in_either_order_equal_lax(order):
    """Ranks along a tuple axis are numbered in the tuple's order (lax's), whatever the mesh's
    order: every primitive and algorithm on a 2 x 4 mesh ('y', 'z'), one program."""
    grid = mesh(N, (2, 4), ("y", "z"))
    cases = _every_case()
    xs = [exact_inputs(N, (2 * N,), jnp.float32, seed=i) for i in range(len(cases))]

    def body(*blocks):
        pairs = ours_and_reference(
            cases, [b[0] for b in blocks],
            lambda c, x: call_collective(c[0], c[1], x, order, root=3),
            lambda c, x: call_collective(c[0], "xla", x, order, root=3))
        return [(a[None], b[None]) for a, b in pairs]

    spec = P(("y", "z"))
    program = jax.jit(jax.shard_map(body, mesh=grid, in_specs=spec, out_specs=spec))
    for (primitive, algorithm), (got, want) in zip(cases, program(*xs)):
        assert_same(got, want, f"{primitive} {algorithm} over {order}")


@pytest.mark.parametrize("check_vma", [True, False])
def test_grad_of_replicated_params_equals_lax(check_vma):
    """The README's training step, gradients averaged by jaxcoll or by lax.pmean: the same
    parameters under both check_vma settings."""
    w, batch = jnp.linspace(-1, 1, 3), exact_inputs(N, (3,), jnp.float32)

    def step(mean):
        def body(w, b):
            grad = jax.grad(lambda w: jnp.sum(jnp.sin(w * b[0])))(w)
            return w - 0.1 * mean(grad)
        return jax.jit(jax.shard_map(body, mesh=mesh(N), in_specs=(P(), P(AXIS)),
                                     out_specs=P(), check_vma=check_vma))(w, batch)

    ours = step(lambda g: jaxcoll.ring_allreduce(g, AXIS, op="mean"))
    np.testing.assert_allclose(ours, step(lambda g: lax.pmean(g, AXIS)), rtol=1e-6)


def test_grad_is_one_dual_collective():
    """grad of a ring allreduce under check_vma=False runs the forward ring and one ring for
    the transpose: twice the forward's collective-permutes, nothing else."""
    x = jnp.ones((N, 64))

    def loss(v):
        out = jax.shard_map(lambda b: jaxcoll.ring_allreduce(b, AXIS), mesh=mesh(N),
                            in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False)(v)
        return jnp.sum(jnp.sin(out))

    forward = count_permutes(jax.jit(loss).lower(x).compile().as_text())
    backward = jax.jit(jax.grad(loss)).lower(x).compile().as_text()
    assert count_permutes(backward) == 2 * forward and not other_collectives(backward)


@pytest.mark.parametrize("primitive", ["reduce_scatter", "allgather", "broadcast", "gather"])
def test_transpose_runs_the_dual_primitive(primitive):
    """The jaxpr of a vjp holds the dual primitive (reduce_scatter -> allgather, ...)."""
    algorithm = "binomial" if primitive in ("gather",) else "ring" if primitive != "broadcast" \
        else "tree"
    x = jnp.ones((N * N, 2))  # (N, 2) per rank
    fn = jax.shard_map(lambda b: call_collective(primitive, algorithm, b, AXIS), mesh=mesh(N),
                       in_specs=P(AXIS), out_specs=P(AXIS))
    y, pullback = jax.vjp(fn, x)
    jaxpr = str(jax.make_jaxpr(pullback)(y))
    expected = jaxcoll.ir.records.RECORDS[primitive].dual
    assert f"jaxcoll_{expected}" in jaxpr


def test_max_jvp_shares_ties_evenly():
    """d max: the tangent of the rank(s) holding the maximum, averaged over ties."""
    x = jnp.asarray([[1.0], [3.0], [3.0], [0.0]])
    t = jnp.asarray([[10.0], [20.0], [40.0], [80.0]])
    fn = jax.shard_map(lambda b: jaxcoll.allreduce(b, AXIS, op="max", algorithm="ring"),
                       mesh=mesh(4), in_specs=P(AXIS), out_specs=P())
    y, dy = jax.jvp(fn, (x,), (t,))
    assert_same(y, jnp.asarray([3.0]).reshape(1, 1))
    assert_same(dy, jnp.asarray([30.0]).reshape(1, 1))



def test_unreduced_input_summed_like_lax_and_refused_where_lax_refuses():
    """lax.psum of an unreduced value sums the partials (typed invariant): so does jaxcoll's
    allreduce; an allgather of one is refused by lax (its pvary) and by jaxcoll (its own
    error, before the executor). Gradients: tests/test_lax_surface.py."""
    def body(x):
        unreduced = lax.pcast(x, AXIS, to="unreduced")
        ours = jaxcoll.allreduce(unreduced, AXIS, algorithm="ring")
        theirs = lax.psum(unreduced, AXIS)
        assert str(jax.typeof(ours)) == str(jax.typeof(theirs))
        with pytest.raises(ValueError, match="typed unreduced or reduced over"):
            jaxcoll.allgather(unreduced, AXIS, algorithm="ring")
        return ours, theirs

    ours, theirs = jax.jit(jax.shard_map(body, mesh=mesh(N), in_specs=P(AXIS),
                                         out_specs=(P(), P())))(jnp.arange(float(N)))
    assert_same(ours, theirs)


def _explicit_mesh():
    """A 2 x 2 mesh of Explicit axes ('x', 'y'): a shard_map over 'y' leaves 'x' global, so
    values are typed sharded over 'x' inside it (sharding in types)."""
    return jax.make_mesh((2, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Explicit,) * 2,
                         devices=jax.devices()[:4])


@pytest.mark.parametrize("name", ["allreduce", "allgather", "allgather_tiled", "alltoall"])
def test_dimensions_sharded_over_explicit_axes_equal_lax(name):
    """Leaves sharded over an Explicit axis the shard_map leaves global: jaxcoll runs on the
    local shards (it packs and slices, which sharding in types refuses on sharded dims)."""
    ours, theirs = {
        "allreduce": (lambda v: jaxcoll.allreduce(v, "y", algorithm="ring"),
                      lambda v: lax.psum(v, "y")),
        "allgather": (lambda v: jaxcoll.allgather(v, "y", dim=1, algorithm="ring"),
                      lambda v: lax.all_gather(v, "y", axis=1)),
        "allgather_tiled": (lambda v: jaxcoll.allgather(v, "y", dim=1, tiled=True),
                            lambda v: lax.all_gather(v, "y", axis=1, tiled=True)),
        "alltoall": (lambda v: jaxcoll.alltoall(v, "y", split_dim=1, concat_dim=1, tiled=True),
                     lambda v: lax.all_to_all(v, "y", 1, 1, tiled=True)),
    }[name]
    with jax.set_mesh(_explicit_mesh()):
        x = jax.device_put(jnp.arange(64.0).reshape(4, 16), P("x", "y"))
        got, want = (jax.jit(jax.shard_map(fn, in_specs=P(None, "y"), out_specs=P(None, "y"),
                                           axis_names={"y"}))(x) for fn in (ours, theirs))
        assert got.sharding.spec == want.sharding.spec
        assert_same(got, want)


def test_vmap_over_a_batch_sharded_over_an_explicit_axis():
    """vmap of a shard_map whose batch dimension is sharded over 'x' (JAX's
    test_vmap_shmap_psum): the batch is folded into one collective on each device's shard."""
    with jax.set_mesh(_explicit_mesh()):
        x = jax.device_put(jnp.arange(16.0).reshape(2, 8), P("x", "y"))
        got, want = (jax.jit(jax.vmap(jax.shard_map(fn, in_specs=P("y"), out_specs=P(None))))(x)
                     for fn in (lambda v: jaxcoll.allreduce(v, "y", algorithm="ring"),
                                lambda v: lax.psum(v, "y")))
        assert got.sharding.spec == want.sharding.spec
        assert_same(got, want)


def test_a_split_dimension_sharded_over_an_explicit_axis_is_refused():
    def body(v):  # v: (4@x, 8), dim 0 sharded over 'x'
        with pytest.raises(ValueError, match="dim is sharded over mesh axes x"):
            jaxcoll.reduce_scatter(v, "y", dim=0, tiled=True, algorithm="ring")
        return v

    with jax.set_mesh(_explicit_mesh()):
        x = jax.device_put(jnp.arange(64.0).reshape(4, 16), P("x", "y"))
        jax.jit(jax.shard_map(body, in_specs=P(None, "y"), out_specs=P(None, "y"),
                              axis_names={"y"})).lower(x)
