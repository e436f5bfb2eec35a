"""Log-step, bidirectional and two-level algorithms: round counts read from the schedules and
the compiled HLO, bytes from the cost model, hierarchical runs on 2-D meshes, gradients."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import jaxcoll
from helpers import (AXIS, assert_same, count_permutes, exact_inputs, grad_of, mesh,
                     other_collectives, ours_and_reference, per_rank)
from jaxcoll.lowering.execute import lower

LOG_STEP = [("allreduce", "recursive_doubling"), ("allgather", "recursive_doubling"),
            ("allreduce", "halving_doubling"), ("reduce_scatter", "halving_doubling"),
            ("allgather", "bruck"), ("alltoall", "bruck")]
NEW = LOG_STEP + [("allreduce", "bidirectional_ring"), ("reduce_scatter", "bidirectional_ring"),
                  ("allgather", "bidirectional_ring"), ("alltoall", "naive")]


def log2_rounds(n: int) -> int:
    """MPICH's recursive doubling: log2 n at powers of two, else fold + log2 p + unfold."""
    p = 1 << (n.bit_length() - 1)
    return int(math.log2(p)) + (2 if n > p else 0)


@pytest.mark.parametrize("n", range(1, 34))
def test_round_counts(n):
    rounds = {(p, a): jaxcoll.schedule(p, a, n).n_rounds for p, a in NEW}
    log2 = math.ceil(math.log2(n)) if n > 1 else 0
    assert rounds["allgather", "bruck"] == rounds["alltoall", "bruck"] == log2
    assert rounds["allreduce", "recursive_doubling"] == log2_rounds(n)
    assert rounds["allgather", "recursive_doubling"] == log2_rounds(n)
    assert rounds["reduce_scatter", "halving_doubling"] == log2_rounds(n)
    assert rounds["allreduce", "halving_doubling"] == 2 * log2_rounds(n) - (2 if n & (n - 1) else 0)
    if n & (n - 1) == 0:  # powers of two: exactly the textbook counts
        assert rounds["allreduce", "recursive_doubling"] == log2
        assert rounds["allreduce", "halving_doubling"] == 2 * log2
    assert rounds["alltoall", "naive"] == n - 1
    assert rounds["reduce_scatter", "bidirectional_ring"] == n - 1
    assert rounds["allreduce", "bidirectional_ring"] == 2 * (n - 1)


@pytest.mark.parametrize("n", range(3, 12))
def test_bidirectional_ring_sends_one_chunk_each_way_every_round(n):
    for round_ in jaxcoll.schedule("allreduce", "bidirectional_ring", n).rounds:
        steps = sorted(((t.dst - t.src) % n, t.src) for t in round_)
        assert steps == sorted([(1, r) for r in range(n)] + [(n - 1, r) for r in range(n)])
        assert all(len(t.chunks) == 1 for t in round_)


@pytest.mark.parametrize("n", [2, 4, 8, 16, 32])
def test_halving_doubling_is_bandwidth_optimal(n):
    """Rabenseifner: 2 log2 n messages and 2(n-1)/n·N bytes per rank (ring's bytes)."""
    N = 1e6
    cost = jaxcoll.cost(jaxcoll.schedule("allreduce", "halving_doubling", n), N, alpha=1.0,
                        beta=1.0, gamma=1.0)
    assert cost.messages == 2 * int(math.log2(n))
    assert cost.bytes_sent == pytest.approx(2 * (n - 1) / n * N)
    assert cost.bytes_reduced == pytest.approx((n - 1) / n * N)
    doubling = jaxcoll.cost(jaxcoll.schedule("allreduce", "recursive_doubling", n), N,
                            alpha=1.0, beta=1.0)
    assert doubling.bytes_sent == pytest.approx(math.log2(n) * N)


def _call(primitive, algorithm, axis=AXIS):
    """The collective on one rank's x: scattering ones tiled along dim 0."""
    kwargs = {"tiled": True} if primitive in ("reduce_scatter", "alltoall") else {}
    if primitive == "alltoall":
        kwargs.update(split_dim=0, concat_dim=0)
    return lambda x: getattr(jaxcoll, primitive)(x, axis, algorithm=algorithm, **kwargs)


