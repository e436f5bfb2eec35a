"""Pytrees, gradients, jit vs eager, vmap, tuple axes, replication typing, HLO evidence."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import jaxcoll
from helpers import (AXIS, assert_same, count_permutes, exact_inputs, mesh, other_collectives,
                     ours_and_reference, per_rank)
from jaxcoll import Schedule, Transfer
from jaxcoll.lowering.execute import in_sequence

ALGORITHMS = ("ring", "naive")


def _tree(n):
    """A dict of mixed shapes and two dtypes (per rank: leading axis n)."""
    return {"w": exact_inputs(n, (3, 2 * n), jnp.float32, 1),
            "b": exact_inputs(n, (2 * n,), jnp.float32, 2),
            "step": exact_inputs(n, (n,), jnp.int32, 3),
            "nested": [exact_inputs(n, (1, n), jnp.float32, 4), exact_inputs(n, (2 * n,), jnp.int32, 5)]}


def per_leaf(fn, tree):
    """``tree_map(fn, tree)``, one leaf's collective after another where jaxlib needs it."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef.unflatten(in_sequence(fn, leaves))


OURS = {"allreduce": lambda t, a: jaxcoll.allreduce(t, AXIS, algorithm=a),
        "reduce_scatter": lambda t, a: jaxcoll.reduce_scatter(t, AXIS, dim=-1, tiled=True,
                                                              algorithm=a),
        "allgather": lambda t, a: jaxcoll.allgather(t, AXIS, dim=0, algorithm=a)}
BUILTIN = {"allreduce": lambda x: lax.psum(x, AXIS),
           "reduce_scatter": lambda x: lax.psum_scatter(x, AXIS, scatter_dimension=x.ndim - 1,
                                                        tiled=True),
           "allgather": lambda x: lax.all_gather(x, AXIS, axis=0)}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_pytree_matches_builtin_per_leaf(algorithm):
    n = 4

    def fn(tree):
        return ours_and_reference(list(OURS), [tree] * len(OURS),
                                  lambda p, t: OURS[p](t, algorithm),
                                  lambda p, t: per_leaf(BUILTIN[p], t))

    for ours, ref in per_rank(fn, n)(_tree(n)):
        assert jax.tree_util.tree_structure(ours) == jax.tree_util.tree_structure(ref)
        for got, want in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ref)):
            assert_same(got, want)


def test_pytree_costs_one_collective_per_dtype():
    """Leaves of one dtype are packed: two dtypes -> two ring allreduces, however many leaves."""
    n = 4
    program = per_rank(lambda tree: jaxcoll.ring_allreduce(tree, AXIS), n)
    jaxpr = str(jax.make_jaxpr(program)(_tree(n)))
    assert jaxpr.count("jaxcoll_allreduce[") == 2
    # A ring allreduce is 2 folded loops of one ppermute each: 2 dtypes -> 4 collective-permutes.
    assert count_permutes(program.lower(_tree(n)).compile().as_text()) == 4


def _grad_of(primitive, algorithm, n, check_vma):
    """Gradient of a weighted sum of the collective's per-rank outputs."""
    call = {"allreduce": lambda x: jaxcoll.allreduce(x, AXIS, algorithm=algorithm),
            "reduce_scatter": lambda x: jaxcoll.reduce_scatter(x, AXIS, tiled=True,
                                                               algorithm=algorithm),
            "allgather": lambda x: jaxcoll.allgather(x, AXIS, algorithm=algorithm)}[primitive]
    collective = jax.shard_map(lambda x: call(x[0])[None], mesh=mesh(n), in_specs=P(AXIS),
                               out_specs=P(AXIS), check_vma=check_vma)

    def loss(x):
        out = collective(x)
        weights = jnp.cos(jnp.arange(out.size, dtype=out.dtype)).reshape(out.shape)
        return jnp.sum(jnp.sin(out) * weights)

    return jax.jit(jax.grad(loss))


