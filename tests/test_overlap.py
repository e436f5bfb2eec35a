"""Overlap (overlap.py, stream.py): folds over arriving blocks, reduce-scatters of contributions
made on demand, and the collective matmuls built on them, against the lax built-ins."""

import itertools
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.ad_checkpoint import print_saved_residuals
from jax.sharding import PartitionSpec as P

import jaxcoll
from jaxcoll.lowering.stream import piece_bounds, stream, streaming_algorithms

from helpers import AXIS, count_permutes, mesh, other_collectives

N = 8
STREAMS = ("ring", "bidirectional_ring")
# (rows, k, p) per rank: one row (a bidirectional half is empty), odd, and no rows at all
SHAPES = ((1, 3, 2), (5, 4, 3), (0, 2, 2))


def _ints(shape, seed):
    """Small integers as float32: every sum of products of them is exact in any order."""
    return np.random.default_rng(seed).integers(-4, 5, size=shape).astype(np.float32)


def _sharded(fn, n, check_vma=True, in_specs=P(AXIS), out_specs=P(AXIS)):
    return jax.jit(jax.shard_map(fn, mesh=mesh(n), in_specs=in_specs, out_specs=out_specs,
                                 check_vma=check_vma))


# ----------------------------------------------------------------------------- the streams

def test_which_schedules_stream():
    """Ring and bidirectional ring stream, the others do not (a rank sends on blocks it got
    rounds ago, or many at once): computed from the schedules, for both directions."""
    assert streaming_algorithms("allgather") == tuple(sorted(STREAMS))
    assert streaming_algorithms("reduce_scatter") == tuple(sorted(STREAMS))
    for algorithm in ("naive", "recursive_doubling", "bruck"):
        assert stream("allgather", algorithm, 6) is None
    assert stream("reduce_scatter", "halving_doubling", 8) is None
    assert stream("allgather", "bidirectional_ring", 5).pieces == 2


