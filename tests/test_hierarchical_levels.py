"""``hierarchical`` over k levels: one ring per level of a tuple axis (("pod", "node", "gpu"),
a 3-D torus's axes). Schedules verified, costed, bounded, drawn and simulated for level shapes
that are not powers of two; runs against lax's collectives on 3-D and 2-D meshes of the 8 fake
CPU devices, under jit and grad."""

from math import prod

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import jaxcoll
from helpers import (assert_same, count_permutes, exact_inputs, mesh, other_collectives,
                     ours_and_reference)
from jaxcoll.lowering.execute import lower
from jaxcoll.analysis.model import ranking
from jaxcoll.ir.symbolic import dual
from jaxcoll.analysis.topology import nodes, simulate, torus

PRIMITIVES = ("allreduce", "reduce_scatter", "allgather")
SHAPES = [(2, 2, 2), (2, 3, 2), (3, 1, 2), (4, 2), (3, 5), (7,), (1,), (2, 3, 2, 2), (4, 4, 4),
          (3, 4, 5), (2, 1, 3, 1, 5)]
ALPHA, BETA, GAMMA = 1e-5, 1e-9, 3e-10


def _differing_level(shape, src: int, dst: int) -> int:
    """The one level whose coordinate differs between ranks ``src`` and ``dst``."""
    differs = np.flatnonzero(np.array(np.unravel_index(src, shape))
                             != np.array(np.unravel_index(dst, shape)))
    assert len(differs) == 1, (shape, src, dst)
    return int(differs[0])


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_schedules_verify_with_their_duals(shape):
    for primitive in PRIMITIVES:
        schedule = jaxcoll.schedule(primitive, "hierarchical", shape)
        assert (schedule.n_ranks, schedule.collective) == (prod(shape), primitive)
        jaxcoll.verify(schedule)
        jaxcoll.verify(dual(schedule))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_ring_per_level_costs_the_flat_rings_bytes_in_fewer_rounds(shape):
    """2·sum(s_l - 1) rounds (the flat ring: 2(n - 1)), the flat ring's 2(n-1)/n·N bytes and
    (n-1)/n·N reduced; every transfer joins two ranks of one line of one level, and a rank
    sends 2(s_l - 1)·(s_0···s_{l-1}) of its n chunks along level l: inner levels carry more."""
    n, N = prod(shape), 1e6
    schedule = jaxcoll.schedule("allreduce", "hierarchical", shape)
    c = jaxcoll.cost(schedule, N, alpha=1.0, beta=1.0, gamma=1.0)
    assert c.messages == schedule.n_rounds == 2 * sum(s - 1 for s in shape)
    assert c.bytes_sent == pytest.approx(2 * (n - 1) / n * N)
    assert c.bytes_reduced == pytest.approx((n - 1) / n * N)
    sent = np.zeros((n, len(shape)), int)  # (rank, level) chunks sent
    for round_ in schedule.rounds:
        for t in round_:
            sent[t.src, _differing_level(shape, t.src, t.dst)] += len(t.chunks)
    expected = [2 * (s - 1) * prod(shape[:level]) for level, s in enumerate(shape)]
    assert (sent == expected).all()
    bound = jaxcoll.bounds("allreduce", n, N, jaxcoll.Calibration(alpha=1e-12, beta=1.0,
                                                                  gamma=1.0, backend="test"))
    assert schedule.n_rounds >= bound.rounds
    assert c.bytes_sent >= bound.path_bytes * (1 - 1e-12)


def test_one_level_is_the_ring_and_a_level_of_one_adds_nothing():
    for primitive in PRIMITIVES:
        ring = jaxcoll.schedule(primitive, "ring", 6)
        assert (jaxcoll.schedule(primitive, "hierarchical", (6,)).explicit().rounds
                == ring.explicit().rounds)  # the ring stores rank 0's program, written out
        assert (jaxcoll.schedule(primitive, "hierarchical", (3, 1, 2)).rounds
                == jaxcoll.schedule(primitive, "hierarchical", (3, 2)).rounds)


def test_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    schedule = jaxcoll.schedule("allreduce", "hierarchical", (2, 1, 2))
    path = jaxcoll.draw(schedule, tmp_path / "levels.png")
    assert path.stat().st_size > 0 and schedule.name.endswith("2x1x2")


