"""The composition matrix against lax: every JAX transformation taken around (or inside) a
named-axis binder (``vmap(axis_name=)``, ``shard_map``) that runs a jaxcoll collective gives
what the same call with ``algorithm="xla"`` (the lax built-ins) gives.

grad / jvp / linear_transpose taken *outside* ``vmap(f, axis_name="b")`` used to return zeros
or raise (they met the executor's bit moves, not jaxcoll's rules); the batching rule now binds
a jaxcoll primitive. Inputs are small integers in float32, so every forward sum is exact; the
cotangents (sines and cosines) are summed in other orders than lax's, hence rtol 1e-6.

Cost: the vmap cases run on one device, so each test traces every case into ONE jitted program
(one compile; eager vmap dispatches op by op and costs several times more) and runs the
representative compositions eagerly once as well.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jaxcoll
from jaxcoll.tools.check import call_collective
from jaxcoll.lowering.execute import after
from jaxcoll.ir.families import SCHEDULES

from helpers import AXIS, exact_inputs, mesh

PRIMITIVES = ("allreduce", "reduce_scatter", "allgather", "alltoall", "broadcast", "reduce",
              "gather", "scatter")
N = 3  # ranks under vmap(axis_name="b")
NAME = "b"
ROOT = N - 1  # rooted collectives from the last rank: relabelling is exercised
# one algorithm per primitive for the full composition set: ring where it exists
REPRESENTATIVE = {"allreduce": "ring", "reduce_scatter": "ring", "allgather": "ring",
                  "alltoall": "naive", "broadcast": "tree", "reduce": "tree",
                  "gather": "binomial", "scatter": "binomial"}


def _algorithms(primitive: str) -> list[str]:
    """The registered one-level algorithms (two-level ones need a tuple axis)."""
    return sorted(a for a, entry in SCHEDULES[primitive].items() if not entry.two_level)


def _inputs(n: int = N, shape=(6,)):
    """x, a tangent and a second direction: (n, *shape) small integers in float32."""
    return tuple(exact_inputs(n, shape, jnp.float32, seed=s) for s in range(3))


def _close(got, want, what: str, rtol: float = 1e-6) -> None:
    """Equal tree structure, shapes and dtypes; values to ``rtol``."""
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    assert got_tree == want_tree, f"{what}: {got_tree} != {want_tree}"
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (
            f"{what}[{i}]: got {g.dtype}{g.shape}, want {w.dtype}{w.shape}")
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, err_msg=f"{what}[{i}]")


def _nonzero(results: dict, what: str) -> None:
    """Every reference result holds a nonzero value (the old bug's answer was zeros)."""
    for name, value in results.items():
        for leaf in jax.tree_util.tree_leaves(value):
            assert np.any(np.asarray(leaf) != 0), f"{what} {name}: the reference is all zeros"


def _per_rank(primitive: str, algorithm: str, axis=NAME, root: int = ROOT):
    return lambda v: call_collective(primitive, algorithm, v, axis, root=root)


def _loss(fn):
    return lambda x: jnp.sum(jnp.sin(fn(x)))


def _hvp(fn):
    """x, v -> the second derivative of sum(sin(fn(x))) along v (grad of grad)."""
    return lambda x, v: jax.grad(lambda y: jnp.vdot(jax.grad(_loss(fn))(y), v))(x)


# --- 1. grad / jvp / linear_transpose of vmap, every algorithm -----------------------------


def _outside_vmap(f, x, t):
    """grad, jvp and linear_transpose taken outside f = vmap(collective, axis_name)."""
    y, dy = jax.jvp(f, (x,), (t,))
    (back,) = jax.linear_transpose(f, x)(jnp.cos(y))
    return {"grad(vmap)": jax.grad(_loss(f))(x), "jvp(vmap)": (y, dy),
            "linear_transpose(vmap)": back}


@pytest.mark.parametrize("primitive", PRIMITIVES)
def test_every_algorithm_grad_jvp_transpose_of_vmap_equal_lax(primitive):
    """grad, jvp and linear_transpose outside vmap(axis_name="b") for every registered
    one-level algorithm: one program per primitive."""
    algorithms = _algorithms(primitive)
    x, t, _ = _inputs()

    @jax.jit
    def program(x, t):
        return {a: _outside_vmap(jax.vmap(_per_rank(primitive, a), axis_name=NAME), x, t)
                for a in algorithms + ["xla"]}

    results = program(x, t)
    want = results.pop("xla")
    _nonzero(want, primitive)
    assert sorted(results) == algorithms
    for algorithm, got in results.items():
        _close(got, want, f"{primitive} {algorithm}")


# --- 2. one- and two-deep compositions under vmap(axis_name), one algorithm each ----------


def _compositions(rank_fn, x, t, v) -> dict:
    """Every one- and two-deep composition of vmap(axis_name) with grad, jvp,
    linear_transpose, checkpoint and jit, around rank_fn (one rank's collective)."""
    f = jax.vmap(rank_fn, axis_name=NAME)
    over = lambda g: jax.vmap(g, axis_name=NAME)  # noqa: E731
    y = f(x)
    return {
        "vmap": y,
        "vmap(jit)": over(jax.jit(rank_fn))(x),
        "grad(vmap)": jax.grad(_loss(f))(x),
        "vmap(grad)": over(jax.grad(_loss(rank_fn)))(x),
        "grad(vmap(jit))": jax.grad(_loss(over(jax.jit(rank_fn))))(x),
        "jvp(vmap)": jax.jvp(f, (x,), (t,)),
        "vmap(jvp)": over(lambda a, b: jax.jvp(rank_fn, (a,), (b,)))(x, t),
        "linear_transpose(vmap)": jax.linear_transpose(f, x)(jnp.cos(y))[0],
        "vmap(linear_transpose)": over(
            lambda a, c: jax.linear_transpose(rank_fn, a)(c)[0])(x, jnp.cos(y)),
        "grad(grad(vmap))": _hvp(f)(x, v),
        "vmap(grad(grad))": over(_hvp(rank_fn))(x, v),
        "grad(jvp(vmap))": jax.grad(lambda d: jnp.sum(jnp.sin(jax.jvp(f, (x,), (d,))[1])))(t),
        "grad(checkpoint(vmap))": jax.grad(_loss(jax.checkpoint(f)))(x),
        "grad(vmap(checkpoint))": jax.grad(_loss(over(jax.checkpoint(rank_fn))))(x),
    }


def _eager_compositions(rank_fn, x, t) -> dict:
    """Two compositions run op by op (the primitives' impl rules, not their lowering; eager
    vmap dispatches every step of a schedule, about 0.5 s a call, so only these)."""
    f = jax.vmap(rank_fn, axis_name=NAME)
    return {"grad(vmap)": jax.grad(_loss(f))(x), "jvp(vmap)": jax.jvp(f, (x,), (t,))}


@pytest.mark.parametrize("primitive", PRIMITIVES)
def test_compositions_under_vmap_equal_lax(primitive):
    """The one- and two-deep compositions, jitted (one program, ours and lax's), and the
    grad and jvp of the vmap eagerly."""
    algorithm = REPRESENTATIVE[primitive]
    x, t, v = _inputs()

    @jax.jit
    def program(x, t, v):
        return [_compositions(_per_rank(primitive, a), x, t, v) for a in (algorithm, "xla")]

    got, want = program(x, t, v)
    _nonzero(want, primitive)
    assert sorted(got) == sorted(want)
    for name in want:
        _close(got[name], want[name], f"{primitive} {algorithm} jit({name})")
    eager = _eager_compositions(_per_rank(primitive, algorithm), x, t)
    for name, value in eager.items():
        _close(value, want[name], f"{primitive} {algorithm} eager {name}")


# --- 3. the same under shard_map, check_vma True and False ---------------------------------

M = 4  # ranks of the shard_map mesh
SHARD_CASES = [("allreduce", "ring"), ("allreduce", "recursive_doubling"),
               ("allgather", "ring"), ("reduce_scatter", "ring"), ("alltoall", "bruck"),
               ("broadcast", "tree")]


def _chained(pairs: list, *inputs):
    """[(name, fn)] -> {name: fn(*inputs)}, each waiting for the results before it (jaxlib
    0.10 CPU must not run independent collectives of one program at once; harmless elsewhere)."""
    results, previous = {}, ()
    for name, fn in pairs:
        results[name] = previous = fn(*(after(a, previous) for a in inputs))
    return results


def _inside(rank_fn):
    """Transformations taken inside the shard_map body: (x, t, batch) of one rank."""
    loss = _loss(rank_fn)
    return [
        ("jit", lambda x, t, b: jax.jit(rank_fn)(x)),
        ("grad", lambda x, t, b: jax.grad(loss)(x)),
        ("jvp", lambda x, t, b: jax.jvp(rank_fn, (x,), (t,))),
        ("linear_transpose",
         lambda x, t, b: jax.linear_transpose(rank_fn, x)(jnp.cos(rank_fn(x)))[0]),
        ("vmap_batch", lambda x, t, b: jax.vmap(rank_fn)(b)),
        ("grad(vmap_batch)", lambda x, t, b: jax.grad(_loss(jax.vmap(rank_fn)))(b)),
        ("vmap_batch(grad)", lambda x, t, b: jax.vmap(jax.grad(loss))(b)),
    ]


def _around(rank_fn, check_vma: bool):
    """Transformations taken around the shard_map: (X, T, B) with a leading rank axis (B's
    batch is its second axis)."""
    f = jax.shard_map(lambda a: rank_fn(a[0])[None], mesh=mesh(M), in_specs=P(AXIS),
                      out_specs=P(AXIS), check_vma=check_vma)
    over_batch = jax.vmap(f, in_axes=1, out_axes=1)  # a batch axis of the global arrays
    return [
        ("grad", lambda x, t, b: jax.grad(_loss(f))(x)),
        ("jvp", lambda x, t, b: jax.jvp(f, (x,), (t,))),
        ("linear_transpose", lambda x, t, b: jax.linear_transpose(f, x)(jnp.cos(f(x)))[0]),
        ("grad(vmap_batch)", lambda x, t, b: jax.grad(_loss(over_batch))(b)),
    ]


@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("primitive,algorithm", SHARD_CASES)
def test_compositions_under_shard_map_equal_lax(primitive, algorithm, check_vma):
    """Inside the body (jit, grad, jvp, linear_transpose, vmap over a batch dimension and
    grad/vmap nested with it) and around the shard_map (grad, jvp, linear_transpose, grad of
    a vmap over a batch dimension), ours then lax's, in one program."""
    x, t, _ = _inputs(M, (8,))
    batch = exact_inputs(M, (2, 8), jnp.float32, seed=3)  # 2 per rank, vmapped inside

    def rank_fn(algo):
        return _per_rank(primitive, algo, AXIS, M - 1)

    def body(x, t, b):
        x, t, b = x[0], t[0], b[0]
        ours = _chained(_inside(rank_fn(algorithm)), x, t, b)
        want = _chained(_inside(rank_fn("xla")), *(after(a, ours) for a in (x, t, b)))
        return jax.tree_util.tree_map(lambda y: y[None], (ours, want))

    inside = jax.shard_map(body, mesh=mesh(M), in_specs=P(AXIS), out_specs=P(AXIS),
                           check_vma=check_vma)

    @jax.jit
    def program(x, t, b):
        ours_in, want_in = inside(x, t, b)
        x, t, b = (after(a, want_in) for a in (x, t, b))
        ours = _chained(_around(rank_fn(algorithm), check_vma), x, t, b)
        want = _chained(_around(rank_fn("xla"), check_vma),
                        *(after(a, ours) for a in (x, t, b)))
        return {"inside": (ours_in, want_in), "around": (ours, want)}

    for where, (got, want) in program(x, t, batch).items():
        _nonzero(want, f"{primitive} {where} shard_map")
        assert sorted(got) == sorted(want)
        for name in want:
            _close(got[name], want[name], f"{primitive} {algorithm} check_vma={check_vma} "
                                          f"{where} shard_map: {name}")


# --- 4. vmap(out_axes=None): unmapped like lax.all_gather / psum --------------------------


@pytest.mark.parametrize("primitive", ["allreduce", "allgather", "broadcast"])
def test_unmapped_vmap_results_equal_lax(primitive):
    """Every algorithm's result is unmapped (out_axes=None accepts it) and equals lax's; grad
    and jvp through the unmapped result for the representative algorithm."""
    algorithms = _algorithms(primitive)
    representative = REPRESENTATIVE[primitive]
    x, t, _ = _inputs()
    expected = {"allreduce": x.sum(0), "allgather": x, "broadcast": x[ROOT]}[primitive]

    def unmapped(algorithm):
        return jax.vmap(_per_rank(primitive, algorithm), axis_name=NAME, out_axes=None)

    @jax.jit
    def program(x, t):
        out = {a: {"vmap": unmapped(a)(x)} for a in algorithms + ["xla"]}
        for a in (representative, "xla"):
            f = unmapped(a)
            out[a].update({"grad(vmap)": jax.grad(_loss(f))(x),
                           "jvp(vmap)": jax.jvp(f, (x,), (t,))})
        return out

    results = program(x, t)
    want = results.pop("xla")
    np.testing.assert_array_equal(want["vmap"], expected)  # lax's answer, unmapped
    _nonzero(want, primitive)
    assert sorted(results) == algorithms
    for algorithm, got in results.items():
        for name, value in got.items():
            _close(value, want[name], f"{primitive} {algorithm} out_axes=None {name}")
    eager = unmapped(representative)(x)  # the impl rule's answer, unmapped too
    _close(eager, expected, f"{primitive} eager out_axes=None")


# --- 5. second derivatives of sum and mean reductions --------------------------------------


def _reducing(primitive: str, algorithm: str, op: str):
    kwargs = ({"root": ROOT} if primitive == "reduce" else
              {"tiled": True} if primitive == "reduce_scatter" else {})
    return lambda v: getattr(jaxcoll, primitive)(v, NAME, op=op, algorithm=algorithm, **kwargs)


SECOND = {"allreduce": ("ring", "recursive_doubling", "tree"),
          "reduce_scatter": ("ring", "halving_doubling"), "reduce": ("tree", "binomial")}


@pytest.mark.parametrize("primitive", sorted(SECOND))
def test_second_derivatives_of_sum_and_mean_equal_lax(primitive):
    """grad of grad outside and inside the vmap, op "sum" and "mean" (lax.pmax has no
    derivative, so "max"/"min" have no lax reference)."""
    x, _, v = _inputs()

    @jax.jit
    def program(x, v):
        out = {}
        for op in ("sum", "mean"):
            for a in SECOND[primitive] + ("xla",):
                rank_fn = _reducing(primitive, a, op)
                f = jax.vmap(rank_fn, axis_name=NAME)
                out[op, a] = {"vmap": f(x), "grad(grad(vmap))": _hvp(f)(x, v),
                              "vmap(grad(grad))": jax.vmap(_hvp(rank_fn), axis_name=NAME)(x, v)}
        return out

    results = program(x, v)
    for op in ("sum", "mean"):
        want = results[op, "xla"]
        _nonzero(want, f"{primitive} {op}")
        for a in SECOND[primitive]:
            _close(results[op, a], want, f"{primitive} {a} op={op}")
    _close(results["mean", "xla"]["vmap"], results["sum", "xla"]["vmap"] / N, "mean is sum / n")


MATMULS = {  # jaxcoll's collective matmul, and lax's unfused equivalent
    "allgather_matmul": (lambda x, w, a: jaxcoll.allgather_matmul(x, w, a),
                         lambda x, w, a: jax.lax.all_gather(x, a, tiled=True) @ w),
    "matmul_reduce_scatter": (lambda x, w, a: jaxcoll.matmul_reduce_scatter(x, w, a),
                              lambda x, w, a: jax.lax.psum_scatter(x @ w, a, tiled=True)),
}


@pytest.mark.parametrize("name", sorted(MATMULS))
def test_collective_matmul_compositions_equal_lax(name):
    """grad, jvp and linear_transpose of a vmap over the matmul's own axis, and grad of grad
    in a shard_map (the weight's cotangent fold is a primitive too), equal lax's."""
    ours, theirs = MATMULS[name]
    rng = np.random.default_rng(0)
    rows = N if name == "allgather_matmul" else N * N  # per rank: (rows, 4) @ (4, 5)
    x = jnp.asarray(rng.integers(-3, 4, size=(N, rows, 4)), jnp.float32)
    w = jnp.asarray(rng.integers(-3, 4, size=(N, 4, 5)), jnp.float32)

    def compositions(f):
        mapped = jax.vmap(lambda a, b: f(a, b, NAME), axis_name=NAME)
        loss = lambda a, b: jnp.sum(jnp.sin(mapped(a, b)))  # noqa: E731
        return {"grad∘vmap": jax.grad(loss, argnums=(0, 1))(x, w),
                "jvp∘vmap": jax.jvp(mapped, (x, w), (2 * x, 3 * w))[1],
                "linear_transpose∘vmap": jax.linear_transpose(
                    lambda a: mapped(a, w), x)(mapped(x, w)),
                "grad∘grad": jax.grad(lambda a, b: sum(jnp.sum(g ** 2) for g in jax.grad(
                    loss, argnums=(0, 1))(a, b)), argnums=(0, 1))(x, w)}
    want = jax.jit(lambda: compositions(theirs))()
    _nonzero(want, name)
    # products of sums in other orders than lax's, to second order: rtol 1e-5
    _close(jax.jit(lambda: compositions(ours))(), want, name, rtol=1e-5)
