"""Training use: bucketed pytrees, accum_dtype, grad/vjp/jvp against the built-ins, examples."""

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import jaxcoll
from helpers import AXIS, assert_same, mesh, ours_and_reference, per_rank
from jaxcoll.lowering.execute import after, in_sequence
from jaxcoll.packing import bucket_plan

N = 4
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


# ----------------------------------------------------------------------------- buckets

@pytest.mark.parametrize("nbytes, bucket_bytes, buckets", [
    ([40, 40, 40, 40], 80, [[0, 1], [2, 3]]),  # boundaries fall between leaves
    ([40, 40, 40, 120], 100, [[0, 1], [2], [3]]),  # would split leaf 2: it starts a bucket;
    # leaf 3 is bigger than a bucket: a bucket of its own
    ([0, 40, 0, 40, 0], 40, [[0, 1, 2], [3, 4]]),  # empty leaves ride along
    ([8, 8, 8], 1, [[0], [1], [2]]),
    ([8, 8, 8], None, [[0, 1, 2]]),
    ([], 8, []),
])
def test_bucket_plan_keeps_whole_leaves_in_order(nbytes, bucket_bytes, buckets):
    assert bucket_plan(nbytes, bucket_bytes) == buckets


def _exact(shape, dtype, seed: int = 0) -> np.ndarray:
    """(N, *shape) small integers in ``dtype``, exact in any sum, as a host array: jit shards
    host arrays without compiling a resharding program for each one as it does for jax
    arrays (some 50 ms per leaf)."""
    return np.random.default_rng(seed).integers(-8, 9, size=(N, *shape)).astype(dtype)


def _f32_tree(sizes):
    return [_exact((size,), jnp.float32, seed) for seed, size in enumerate(sizes)]


@pytest.mark.parametrize("bucket_bytes, n_buckets", [
    (None, 2), (jaxcoll.BUCKET_BYTES, 2),  # one per dtype
    (80, 3 + 1),  # float32 [10, 10 | 10 | 30]: 10 + 10 fill a bucket, 30 gets its own
    (120, 2 + 1),  # [10, 10, 10 | 30]: the 4th leaf would cross the boundary
    (1, 4 + 2),  # every leaf alone
])
def test_one_collective_per_bucket(bucket_bytes, n_buckets):
    """One allreduce primitive per bucket, whatever it holds."""
    tree = {"f32": _f32_tree([10, 10, 10, 30]),
            "bf16": [_exact((7,), jnp.bfloat16, 9), _exact((), jnp.bfloat16)]}
    program = per_rank(lambda t: jaxcoll.ring_allreduce(t, AXIS, bucket_bytes=bucket_bytes), N)
    assert str(jax.make_jaxpr(program)(tree)).count("jaxcoll_allreduce[") == n_buckets


def _shapes(rng, count: int, block: int):
    """``count`` shapes of 0 to 3 dimensions (every 7th empty); with ``block``, at least one
    dimension, the first a multiple of ``block`` (collectives that cut leaves into n blocks)."""
    shapes = []
    for i in range(count):
        shape = [int(d) for d in rng.integers(1, 6, size=int(rng.integers(bool(block), 4)))]
        if i % 7 == 3 and shape:
            shape[-1] = 0
        if block:
            shape[0] *= block
        shapes.append(tuple(shape))
    return shapes


def _big_tree(count: int, block: int = 0, seed: int = 0):
    """A list of ``count`` leaves, float32, bfloat16 and int32 interleaved, many tiny, some
    empty, some scalars unless ``block``."""
    rng = np.random.default_rng(seed)
    dtypes = (jnp.float32, jnp.bfloat16, jnp.int32)
    return [_exact(shape, dtypes[i % 3], seed + i)
            for i, shape in enumerate(_shapes(rng, count, block))]


def test_hundreds_of_leaves_match_builtin():
    """200 leaves of three dtypes in about 10 buckets: every leaf equals ``lax.psum``'s."""
    def fn(tree):
        return ours_and_reference([0], [tree], lambda _, t: jaxcoll.allreduce(
            t, AXIS, bucket_bytes=1024), lambda _, t: lax.psum(t, AXIS))

    tree = _big_tree(200)
    ((ours, reference),) = per_rank(fn, N)(tree)
    for i, (got, want) in enumerate(zip(ours, reference)):
        assert_same(got, want, f"leaf {i} of {len(tree)}")