# ----------------------------------------------------------------------------- on links

@pytest.mark.parametrize("shape", [(2, 3, 4), (3, 3, 3), (2, 2, 2)], ids=str)
def test_a_ring_per_dimension_of_a_3d_torus_uses_neighbour_links_only(shape):
    """On the 3-D torus preset every transfer is one hop on a link of its own, so the
    simulation is the α-β-γ cost exactly; above the bounds, and faster than the flat ring
    (whose row-major ring wraps across dimensions) for small and large messages."""
    topology = torus(*shape, alpha=ALPHA, beta=BETA, gamma=GAMMA)
    n = prod(shape)
    for primitive in PRIMITIVES:
        schedule = jaxcoll.schedule(primitive, "hierarchical", shape)
        ring = jaxcoll.schedule(primitive, "ring", n)
        for nbytes in (64.0, 64e6):
            took = simulate(schedule, nbytes, topology).seconds
            assert took == pytest.approx(jaxcoll.cost(schedule, nbytes, alpha=ALPHA, beta=BETA,
                                                      gamma=GAMMA).seconds, rel=1e-12)
            assert took >= jaxcoll.bounds(primitive, n, nbytes,
                                          topology=topology).seconds * (1 - 1e-9)
            assert took < simulate(ring, nbytes, topology).seconds


def test_ranked_on_paper_on_the_topologys_levels():
    """ranking(topology=) prices hierarchical on the topology's own levels: a 3-D torus's
    three dimensions, nodes' (nodes, GPUs); at what simulate() says it takes."""
    for topology in (torus(2, 3, 2, alpha=ALPHA, beta=BETA, gamma=GAMMA),
                     nodes(4, 2, nvlink=(ALPHA / 4, BETA / 8), nic=(ALPHA, BETA), gamma=GAMMA)):
        for primitive in PRIMITIVES:
            schedule = jaxcoll.schedule(primitive, "hierarchical", topology.levels)
            ranked = dict(ranking(primitive, topology.n, 1e6, topology=topology))
            assert ranked["hierarchical"].seconds == simulate(schedule, 1e6, topology).seconds
            assert ranked["hierarchical"].messages == schedule.n_rounds
    assert torus(2, 3, 2, alpha=1, beta=1).levels == (2, 3, 2)
    alone = ranking("allreduce", 4, 1e6, topology=torus(1, 4, alpha=1, beta=1))
    assert "hierarchical" not in dict(alone)  # one level of ranks: the ring


@pytest.mark.parametrize("shape, topology", [
    ((2, 2, 2), nodes(4, 2, nvlink=(ALPHA / 4, BETA / 8), nic=(ALPHA, BETA), gamma=GAMMA)),
    ((2, 2, 4), nodes(4, 4, nvlink=(ALPHA / 4, BETA / 8), nic=(ALPHA, BETA), nics=1,
                      gamma=GAMMA)),
    ((3, 2), torus(3, 2, alpha=ALPHA, beta=BETA, gamma=GAMMA))], ids=["pod-node-gpu",
                                                                      "pod-node-gpu-1nic",
                                                                      "torus"])
def test_simulated_on_the_presets_above_the_bounds(shape, topology):
    """("pod", "node", "gpu") on nodes (the innermost level on a node's switch, the outer two
    across NICs) and (rows, cols) on the 2-D torus: never below bounds(topology=)."""
    n = prod(shape)
    for primitive in PRIMITIVES:
        schedule = jaxcoll.schedule(primitive, "hierarchical", shape)
        for nbytes in (64.0, 64e6):
            took = simulate(schedule, nbytes, topology).seconds
            assert took >= jaxcoll.bounds(primitive, n, nbytes,
                                          topology=topology).seconds * (1 - 1e-9)


def test_bad_level_shapes_are_named():
    for bad in (8, (), (2, 0), (2, 2.0), [2, 4]):
        with pytest.raises(ValueError, match=r"jaxcoll\.schedule: n=.* must be a non-empty "
                                             r"tuple of ints >= 1, the levels' sizes"):
            jaxcoll.schedule("allreduce", "hierarchical", bad)


# ----------------------------------------------------------------------------- against lax