@pytest.mark.parametrize("primitive, algorithm", NEW)
def test_hlo_permutes_are_the_schedules(primitive, algorithm):
    """Only collective-permutes, one per matching of each segment the executor lowers to; for
    the log-step ones (no two rounds alike, so no loop) that is one per round."""
    n = 8
    hlo = per_rank(_call(primitive, algorithm), n).lower(
        jnp.zeros((n, 8 * n), jnp.float32)).compile().as_text()
    assert other_collectives(hlo) == []
    segments = lower(jaxcoll.schedule(primitive, algorithm, n))
    assert count_permutes(hlo) == sum(len(s.matchings) for s in segments)
    if (primitive, algorithm) in LOG_STEP:
        assert count_permutes(hlo) == jaxcoll.schedule(primitive, algorithm, n).n_rounds == 3 * (
            2 if (primitive, algorithm) == ("allreduce", "halving_doubling") else 1)


# ----------------------------------------------------------------------------- two levels

LEVELS = ("node", "gpu")


@pytest.mark.parametrize("shape", [(2, 4), (4, 2), (1, 8), (8, 1), (3, 2)])
def test_hierarchical_matches_builtin_over_both_axes(shape):
    n = shape[0] * shape[1]
    grid = mesh(n, shape, LEVELS)
    # jaxcoll's "xla" is psum, psum_scatter, all_gather over the tuple (or, when XLA rejects
    # an empty array, the empty answer)
    cases = [(p, count) for p in ("allreduce", "reduce_scatter", "allgather")
             for count in (0, 1, 7, 1000)]

    def fn(xs):
        pairs = ours_and_reference(
            cases, [x[0] for x in xs], lambda c, x: _call(c[0], "hierarchical", LEVELS)(x),
            lambda c, x: _call(c[0], "xla", LEVELS)(x))
        return jax.tree_util.tree_map(lambda y: y[None], pairs)

    program = jax.jit(jax.shard_map(fn, mesh=grid, in_specs=P(LEVELS), out_specs=P(LEVELS)))
    inputs = [exact_inputs(n, (n * count if p == "reduce_scatter" else count,), jnp.float32, i)
              for i, (p, count) in enumerate(cases)]
    for case, (got, want) in zip(cases, program(inputs)):
        assert_same(got, want, f"hierarchical {case} on {shape}")


def _chunks_sent(schedule, crossing: bool, inner: int) -> dict:
    """Chunks each rank sends to ranks in other nodes (``crossing``) or its own node."""
    sent = {r: 0 for r in range(schedule.n_ranks)}
    for round_ in schedule.rounds:
        for t in round_:
            if (t.src // inner != t.dst // inner) == crossing:
                sent[t.src] += len(t.chunks)
    return sent


def test_hierarchical_rounds_and_traffic():
    """2(inner-1) + 2(outer-1) rounds and a flat ring's bytes, but each rank sends only
    2(outer-1) of its n chunks across nodes (a flat ring: 2(n-1) for the node's last rank)."""
    outer, inner = 2, 4
    n = outer * inner
    schedule = jaxcoll.schedule("allreduce", "hierarchical", (outer, inner))
    ring = jaxcoll.schedule("allreduce", "ring", n)
    assert schedule.n_rounds == 2 * (inner - 1) + 2 * (outer - 1)
    costs = [jaxcoll.cost(s, 1e6, alpha=0, beta=1) for s in (schedule, ring)]
    assert costs[0].bytes_sent == pytest.approx(costs[1].bytes_sent)
    assert set(_chunks_sent(schedule, True, inner).values()) == {2 * (outer - 1)}
    assert set(_chunks_sent(schedule, False, inner).values()) == {2 * (inner - 1) * outer}
    assert max(_chunks_sent(ring, True, inner).values()) == 2 * (n - 1)


def test_schedule_needs_the_levels_shape():
    with pytest.raises(ValueError, match=r"n=8 must be a non-empty tuple of ints >= 1, the "
                                         r"levels' sizes"):
        jaxcoll.schedule("allreduce", "hierarchical", 8)


# ----------------------------------------------------------------------------- gradients

@pytest.mark.parametrize("algorithm", ["recursive_doubling", "halving_doubling",
                                       "bidirectional_ring", "hierarchical"])
def test_grad_matches_psum(algorithm):
    n = 6
    grid, axes = (mesh(n, (2, 3), LEVELS), LEVELS) if algorithm == "hierarchical" else (
        mesh(n), AXIS)
    ours = grad_of(lambda b: jaxcoll.allreduce(b, axes, algorithm=algorithm), grid, axes)
    ref = grad_of(lambda b: lax.psum(b, axes), grid, axes)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(n, 11)), jnp.float32)
    np.testing.assert_allclose(ours(x), ref(x), rtol=1e-5, atol=1e-6)