def _my_block(x):
    """This rank's block of x along dimension 0."""
    block = x.shape[0] // N
    return lax.dynamic_slice_in_dim(x, lax.axis_index(AXIS) * block, block)


SPLIT = dict(bucket_bytes=64)  # 1 to 5 buckets per dtype below
VARIED = {  # name: (ours on a pytree, the built-in on one leaf)
    "allgather": (lambda t: jaxcoll.ring_allgather(t, AXIS, **SPLIT),
                  lambda leaf: lax.all_gather(leaf, AXIS) if leaf.size else
                  jnp.zeros((N, *leaf.shape), leaf.dtype)),
    "reduce": (lambda t: jaxcoll.reduce(t, AXIS, root=1, algorithm="binomial", **SPLIT),
               lambda leaf: jnp.where(lax.axis_index(AXIS) == 1, lax.psum(leaf, AXIS), 0)),
    "broadcast": (lambda t: jaxcoll.broadcast(t, AXIS, root=2, **SPLIT),
                  lambda leaf: lax.all_gather(leaf, AXIS)[2] if leaf.size else leaf),
    "gather": (lambda t: jaxcoll.gather(t, AXIS, root=3, algorithm="naive", **SPLIT),
               lambda leaf: jnp.where(lax.axis_index(AXIS) == 3, lax.all_gather(leaf, AXIS),
                                      0) if leaf.size else jnp.zeros((N, *leaf.shape),
                                                                     leaf.dtype)),
}
BLOCKED = {  # the same for leaves whose first dimension is a multiple of N
    "reduce_scatter": (lambda t: jaxcoll.ring_reduce_scatter(t, AXIS, tiled=True, **SPLIT),
                       lambda leaf: lax.psum_scatter(leaf, AXIS, tiled=True) if leaf.size else
                       _my_block(leaf)),
    "alltoall": (lambda t: jaxcoll.alltoall(t, AXIS, split_dim=0, concat_dim=0, tiled=True,
                                            algorithm="bruck", **SPLIT),
                 lambda leaf: lax.all_to_all(leaf, AXIS, 0, 0, tiled=True) if leaf.size else
                 leaf),
    "scatter": (lambda t: jaxcoll.scatter(t, AXIS, root=1, tiled=True, **SPLIT),
                lambda leaf: _my_block(lax.all_gather(leaf, AXIS)[1]) if leaf.size else
                _my_block(leaf)),
}


def test_varied_leaves_in_many_buckets_match_builtins_leaf_by_leaf():
    """Scalars, empty leaves and three dtypes, in buckets of 64 bytes: every other collective
    equals its built-in applied leaf by leaf."""
    table = {**VARIED, **BLOCKED}
    trees = {**{name: _big_tree(15) for name in VARIED},
             **{name: _big_tree(15, block=N, seed=1) for name in BLOCKED}}

    def fn(t):
        return ours_and_reference(list(table), [t[name] for name in table],
                                  lambda p, v: table[p][0](v),
                                  lambda p, v: in_sequence(table[p][1], v))

    for name, (ours, reference) in zip(table, per_rank(fn, N)(trees)):
        for i, (got, want) in enumerate(zip(ours, reference)):
            assert_same(got, want, f"{name} leaf {i}")


# ----------------------------------------------------------------------------- accum_dtype

def _bf16_normal(shape, seed: int):
    return np.random.default_rng(seed).normal(size=(N, *shape)).astype(jnp.bfloat16)