NAMES = ("x", "y", "z")
REFERENCES = {
    "allreduce": (lambda x, axes, algorithm: jaxcoll.allreduce(x, axes, algorithm=algorithm),
                  lambda x, axes: lax.psum(x, axes)),
    "reduce_scatter": (lambda x, axes, algorithm: jaxcoll.reduce_scatter(
        x, axes, dim=1, tiled=True, algorithm=algorithm),
        lambda x, axes: lax.psum_scatter(x, axes, scatter_dimension=1, tiled=True)),
    "allgather": (lambda x, axes, algorithm: jaxcoll.allgather(x, axes, dim=1,
                                                               algorithm=algorithm),
                  lambda x, axes: lax.all_gather(x, axes, axis=1)),
}


# the tuple axes each mesh is checked over: every level in and out of the mesh's order, some
# levels, one level (the ring)
ORDERS = {(2, 2, 2): [("x", "y", "z"), ("z", "x", "y"), ("x", "z"), ("y",)],
          (3, 1, 2): [("x", "y", "z")],
          (4, 2): [("y", "x")]}


@pytest.mark.parametrize("shape", ORDERS, ids=str)
def test_matches_lax_on_the_mesh(shape):
    """jit(shard_map) of hierarchical psum / psum_scatter / all_gather over 3 and 2 mesh axes,
    bit for bit against lax's own."""
    names = NAMES[:len(shape)]
    n, cases = prod(shape), [(p, axes) for axes in ORDERS[shape] for p in PRIMITIVES]

    def fn(x):
        x = x.reshape(x.shape[len(shape):])  # this rank's (3, 120) block
        pairs = ours_and_reference(
            cases, [x] * len(cases),
            lambda case, x: REFERENCES[case[0]][0](x, case[1], "hierarchical"),
            lambda case, x: REFERENCES[case[0]][1](x, case[1]))
        return jax.tree_util.tree_map(lambda y: y[(None,) * len(shape)], pairs)

    grid = mesh(n, shape, names)
    program = jax.jit(jax.shard_map(fn, mesh=grid, in_specs=P(*names), out_specs=P(*names)))
    results = program(exact_inputs(n, (3, 120), jnp.float32).reshape(*shape, 3, 120))
    for case, (got, want) in zip(cases, results):
        assert_same(got, want, f"{case} on {shape}")


def test_grad_is_lax_transpose_on_three_axes():
    """jit(grad) through all three collectives over ("x", "y", "z") equals lax's, bit for bit
    (allreduce's transpose is itself; reduce_scatter's and allgather's each other): the loss is
    linear with small integer weights, so every sum is exact."""
    shape = (2, 2, 2)
    grid = mesh(8, shape, NAMES)

    def loss_of(algorithm):
        def per_rank(x):
            x = x.reshape(x.shape[3:])  # (3, 40)
            total = 0.0
            for primitive, (ours, theirs) in REFERENCES.items():
                out = theirs(x, NAMES) if algorithm == "xla" else ours(x, NAMES, algorithm)
                weights = jnp.arange(out.size).reshape(out.shape) % 7 - 3
                total += jnp.sum(out * weights)
            return total[None, None, None]

        collective = jax.shard_map(per_rank, mesh=grid, in_specs=P(*NAMES),
                                   out_specs=P(*NAMES))
        return jax.jit(jax.grad(lambda x: jnp.sum(collective(x))))

    x = exact_inputs(8, (3, 40), jnp.float32).reshape(*shape, 3, 40)
    assert_same(loss_of("hierarchical")(x), loss_of("xla")(x), "grad over ('x', 'y', 'z')")


def test_hlo_is_the_schedules_permutes_only():
    """Compiled for ("x", "y", "z"): collective-permutes only, one per matching."""
    grid = mesh(8, (2, 2, 2), NAMES)
    program = jax.jit(jax.shard_map(
        lambda x: jaxcoll.allreduce(x, NAMES, algorithm="hierarchical"), mesh=grid,
        in_specs=P(*NAMES), out_specs=P(*NAMES)))
    hlo = program.lower(jnp.zeros((2, 2, 2, 64), jnp.float32)).compile().as_text()
    assert other_collectives(hlo) == []
    segments = lower(jaxcoll.schedule("allreduce", "hierarchical", (2, 2, 2)))
    assert count_permutes(hlo) == sum(len(s.matchings) for s in segments)
