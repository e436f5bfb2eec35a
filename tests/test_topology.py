"""The topology simulator (jaxcoll.analysis.topology): equal to cost() where no link is shared,
contention and concurrency priced by hand-derived numbers, routes, lower bounds on a topology,
the published numbers it is checked against, and the scale it runs at. No JAX: plain arithmetic."""

import numpy as np
import pytest

import jaxcoll
from jaxcoll.ir.families import SCHEDULES, build_schedule
from jaxcoll.analysis.model import bounds, choose, ranking
from jaxcoll.ir.schedules import Schedule, split_round
from jaxcoll.analysis.systems import validation
from jaxcoll.analysis.topology import nodes, ring, shared, simulate, switch, torus

pytestmark = pytest.mark.jax_free  # runs no JAX (schedules, models, pages): the same on every jax

ALPHA, BETA, GAMMA = 1e-5, 1e-9, 3e-10


def _levels(n: int) -> list[tuple[int, ...]]:
    """The level shapes hierarchical is checked on for n ranks: 2 x n/2 for even n, and
    2 x 2 x n/4 too where n/4 >= 2."""
    return [(2, n // 2)] * (n % 2 == 0) + [(2, 2, n // 4)] * (n % 4 == 0 and n >= 8)


def _schedules(ns, two_level=False):
    """(primitive, algorithm, schedule) for every registered schedule at ``ns``, roots 0 and
    n-1, pipelined ones in 3 pieces; hierarchical ones (if ``two_level``) on two and three
    levels (:func:`_levels`)."""
    for primitive, entries in SCHEDULES.items():
        for algorithm, entry in entries.items():
            if entry.two_level:
                for shape in (shape for n in ns if two_level for shape in _levels(n)):
                    yield primitive, algorithm, build_schedule(primitive, algorithm, shape)
                continue
            for n in ns:
                for root in sorted({0, n - 1} if entry.rooted else {0}):
                    yield primitive, algorithm, build_schedule(primitive, algorithm, n, root,
                                                               3 if entry.pipelined else 1)


def test_matching_by_matching_on_a_switch_is_cost():
    """On a switch no transfer of a matching shares a link, so the executor's order (one
    ppermute per matching) costs what cost() says, for every registered schedule, n = 1..8."""
    for primitive, algorithm, schedule in _schedules(range(1, 9), two_level=True):
        n = schedule.n_ranks
        expected = jaxcoll.cost(schedule, 1000.0, alpha=ALPHA, beta=BETA, gamma=GAMMA).seconds
        topology = switch(n, alpha=ALPHA, beta=BETA, gamma=GAMMA)
        exact = simulate(schedule, 1000.0, topology, concurrent=False).seconds
        assert exact == pytest.approx(expected, rel=1e-12), (primitive, algorithm, n)
        together = simulate(schedule, 1000.0, topology).seconds
        assert together <= expected * (1 + 1e-12), (primitive, algorithm, n)
        if all(len(split_round(r)) == 1 for r in schedule.rounds):  # nothing to overlap
            assert together == pytest.approx(expected, rel=1e-12), (primitive, algorithm, n)


def test_shared_links_split_their_bandwidth():
    """Two transfers into one rank share its down link: 2 x 1 MB at β, plus α; on a ring the
    one-hop and the two-hop transfer share the link 1->2; the receiver reduces both: 2 MB x γ."""
    one_mb = 1e6
    into_two = Schedule.build("two into one", 3, n_chunks=1, rounds=[
        [jaxcoll.Transfer(0, 2, 0, True), jaxcoll.Transfer(1, 2, 0, True)]])
    on_switch = simulate(into_two, one_mb, switch(3, alpha=ALPHA, beta=BETA, gamma=GAMMA))
    assert on_switch.seconds == pytest.approx(ALPHA + 2 * one_mb * BETA + 2 * one_mb * GAMMA)
    assert on_switch.round_links(0) == {"0->switch": one_mb, "1->switch": one_mb,
                                        "switch->2": 2 * one_mb}
    along = Schedule.build("along a ring", 5, n_chunks=1, rounds=[
        [jaxcoll.Transfer(0, 2, 0, False), jaxcoll.Transfer(1, 2, 0, False)]])
    on_ring = simulate(along, one_mb, ring(5, alpha=ALPHA, beta=BETA))
    assert on_ring.seconds == pytest.approx(2 * ALPHA + 2 * one_mb * BETA)  # 0->1->2, 1->2 shared
    assert on_ring.topology.link_names[on_ring.busiest_link[0]] == "1->2"
    assert on_ring.link_bytes().sum() == pytest.approx(3 * one_mb)


def test_disjoint_links_run_at_once():
    """The bidirectional ring sends each half of the data one way round: on a full-duplex ring
    it takes half the ring's bandwidth time (and the ring's rounds), on a switch, where both
    halves leave by one port, the ring's time; executed matching by matching, 2x the messages."""
    n, nbytes = 8, 64e6
    ring_ar = build_schedule("allreduce", "ring", n)
    both_ways = build_schedule("allreduce", "bidirectional_ring", n)
    links = ring(n, alpha=ALPHA, beta=BETA)
    chunk_time = ALPHA + nbytes / n * BETA
    assert simulate(ring_ar, nbytes, links).seconds == pytest.approx(2 * (n - 1) * chunk_time)
    assert simulate(both_ways, nbytes, links).seconds == pytest.approx(
        2 * (n - 1) * (ALPHA + nbytes / n / 2 * BETA))
    port = switch(n, alpha=ALPHA, beta=BETA)
    assert simulate(both_ways, nbytes, port).seconds == pytest.approx(2 * (n - 1) * chunk_time)
    assert simulate(both_ways, nbytes, links, concurrent=False).seconds == pytest.approx(
        2 * (n - 1) * 2 * (ALPHA + nbytes / n / 2 * BETA))


def test_routes_are_shortest_paths():
    """Ring: the shorter way round; torus: along the row, then the column; nodes: NVSwitch
    inside a node, the GPU's NIC between nodes."""
    assert ring(8, alpha=1, beta=1).route(0, 5) == ["0->7", "7->6", "6->5"]
    assert ring(8, alpha=1, beta=1, bidirectional=False).route(0, 5) == [
        "0->1", "1->2", "2->3", "3->4", "4->5"]
    mesh = torus(4, 4, alpha=1, beta=1)
    assert mesh.route(0, 10) == ["0->east", "1->east", "2->south", "6->south"]
    assert mesh.route(0, 15) == ["0->west", "3->north"]
    for src in range(16):
        for dst in range(16):
            rows, cols = abs(src // 4 - dst // 4), abs(src % 4 - dst % 4)
            assert len(mesh.route(src, dst)) == min(rows, 4 - rows) + min(cols, 4 - cols)
    cluster = nodes(2, 4, nvlink=(1, 1), nic=(1, 1), nics=2)
    assert cluster.route(1, 2) == ["gpu1->nvswitch", "nvswitch->gpu2"]
    assert cluster.route(3, 6) == ["node0.nic1->fabric", "fabric->node1.nic1"]
    assert list(cluster.channel_ranks(1)) == [1, 2, 3, 0, 5, 6, 7, 4]
    assert (mesh.levels, cluster.levels) == ((4, 4), (2, 4))


# a hop along each dimension of a 3-D torus, innermost first: (dimension, step)
HOPS = {"east": (2, 1), "west": (2, -1), "south": (1, 1), "north": (1, -1), "up": (0, 1),
        "down": (0, -1)}


@pytest.mark.parametrize("dims", [(2, 3, 4), (3, 1, 5)], ids=str)
def test_a_3d_torus_routes_to_neighbours_innermost_dimension_first(dims):
    """Walked hop by hop from src, every route of torus(x, y, z) leaves each rank by one of
    its own links to a neighbour along one dimension, innermost dimensions first, the shorter
    way round each, and arrives at dst."""
    cube = torus(*dims, alpha=1, beta=1)
    n = int(np.prod(dims))
    assert (cube.n, cube.levels, len(cube.link_names)) == (n, dims, 6 * n)
    for src in range(n):
        for dst in range(n):
            at, dims_walked = list(np.unravel_index(src, dims)), []
            for link in cube.route(src, dst):
                owner, way = link.split("->")
                assert int(owner) == np.ravel_multi_index(at, dims), (src, dst, link)
                dim, step = HOPS[way]
                at[dim] = (at[dim] + step) % dims[dim]
                dims_walked.append(dim)
            assert np.ravel_multi_index(at, dims) == dst
            assert dims_walked == sorted(dims_walked, reverse=True)
            apart = np.abs(np.subtract(np.unravel_index(src, dims), np.unravel_index(dst, dims)))
            assert len(dims_walked) == np.minimum(apart, np.subtract(dims, apart)).sum()


def test_a_torus_of_one_or_four_dimensions():
    """One dimension is a full-duplex ring (routes as long, the same simulated times); four
    dimensions route as far as the sum of each one's shorter distance; bad ones are named."""
    line, loop = torus(8, alpha=ALPHA, beta=BETA), ring(8, alpha=ALPHA, beta=BETA)
    assert line.route(0, 5) == ["0->west", "7->west", "6->west"] and len(loop.route(0, 5)) == 3
    for algorithm in ("ring", "bidirectional_ring", "recursive_doubling"):
        schedule = build_schedule("allreduce", algorithm, 8)
        assert simulate(schedule, 1e6, line).seconds == simulate(schedule, 1e6, loop).seconds
    tesseract = torus(2, 3, 2, 3, alpha=1, beta=1)
    # (0, 0, 0, 0) to (1, 2, 1, 2): back round the innermost, forward, back round, forward
    assert tesseract.route(0, 35) == ["0->west", "2->south", "5->down", "17->dim0+"]
    for bad in ((), (2, 0), (2, 2.0), (True, 2)):
        with pytest.raises(ValueError, match=r"torus: dims=.*must be one or more ints >= 1"):
            torus(*bad, alpha=1, beta=1)


TOPOLOGIES = {
    "switch": lambda n: switch(n, alpha=ALPHA, beta=BETA, gamma=GAMMA),
    "ring": lambda n: ring(n, alpha=ALPHA, beta=BETA, gamma=GAMMA),
    "torus": lambda n: torus(2, n // 2, alpha=ALPHA, beta=BETA, gamma=GAMMA),
    "3-D torus": lambda n: torus(2, 2, n // 4, alpha=ALPHA, beta=BETA, gamma=GAMMA),
    "nodes": lambda n: nodes(2, n // 2, nvlink=(ALPHA / 4, BETA / 8), nic=(ALPHA, BETA),
                             nics=1, gamma=GAMMA),
    "shared": lambda n: shared(n, alpha=ALPHA, beta=BETA / 8, overhead=ALPHA / 3, gamma=GAMMA),
}


@pytest.mark.parametrize("kind", TOPOLOGIES)
def test_no_schedule_beats_the_bounds_on_a_topology(kind):
    """bounds(topology=) is a lower bound of simulate() for every registered schedule
    (hierarchical ones on two and three levels), small and large messages, and what limits it
    is named."""
    ns = {"torus": (2, 4, 6, 8), "nodes": (2, 4, 6, 8), "3-D torus": (12,)}.get(
        kind, (2, 3, 5, 8))
    for nbytes in (64.0, 64e6):
        for primitive, algorithm, schedule in _schedules(ns, two_level=True):
            n = schedule.n_ranks
            topology = TOPOLOGIES[kind](n)
            bound = bounds(primitive, n, nbytes, topology=topology)
            took = simulate(schedule, nbytes, topology).seconds
            assert took >= bound.seconds * (1 - 1e-9), (kind, primitive, algorithm, n, nbytes)
    cluster = TOPOLOGIES["nodes"](8)
    assert "NIC" in bounds("allreduce", 8, 1e9, topology=cluster).limit
    assert "port" in bounds("allreduce", 8, 1e9, topology=switch(8, alpha=1, beta=1)).limit
    assert "shared" in bounds("allreduce", 8, 1e9, topology=TOPOLOGIES["shared"](8)).limit


def test_the_ranking_on_paper_follows_the_links():
    """Recursive doubling for small messages on a switch; the bidirectional ring, which uses
    both directions of every link, on a torus; the hierarchical one across nodes; a chain
    broadcast near N·β for large ones; double tree pipelined by the model near its bound."""
    port = switch(8, alpha=5e-6, beta=1 / 370e9)
    assert choose("allreduce", 8, 4096, topology=port) == "recursive_doubling"
    assert choose("allreduce", 64, 64 << 20, topology=torus(8, 8, alpha=1e-6, beta=1 / 45e9)) \
        == "bidirectional_ring"
    cluster = nodes(4, 8, nvlink=(3e-6, 1 / 370e9), nic=(1e-5, 1 / 50e9))
    assert choose("allreduce", 32, 256 << 20, topology=cluster) == "hierarchical"
    assert choose("broadcast", 8, 1 << 30, topology=port) == "chain"
    ranked = dict(ranking("allreduce", 8, 1 << 30, topology=port))
    bound = bounds("allreduce", 8, 1 << 30, topology=port).seconds
    assert ranked["double_tree"].seconds < 1.3 * bound
    assert ranked["double_tree"].messages > 50  # pipelined in many pieces


def test_published_numbers_within_15_percent():
    """The simulator with documented link parameters (jaxcoll/analysis/systems.py) predicts the
    published busbw of NCCL's ring within 15% (bench/MODEL.md, "Real links")."""
    rows = validation()
    assert len(rows) >= 3
    for published, predicted, error in rows:
        assert abs(error) <= 0.15, (published.system, predicted, published.busbw)


def test_simulates_1024_ranks():
    """n = 1024 on 128 nodes x 8: the log-round schedules here (the whole registry behind
    --deep, ~1 minute, most of it building the schedules)."""
    cluster = nodes(128, 8, nvlink=(3e-6, 1 / 370e9), nic=(1e-5, 1 / 50e9))
    for algorithm in ("tree", "double_tree", "recursive_doubling", "halving_doubling"):
        took = simulate(build_schedule("allreduce", algorithm, 1024), 1 << 26, cluster)
        assert took.seconds > bounds("allreduce", 1024, 1 << 26, topology=cluster).seconds


@pytest.mark.skipif("not config.getoption('--deep')")
def test_simulates_every_algorithm_at_1024_ranks():
    cluster = nodes(128, 8, nvlink=(3e-6, 1 / 370e9), nic=(1e-5, 1 / 50e9))
    for primitive, algorithm, schedule in _schedules([1024]):
        took = simulate(schedule, 1 << 26, cluster)
        assert took.seconds >= bounds(primitive, 1024, 1 << 26, topology=cluster).seconds


def test_misuse_is_named():
    with pytest.raises(ValueError, match="8 ranks, the topology 'switch' 4"):
        simulate(build_schedule("allreduce", "ring", 8), 1.0, switch(4, alpha=1, beta=1))
    with pytest.raises(ValueError, match="channels=2 moves a broadcast's root"):
        simulate(build_schedule("broadcast", "binomial", 4), 1.0, switch(4, alpha=1, beta=1),
                 channels=2)
    with pytest.raises(ValueError, match="channels=0"):
        simulate(build_schedule("allreduce", "ring", 4), 1.0, switch(4, alpha=1, beta=1),
                 channels=0)
    assert np.isclose(simulate(build_schedule("allreduce", "ring", 1), 8.0,
                               switch(1, alpha=1, beta=1)).seconds, 0.0)