def test_accum_dtype_reduces_in_float32_and_returns_bfloat16():
    """bfloat16 values reduced in float32: the float32 sum (exact here: 4 bfloat16 of 8-bit
    mantissas) rounded once, as ``xla`` with the same casts; without, the ring rounds at every
    hop and differs somewhere."""
    x = _bf16_normal((4 * N, 50), 0)
    wide = dict(accum_dtype=jnp.float32)
    calls = [lambda v: jaxcoll.ring_allreduce(v, AXIS, **wide),
             lambda v: jaxcoll.allreduce(v, AXIS, algorithm="xla", **wide),
             lambda v: jaxcoll.reduce_scatter(v, AXIS, op="mean", algorithm="halving_doubling",
                                              tiled=True, **wide),
             lambda v: jaxcoll.reduce(v, AXIS, root=0, algorithm="naive", **wide),
             lambda v: jaxcoll.ring_allreduce(v, AXIS)]
    outs = per_rank(lambda v: in_sequence(lambda v, call: call(v), [v] * len(calls),
                                          calls), N)(x)
    exact = np.asarray(x, np.float32).sum(0)  # (4N, 50), exact in float32
    want = jnp.asarray(exact, jnp.bfloat16)
    for out in outs:
        assert out.dtype == jnp.bfloat16
    assert_same(outs[0][0], want, "ring")
    assert_same(outs[1][0], want, "xla")
    assert_same(outs[2][1], jnp.asarray(exact[4:8] / N, jnp.bfloat16), "mean")
    assert_same(outs[3][0], want, "reduce")
    assert np.any(np.asarray(outs[4][0]) != np.asarray(want)), "bfloat16 ring is never off?"


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(accum_dtype=jnp.bfloat16), TypeError, r"accum_dtype=bfloat16 is narrower than a "
                                                r"leaf of dtype float32"),
    (dict(accum_dtype=jnp.float16), TypeError, "accum_dtype=float16 is narrower"),
    (dict(accum_dtype="nope"), TypeError, r"accum_dtype='nope' is not a numeric dtype"),
    (dict(accum_dtype=jnp.float64), ValueError, r"accum_dtype=float64 needs .*jax_enable_x64"),
    (dict(bucket_bytes=0), ValueError, r"bucket_bytes=0 must be an int >= 1"),
    (dict(bucket_bytes=1.5), TypeError, r"bucket_bytes=1.5 must be an int >= 1"),
])
def test_bad_training_arguments_name_the_argument(kwargs, error, message):
    x = jnp.zeros((N, 8), jnp.float32)
    with pytest.raises(error, match=f"jaxcoll.allreduce: {message}"):
        jax.vmap(lambda v: jaxcoll.allreduce(v, "v", **kwargs), axis_name="v")(x)


def test_accum_dtype_may_equal_or_widen_every_leaf():
    x = {"a": np.ones((N, 3), jnp.bfloat16), "b": np.ones((N, 2), np.float32),
         "c": np.ones((N,), np.int8)}
    out = jax.vmap(lambda v: jaxcoll.ring_allreduce(v, "v", accum_dtype="float32"),
                   axis_name="v")(x)
    assert {k: v.dtype for k, v in out.items()} == {k: v.dtype for k, v in x.items()}
    assert all(np.all(np.asarray(v) == N) for v in out.values())


# ----------------------------------------------------------------------------- derivatives

SMALL = dict(bucket_bytes=64)  # the leaves of each tree below fill 2 or 3 buckets
DIFFERENTIATED = {  # name: (ours, the built-in); every public function, float32 pytrees
    "allreduce": (lambda x: jaxcoll.allreduce(x, AXIS, op="mean", algorithm="double_tree",
                                              **SMALL),
                  lambda x: jaxcoll.allreduce(x, AXIS, op="mean", algorithm="xla")),
    "reduce_scatter": (lambda x: jaxcoll.reduce_scatter(x, AXIS, tiled=True,
                                                        algorithm="halving_doubling", **SMALL),
                       lambda x: jaxcoll.reduce_scatter(x, AXIS, tiled=True, algorithm="xla")),
    "allgather": (lambda x: jaxcoll.allgather(x, AXIS, dim=1, algorithm="bruck", **SMALL),
                  lambda x: jaxcoll.allgather(x, AXIS, dim=1, algorithm="xla")),
    "alltoall": (lambda x: jaxcoll.alltoall(x, AXIS, split_dim=0, concat_dim=1, tiled=True,
                                            algorithm="naive", **SMALL),
                 lambda x: jaxcoll.alltoall(x, AXIS, split_dim=0, concat_dim=1, tiled=True,
                                            algorithm="xla")),
    "broadcast": (lambda x: jaxcoll.broadcast(x, AXIS, root=1, algorithm="scatter_allgather"),
                  lambda x: jaxcoll.broadcast(x, AXIS, root=1, algorithm="xla")),
    "reduce": (lambda x: jaxcoll.reduce(x, AXIS, root=2, algorithm="binomial", **SMALL),
               lambda x: jaxcoll.reduce(x, AXIS, root=2, algorithm="xla")),
    "gather": (lambda x: jaxcoll.gather(x, AXIS, root=3, algorithm="binomial"),
               lambda x: jaxcoll.gather(x, AXIS, root=3, algorithm="xla")),
    "scatter": (lambda x: jaxcoll.scatter(x, AXIS, root=1, tiled=True, algorithm="naive"),
                lambda x: jaxcoll.scatter(x, AXIS, root=1, tiled=True, algorithm="xla")),
    "ring_allreduce": (lambda x: jaxcoll.ring_allreduce(x, AXIS, **SMALL),
                       lambda x: jaxcoll.allreduce(x, AXIS, algorithm="xla")),
    "ring_reduce_scatter": (lambda x: jaxcoll.ring_reduce_scatter(x, AXIS, op="mean",
                                                                  tiled=True),
                            lambda x: jaxcoll.reduce_scatter(x, AXIS, op="mean", tiled=True,
                                                             algorithm="xla")),
    "ring_allgather": (lambda x: jaxcoll.ring_allgather(x, AXIS, tiled=True, **SMALL),
                       lambda x: jaxcoll.allgather(x, AXIS, tiled=True, algorithm="xla")),
    "tree_allreduce": (lambda x: jaxcoll.tree_allreduce(x, AXIS),
                       lambda x: jaxcoll.allreduce(x, AXIS, algorithm="xla")),
    "tree_broadcast": (lambda x: jaxcoll.tree_broadcast(x, AXIS, root=3, **SMALL),
                       lambda x: jaxcoll.broadcast(x, AXIS, root=3, algorithm="xla")),
}