@pytest.mark.parametrize("primitive", ["allgather", "reduce_scatter"])
def test_streams_deliver_every_chunk_once(primitive):
    """Simulated on sets, n = 1..16: a fold sees every other rank's every piece once; a
    reduce-scatter's partial sums end at their owners holding every rank's contribution."""
    for algorithm, n in itertools.product(STREAMS, range(1, 17)):
        s = stream(primitive, algorithm, n)
        chunks = range(n * s.pieces)
        if primitive == "allgather":
            for r in range(n):
                got = sorted(h.chunk[r] for hops in s.rounds for h in hops)
                assert got == [c for c in chunks if c // s.pieces != r]
            continue
        held = []  # per rank, per hop of the last round: (chunk, contributors to its sum)
        for hops in s.rounds:
            arrived = [[None] * len(hops) for _ in range(n)]
            for k, h in enumerate(hops):
                for src, dst in h.perm:
                    if h.forwards is None:
                        contributors = set()
                    else:
                        chunk, contributors = held[src][h.forwards]
                        assert chunk == h.chunk[src]  # it sends on the sum it received
                    arrived[dst][k] = (h.chunk[src], contributors | {src})
            held = arrived
        for r, p in itertools.product(range(n), range(s.pieces)):
            if n > 1:
                chunk, contributors = held[r][s.finals[p]]
                assert chunk == r * s.pieces + p and contributors | {r} == set(range(n))


def test_piece_bounds_split_like_array_split():
    for rows, pieces in itertools.product(range(6), (1, 2, 3)):
        bounds = piece_bounds(rows, pieces)
        assert [size for _, size in bounds] == [len(a) for a in
                                                np.array_split(np.arange(rows), pieces)]
        assert [start for start, _ in bounds] == [int(a[0]) if len(a) else sum(
            len(b) for b in np.array_split(np.arange(rows), pieces)[:i])
            for i, a in enumerate(np.array_split(np.arange(rows), pieces))]


# ----------------------------------------------------------------------------- collective matmul

def _matmul_cases(x, w):
    """Every (algorithm, shape) case of both matmuls and their lax references, one program."""
    out = {}
    for (rows, k, p), algorithm in itertools.product(SHAPES, (*STREAMS, "xla")):
        xs, ws = x[:rows, :k], w[:k, :p]
        out["ag", rows, algorithm] = jaxcoll.allgather_matmul(xs, ws, AXIS, algorithm=algorithm)
        xs_full = jnp.tile(x[:rows, :k], (lax.axis_size(AXIS), 1)) * (1 + lax.axis_index(AXIS))
        out["rs", rows, algorithm] = jaxcoll.matmul_reduce_scatter(xs_full, ws, AXIS,
                                                                   algorithm=algorithm)
    return out


@pytest.mark.sweep
@pytest.mark.parametrize("n", range(1, N + 1))
def test_collective_matmuls_equal_the_references(n):
    """allgather_matmul == all_gather(tiled) @ w, matmul_reduce_scatter == psum_scatter(x @ w),
    bit for bit on integer-valued floats; one row (an empty bidirectional half), odd, none."""
    x, w = _ints((n * 5, 4), 0), _ints((n * 4, 3), 1)
    out = _sharded(_matmul_cases, n)(x, w)
    for (kind, rows, algorithm), got in out.items():
        want = out[kind, rows, "xla"]
        assert got.shape == want.shape, (kind, rows, algorithm)
        np.testing.assert_array_equal(got, want, err_msg=f"{kind} {rows} {algorithm}")


def _matmul_losses(algorithm):
    def loss(x, w):
        y = jaxcoll.allgather_matmul(x, w, AXIS, algorithm=algorithm)
        z = jaxcoll.matmul_reduce_scatter(jnp.sin(y), w.T, AXIS, algorithm=algorithm)
        return jnp.sum(jnp.cos(z) * jnp.arange(z.size).reshape(z.shape))
    return loss


@pytest.mark.parametrize("check_vma", [True, False])
def test_matmul_gradients_equal_the_references(check_vma):
    """grad, jvp and vjp through both matmuls (bidirectional ring; the ring is the same code
    with one piece) equal lax's, on 5 ranks with 3 rows each."""
    n = 5
    x, w = _ints((n * 3, 4), 2), _ints((n * 4, 3), 3) / 4

    def program(x, w):
        results = []
        for algorithm in ("bidirectional_ring", "xla"):
            loss = _matmul_losses(algorithm)
            grads = jax.grad(loss, argnums=(0, 1))(x, w)
            tangent = jax.jvp(loss, (x, w), (jnp.cos(x), jnp.sin(w)))[1]
            results.append((grads, tangent[None]))
        return results

    (ours, ours_t), (ref, ref_t) = _sharded(program, n, check_vma)(x, w)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(ours_t, ref_t, rtol=2e-5)


def _residual_shapes(fn, *args) -> list[str]:
    """The shapes print_saved_residuals lists for ``fn`` (what grad keeps for the backward)."""
    import contextlib
    import io
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        print_saved_residuals(fn, *args)
    return text.getvalue()


def test_memory_holds_no_gathered_buffer():
    """n = 8: XLA's temporary memory for allgather_matmul and matmul_reduce_scatter is at most
    half the unfused reference's (which holds the gathered x, or all of x @ w), and grad keeps
    only this rank's x and w for the backward, not the gathered x."""
    n, rows, k, p = 8, 64, 128, 128
    x, w = jnp.ones((n * rows, k)), jnp.ones((n * k, p))
    x_full = jnp.ones((n * n * rows, k))
    temp = {}
    for algorithm in (*STREAMS, "xla"):
        ag = _sharded(lambda x, w: jaxcoll.allgather_matmul(x, w, AXIS, algorithm=algorithm), n)
        rs = _sharded(lambda x, w: jaxcoll.matmul_reduce_scatter(x, w, AXIS,
                                                                 algorithm=algorithm), n)
        temp["ag", algorithm] = ag.lower(x, w).compile().memory_analysis().temp_size_in_bytes
        temp["rs", algorithm] = rs.lower(x_full, w).compile().memory_analysis().temp_size_in_bytes
    gathered = n * rows * k * 4
    assert temp["ag", "xla"] >= gathered and temp["rs", "xla"] >= gathered  # what we beat
    for kind, algorithm in itertools.product(("ag", "rs"), STREAMS):
        assert temp[kind, algorithm] <= temp[kind, "xla"] / 2, temp

    def saved(algorithm):
        fn = jax.shard_map(lambda x, w: jnp.sum(jaxcoll.allgather_matmul(
            x, w, AXIS, algorithm=algorithm))[None], mesh=mesh(n), in_specs=P(AXIS),
            out_specs=P(AXIS))
        return _residual_shapes(fn, x, w)
    gathered_x = f"f32[{n * n * rows},{k}]"  # every rank's gathered x, as shard_map shows it
    assert gathered_x in saved("xla"), saved("xla")  # the reference keeps it for the backward
    assert gathered_x not in saved("ring") and f"f32[{n * rows},{k}]" in saved("ring")


def _computation(hlo: str, name: str) -> str:
    """The instructions of computation ``name`` in compiled HLO text."""
    head = re.search(r"^%?" + re.escape(name) + r" .*\{$", hlo, re.MULTILINE)
    return hlo[head.end():hlo.index("\n}", head.end())]


def test_compiled_matmul_loop_interleaves_dots_and_permutes():
    """The compiled allgather_matmul is ppermutes only (no all-gather) in one while loop whose
    body holds the round's transfers and its dots (XLA's CPU collective-permute is synchronous:
    no start/done pair; the body is what a GPU's latency-hiding scheduler overlaps)."""
    n = 8
    x, w = jnp.ones((n * 16, 32)), jnp.ones((n * 32, 8))
    fn = _sharded(lambda x, w: jaxcoll.allgather_matmul(x, w, AXIS,
                                                        algorithm="bidirectional_ring"), n)
    hlo = fn.lower(x, w).compile().as_text()
    assert other_collectives(hlo) == []
    (body_name,) = re.findall(r" while\(.*body=%?([\w.\-]+)", hlo)
    body = _computation(hlo, body_name)
    assert count_permutes(body) == 2  # one each way round
    called = re.findall(r"calls=%?([\w.\-]+)", body)
    dots = [c for c in called if " dot(" in _computation(hlo, c)] + re.findall(" dot\\(", body)
    assert len(dots) == 2  # this round's two arriving halves, multiplied beside the transfers


# ----------------------------------------------------------------------------- fold and from

def _fold_cases(x, y):
    """allgather_fold of a pytree (a sum weighted by row, and the order of the starts) and
    reduce_scatter_from of a pytree, for every algorithm, in one program."""
    n, me = lax.axis_size(AXIS), lax.axis_index(AXIS)
    rows = x.shape[0]
    out = {}
    for algorithm in (*STREAMS, "xla"):
        def fn(acc, block, start):
            total, order, count = acc
            weights = (start + jnp.arange(block["a"].shape[0]))[:, None].astype(jnp.float32)
            total = total + jnp.sum(block["a"] * weights) + jnp.sum(block["b"])
            return total, order.at[count].set(start), count + 1
        init = (jnp.float32(0), jnp.full((2 * n,), -1, jnp.int32), 0)
        out["fold", algorithm] = jaxcoll.allgather_fold({"a": x, "b": y}, AXIS, fn, init,
                                                        algorithm=algorithm)

        def contribution(start, size):  # rows start.. of this rank's (n * rows, ...) array
            index = (start + jnp.arange(size)).astype(jnp.float32)
            return {"a": index[:, None] * (me + 1) + x[:1] * 0 + jnp.ones((size, 3)),
                    "b": jnp.ones((size,)) * me}
        out["from", algorithm] = jaxcoll.reduce_scatter_from(contribution, AXIS, rows,
                                                             algorithm=algorithm)
    return out


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_fold_and_from_equal_the_references(n):
    rows = 3
    x, y = _ints((n * rows, 3), 4), _ints((n * rows,), 5)
    per_rank = _sharded(lambda x, y: jax.tree.map(lambda a: jnp.asarray(a)[None],
                                                  _fold_cases(x, y)), n)
    out = per_rank(x, y)  # each leaf (n, ...): rank r's result in row r
    for algorithm, calls in (("ring", n), ("bidirectional_ring", 1 + 2 * (n - 1))):
        np.testing.assert_array_equal(out["fold", algorithm][0], out["fold", "xla"][0])
        np.testing.assert_array_equal(out["fold", algorithm][2], calls)  # fn calls per rank
        for leaf in ("a", "b"):
            np.testing.assert_array_equal(out["from", algorithm][leaf],
                                          out["from", "xla"][leaf])
    # the ring folds this rank's block, then rank - 1's, rank - 2's, ...
    ring_order = out["fold", "ring"][1][:, :n]
    want = [[(r - s) % n * rows for s in range(n)] for r in range(n)]
    np.testing.assert_array_equal(ring_order, want)
    # bidirectional: its own block, then rows 0..1 of the others' from the left, row 2 from
    # the right (the halves of 3 rows: 2 and 1)
    starts = out["fold", "bidirectional_ring"][1][:, :2 * n - 1]
    for r in range(n):
        left = [(r - s) % n * rows for s in range(1, n)]
        right = [(r + s) % n * rows + 2 for s in range(1, n)]
        assert list(starts[r]) == [r * rows] + [v for pair in zip(left, right) for v in pair]


# ----------------------------------------------------------------------------- transformations

def test_vmap_over_a_batch_and_as_the_mesh():
    """vmap over a batch inside shard_map, and vmap(axis_name=...) standing in for the mesh,
    equal the lax references."""
    n = 4
    x, w = _ints((2, n * 3, 4), 6), _ints((4, 2), 7)  # a batch of 2, rows sharded

    def both(x, w):  # x: this rank's (2, 3, 4)
        ours = jax.vmap(lambda a: jaxcoll.allgather_matmul(a, w, AXIS))(x)
        return ours, jax.vmap(lambda a: lax.all_gather(a, AXIS, tiled=True) @ w)(x)
    batched = _sharded(both, n, in_specs=(P(None, AXIS), P()), out_specs=P(None, AXIS))
    ours, ref = batched(x, w)
    np.testing.assert_array_equal(ours, ref)
    as_mesh = jax.jit(jax.vmap(lambda a: (jaxcoll.allgather_matmul(a, w, "v"),
                                          lax.all_gather(a, "v", tiled=True) @ w),
                               axis_name="v"))
    ours, ref = as_mesh(x[0].reshape(n, 3, 4))  # rank r's (3, 4) in row r
    np.testing.assert_array_equal(ours, ref)


def test_tuple_axis_in_either_order_and_remat():
    """A tuple axis numbers ranks as lax.axis_index does, in either order; remat keeps the
    gradient."""
    grid = mesh(8, (2, 4), ("a", "b"))
    x, w = _ints((8 * 2, 3), 8), _ints((8 * 3, 2), 9)
    for axes in (("a", "b"), ("b", "a")):
        def program(x, w, axes=axes):
            ours = jax.checkpoint(lambda x, w: jaxcoll.allgather_matmul(x, w, axes))
            ref = lambda x, w: lax.all_gather(x, axes, tiled=True) @ w  # noqa: E731
            grads = [jax.grad(lambda x, w: jnp.sum(jnp.sin(f(x, w))), argnums=(0, 1))(x, w)
                     for f in (ours, ref)]
            return ours(x, w), ref(x, w), grads
        fn = jax.jit(jax.shard_map(program, mesh=grid, in_specs=P(("a", "b")),
                                   out_specs=P(("a", "b"))))
        ours, ref, (g_ours, g_ref) = fn(x, w)
        np.testing.assert_array_equal(ours, ref)
        for a, b in zip(g_ours, g_ref):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- the example

@pytest.mark.subprocess_jax
def test_ring_attention_example_checks():
    """examples/ring_attention.py --check: outputs and gradients, causal and not, both rings,
    within 1e-5 of full attention; memory per rank flat in the number of ranks (seconds)."""
    example = Path(__file__).resolve().parents[1] / "examples" / "ring_attention.py"
    done = subprocess.run([sys.executable, str(example), "--check"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "check: ring attention matches full attention" in done.stdout
    assert "does not grow with the number of ranks" in done.stdout