@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("primitive", ["allreduce", "reduce_scatter", "allgather"])
def test_grad_matches_builtin(primitive, algorithm, check_vma):
    n = 5
    x = jnp.asarray(np.random.default_rng(0).normal(size=(n, 2 * n)), jnp.float32)
    got = _grad_of(primitive, algorithm, n, check_vma)(x)
    want = _grad_of(primitive, "xla", n, check_vma)(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_same_with_and_without_jit():
    n = 4
    x = exact_inputs(n, (10,), jnp.float32)
    fn = jax.shard_map(lambda b: jaxcoll.ring_allreduce(b, AXIS, op="max"), mesh=mesh(n),
                       in_specs=P(AXIS), out_specs=P(AXIS))
    assert_same(fn(x), jax.jit(fn)(x))


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("algorithm", ALGORITHMS + ("halving_doubling",))
def test_vmap_with_axis_name(algorithm, jit):
    n = 5
    x = exact_inputs(n, (n, 3), jnp.int32)

    def both(b):
        return ((jaxcoll.allreduce(b, "v", algorithm=algorithm),
                 jaxcoll.reduce_scatter(b, "v", algorithm=algorithm),
                 jaxcoll.allgather(b, "v", dim=1, algorithm=algorithm)),
                (lax.psum(b, "v"), lax.psum_scatter(b, "v"), lax.all_gather(b, "v", axis=1)))

    program = jax.vmap(both, axis_name="v")
    ours, ref = (jax.jit(program) if jit else program)(x)
    for got, want in zip(ours, ref):
        assert_same(got, want)


def test_vmap_over_two_axis_names_is_refused():
    """JAX's ppermute batching rule takes one axis name at a time (a tuple would fail deep in
    JAX with an assertion), so jaxcoll says so first (an allreduce reduces one axis after the
    other instead: tests/test_lax_surface.py)."""
    x = jnp.zeros((2, 4, 3))
    inner = jax.vmap(lambda b: jaxcoll.ring_allgather(b, ("a", "b")), axis_name="b")
    with pytest.raises(ValueError, match=r"jaxcoll.allgather: axis=\('a', 'b'\) names several "
                                         r"vmap axes"):
        jax.vmap(inner, axis_name="a")(x)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_tuple_axis_is_row_major_product(algorithm):
    grid = mesh(8, (2, 4), ("a", "b"))
    axes = ("a", "b")
    x = exact_inputs(8, (2, 8), jnp.float32)
    ours = {"allreduce": lambda b: jaxcoll.allreduce(b, axes, algorithm=algorithm),
            "reduce_scatter": lambda b: jaxcoll.reduce_scatter(b, axes, dim=1, tiled=True,
                                                               algorithm=algorithm),
            "allgather": lambda b: jaxcoll.allgather(b, axes, algorithm=algorithm)}
    builtin = {"allreduce": lambda b: lax.psum(b, axes),
               "reduce_scatter": lambda b: lax.psum_scatter(b, axes, scatter_dimension=1,
                                                            tiled=True),
               "allgather": lambda b: lax.all_gather(b, axes)}

    def fn(b):
        pairs = ours_and_reference(list(ours), [b[0]] * 3, lambda p, v: ours[p](v),
                                   lambda p, v: builtin[p](v))
        return jax.tree_util.tree_map(lambda y: y[None], pairs)

    program = jax.jit(jax.shard_map(fn, mesh=grid, in_specs=P(axes), out_specs=P(axes)))
    for got, want in program(x):
        assert_same(got, want)


def test_replicated_out_specs_under_either_check_vma():
    """An allreduce is typed invariant like psum's: out_specs=P() works with check_vma on or off."""
    n = 4
    x = exact_inputs(n, (6,), jnp.float32)

    def step(check_vma):
        return jax.jit(jax.shard_map(lambda b: jaxcoll.ring_allreduce(b[0], AXIS), mesh=mesh(n),
                                     in_specs=P(AXIS), out_specs=P(), check_vma=check_vma))

    assert_same(step(False)(x), x.sum(0))
    assert_same(step(True)(x), x.sum(0))


def test_grads_of_replicated_params_come_summed_under_check_vma():
    """The training trap in docs/guide/typing.md: with check_vma=True JAX itself sums the
    gradient of a replicated (P()) parameter over the axis, so averaging it again gives the sum;
    pcast to 'varying' first (or check_vma=False) gives each rank its own gradient."""
    n = 4
    w, batch = jnp.ones(3), exact_inputs(n, (3,), jnp.float32)  # batch: (n, 3)

    def step(check_vma, cast):
        def body(w, b):
            w = jax.lax.pcast(w, AXIS, to="varying") if cast else w
            grad = jax.grad(lambda w: jnp.sum(w * b[0]))(w)  # this rank's gradient: b[0]
            return jaxcoll.ring_allreduce(grad, AXIS, op="mean")[None]
        return jax.jit(jax.shard_map(body, mesh=mesh(n), in_specs=(P(), P(AXIS)),
                                     out_specs=P(AXIS), check_vma=check_vma))(w, batch)

    mean = np.broadcast_to(np.asarray(batch).mean(0), (n, 3))
    np.testing.assert_allclose(step(check_vma=False, cast=False), mean, rtol=1e-6)
    np.testing.assert_allclose(step(check_vma=True, cast=True), mean, rtol=1e-6)
    np.testing.assert_allclose(step(check_vma=True, cast=False), n * mean, rtol=1e-6)


def _hlo(primitive, algorithm, n):
    call = {"allreduce": lambda b: jaxcoll.allreduce(b, AXIS, algorithm=algorithm),
            "reduce_scatter": lambda b: jaxcoll.reduce_scatter(b, AXIS, tiled=True,
                                                               algorithm=algorithm),
            "allgather": lambda b: jaxcoll.allgather(b, AXIS, algorithm=algorithm)}[primitive]
    x = jnp.zeros((n, 8 * n), jnp.float32)
    return per_rank(call, n).lower(x).compile().as_text()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("primitive", ["allreduce", "reduce_scatter", "allgather"])
def test_hlo_holds_only_collective_permutes(primitive, algorithm):
    hlo = _hlo(primitive, algorithm, 8)
    assert count_permutes(hlo) > 0
    assert other_collectives(hlo) == [], f"{primitive} {algorithm}"


def test_xla_reference_uses_builtin_collective():
    assert re.search(r"\ball-reduce(-start)?\(", _hlo("allreduce", "xla", 8))


def test_ring_program_size_does_not_grow_with_n():
    """The n-1 rounds of each ring phase are one fori_loop: 2 collective-permutes at any n."""
    assert count_permutes(_hlo("allreduce", "ring", 4)) == 2
    assert count_permutes(_hlo("allreduce", "ring", 8)) == 2


@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_replicated_input_and_python_scalar(algorithm, check_vma):
    """An input typed invariant (in_specs=P(), or a constant) works like a per-rank one."""
    n = 4
    x = exact_inputs(1, (2 * n,), jnp.float32)[0]

    ours = [lambda p: jaxcoll.allreduce(p, AXIS, algorithm=algorithm),
            lambda p: jaxcoll.reduce_scatter(p, AXIS, tiled=True, algorithm=algorithm),
            lambda p: jaxcoll.allgather(p, AXIS, algorithm=algorithm),
            lambda p: jnp.asarray(jaxcoll.allreduce(3.0, AXIS, algorithm=algorithm),
                                  jnp.float32)]
    builtin = [lambda p: lax.psum(p, AXIS), lambda p: lax.psum_scatter(p, AXIS, tiled=True),
               lambda p: lax.all_gather(p, AXIS),
               lambda p: jnp.asarray(lax.psum(3.0, AXIS), jnp.float32)]

    def fn(p):
        # a constant: n times it, computed here with no communication, as psum's
        assert jaxcoll.allreduce(3.0, AXIS, algorithm=algorithm) == lax.psum(3.0, AXIS) == 12.0
        pairs = ours_and_reference(range(4), [p] * 4, lambda i, v: ours[i](v),
                                   lambda i, v: builtin[i](v))
        return jax.tree_util.tree_map(lambda y: y[None], pairs)

    program = jax.jit(jax.shard_map(fn, mesh=mesh(n), in_specs=P(), out_specs=P(AXIS),
                                    check_vma=check_vma))
    for got, want in program(x):
        assert_same(got, want)


def test_algorithm_takes_a_schedule():
    """Any verified schedule of the collective and rank count runs, as a name's would: one
    written by hand (the seed's ring), and a two-level one on a flat axis; its gradient is its
    dual's (one collective), equal to lax's."""
    n = 4
    rounds = ([[Transfer(r, (r + 1) % n, (r - s) % n, reduce=True) for r in range(n)]
               for s in range(n - 1)] +
              [[Transfer(r, (r + 1) % n, (r + 1 - s) % n, reduce=False) for r in range(n)]
               for s in range(n - 1)])
    by_hand = Schedule.build("my ring", n, n_chunks=n, rounds=rounds)
    by_hand = Schedule(by_hand.name, n, n, by_hand.rounds, "allreduce")
    two_level = jaxcoll.schedule("allreduce", "hierarchical", (2, 2))
    x = exact_inputs(n, (6,), jnp.float32)
    for algorithm in (by_hand, two_level):
        def loss(v, algorithm=algorithm):
            return jnp.sum(jnp.sin(jax.shard_map(
                lambda b: jaxcoll.allreduce(b, AXIS, algorithm=algorithm), mesh=mesh(n),
                in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False)(v)))

        def reference(v):
            return jnp.sum(jnp.sin(jax.shard_map(lambda b: lax.psum(b, AXIS), mesh=mesh(n),
                                                 in_specs=P(AXIS), out_specs=P(AXIS),
                                                 check_vma=False)(v)))
        assert_same(jax.jit(loss)(x), jax.jit(reference)(x))
        np.testing.assert_allclose(jax.jit(jax.grad(loss))(x), jax.grad(reference)(x),
                                   rtol=1e-6)