def _normal_tree(seed: int) -> dict:
    """Per function: {"w": (n, 2n, 3), "b": (n, n, 2)} float32, per rank."""
    rng = np.random.default_rng(seed)
    return {name: {"w": rng.normal(size=(N, 2 * N, 3)).astype(np.float32),
                   "b": rng.normal(size=(N, N, 2)).astype(np.float32)}
            for name in DIFFERENTIATED}


def _all_functions(which: int):
    """shard_map of every function of DIFFERENTIATED (ours: 0, built-in: 1) on its own input,
    one after another."""
    names = list(DIFFERENTIATED)

    def body(xs):
        xs = jax.tree.map(lambda a: a[0], xs)
        outs = in_sequence(lambda x, name: DIFFERENTIATED[name][which](x),
                           [xs[name] for name in names], names)
        return jax.tree.map(lambda y: y[None], dict(zip(names, outs)))
    return jax.shard_map(body, mesh=mesh(N), in_specs=P(AXIS), out_specs=P(AXIS))


def _loss(outs):
    """A weighted sum of sines of every output element (every output gets its own weight)."""
    return sum(jnp.sum(jnp.sin(o) * jnp.cos(jnp.arange(o.size, dtype=o.dtype)).reshape(o.shape))
               for o in jax.tree.leaves(outs))


def _derivatives(which: int):
    """jit of (grad of _loss, vjp with given cotangents, jvp with given tangents), each
    waiting for the one before (jaxlib 0.10 CPU: docs/guide/typing.md)."""
    collective = _all_functions(which)

    def all_three(xs, cotangents, tangents):
        grads = jax.grad(lambda v: _loss(collective(v)))(xs)
        _, pullback = jax.vjp(collective, after(xs, grads))
        (vjp,) = pullback(cotangents)
        _, jvp = jax.jvp(collective, (after(xs, vjp),), (tangents,))
        return grads, vjp, jvp
    return jax.jit(all_three)


def test_grad_vjp_jvp_of_every_public_function_match_builtins():
    xs, tangents = _normal_tree(0), _normal_tree(1)
    shapes = jax.eval_shape(_all_functions(1), xs)
    rng = np.random.default_rng(2)
    cotangents = jax.tree.map(lambda s: rng.normal(size=s.shape).astype(s.dtype), shapes)
    ours = _derivatives(0)(xs, cotangents, tangents)
    builtin = _derivatives(1)(xs, cotangents, tangents)
    for what, got, want in zip(("grad", "vjp", "jvp"), ours, builtin):
        for name in DIFFERENTIATED:
            for leaf, a, b in zip("bw", jax.tree.leaves(got[name]), jax.tree.leaves(want[name])):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5,
                                           err_msg=f"{what} of {name}, leaf {leaf}")


# ----------------------------------------------------------------------------- examples

@pytest.mark.subprocess_jax
@pytest.mark.parametrize("example", ["data_parallel.py", "zero_sharded.py"])
def test_example_check_passes(example):
    """Both examples train 100 steps and compare with the built-in reference (seconds)."""
    pytest.importorskip("optax")
    done = subprocess.run([sys.executable, str(EXAMPLES / example), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "check: 100 losses agree" in done.stdout
