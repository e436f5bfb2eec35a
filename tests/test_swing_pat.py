"""Swing allreduce and PAT allgather / reduce_scatter: their peers and trees against the papers'
definitions (computed here from scratch), the rounds and bytes their docstrings claim, and
where the simulator says they win. No JAX: the registry sweeps run them against lax for
n = 1..8 (test_collectives.py) and verify them to n = 64 (test_verify.py)."""

import math

import pytest

import jaxcoll
from jaxcoll.ir.families import build_schedule
from jaxcoll.analysis.model import choose, cost, ranking
from jaxcoll.analysis.topology import nodes, ring, simulate, switch, torus

pytestmark = pytest.mark.jax_free  # runs no JAX (schedules, models, pages): the same on every jax

POWERS = (2, 4, 8, 16, 32, 64)
LINK = dict(alpha=1e-6, beta=1 / 45e9)  # per hop, 45 GB/s each way


def swing_peer(rank: int, step: int, p: int) -> int:
    """The paper's π(r, s), with ρ(s) summed term by term."""
    rho = sum((-2) ** i for i in range(step + 1))
    return (rank + rho) % p if rank % 2 == 0 else (rank - rho) % p


def pairs(round_) -> dict[int, int]:
    return {t.src: t.dst for t in round_}


def test_swing_exchanges_with_the_papers_peers():
    """At powers of two, 2 log2 n rounds: reduce-scatter step s is round s, allgather step s
    round 2 log2 n - 1 - s, and both pair every rank r with π(r, s); the first halves reduce,
    the second copy, and the blocks sent halve (reduce-scatter) then double (allgather)."""
    for n in POWERS:
        steps = n.bit_length() - 1
        schedule = build_schedule("allreduce", "swing", n)
        assert schedule.n_rounds == 2 * steps
        for step in range(steps):
            peers = {r: swing_peer(r, step, n) for r in range(n)}
            for index, reduce in ((step, True), (2 * steps - 1 - step, False)):
                round_ = schedule.rounds[index]
                assert pairs(round_) == peers, (n, step, reduce)
                assert {(t.reduce, len(t.chunks)) for t in round_} == {(reduce, n >> step + 1)}


def test_swing_sends_the_big_halves_the_shortest_way():
    """On a ring of n (a power of two), reduce-scatter step s of Swing sends its n/2^(s+1)
    blocks |ρ(s)| = 1, 1, 3, 5, 11, 21 hops; recursive halving sends as many blocks
    n/2^(s+1) = 32, 16, ..., 1 hops: never fewer."""
    n = 64
    links = ring(n, **LINK)
    swing = build_schedule("allreduce", "swing", n)
    halving = build_schedule("allreduce", "halving_doubling", n)
    for step, want in enumerate([1, 1, 3, 5, 11, 21]):
        hops = {len(links.route(t.src, t.dst)) for t in swing.rounds[step]}
        assert hops == {want} and {len(t.chunks) for t in swing.rounds[step]} == {n >> step + 1}
        assert {len(links.route(t.src, t.dst)) for t in halving.rounds[step]} == {n >> step + 1}


def test_swing_costs_what_halving_doubling_costs_where_hops_are_free():
    """Same rounds for every n; at powers of two the same α-β-γ cost, the bandwidth bound's
    2(n-1)/n·N bytes, and on a switch the same simulated time."""
    for n in range(1, 65):
        swing, halving = (build_schedule("allreduce", a, n) for a in ("swing", "halving_doubling"))
        assert swing.n_rounds == halving.n_rounds, n
    for n in POWERS:
        swing, halving = (build_schedule("allreduce", a, n) for a in ("swing", "halving_doubling"))
        priced = [cost(s, 1 << 20, alpha=1e-5, beta=1e-9, gamma=1e-10) for s in (swing, halving)]
        assert priced[0] == priced[1]
        assert priced[0].bytes_sent == pytest.approx(2 * (n - 1) / n * (1 << 20))
        port = switch(n, **LINK)
        assert simulate(swing, 1 << 20, port).seconds == pytest.approx(
            simulate(halving, 1 << 20, port).seconds)


def test_pat_trees_halve_the_distance_for_any_n():
    """ceil(log2 n) rounds at the (n-1)/n·N bound for every n to 64; allgather round k sends
    to r + d, d = 2^(L-1-k) (farthest first), exactly the blocks r - u, u = 0, 2d, ... with
    u + d < n; reduce_scatter is that run backwards, reducing (NCCL's r - 2^k peers)."""
    for n in range(1, 65):
        rounds = math.ceil(math.log2(n))
        gather = build_schedule("allgather", "pat", n)
        scatter = build_schedule("reduce_scatter", "pat", n)
        assert gather.n_rounds == scatter.n_rounds == rounds
        for schedule in (gather, scatter):
            assert cost(schedule, 1.0, alpha=0, beta=1).seconds == pytest.approx((n - 1) / n)
        for k, (forward, backward) in enumerate(zip(gather.rounds, reversed(scatter.rounds))):
            d = 2 ** (rounds - 1 - k)
            for t in forward:
                assert t.dst == (t.src + d) % n and not t.reduce
                assert sorted(t.chunks) == sorted((t.src - u) % n for u in range(0, n - d, 2 * d))
            assert {(t.dst, t.src, t.chunks) for t in forward} == {
                (t.src, t.dst, t.chunks) for t in backward}
            assert all(t.reduce for t in backward)


def test_where_the_simulator_prefers_them():
    """On paper, on an 8 x 8 torus at 1 MiB per rank: Swing beats ring, bidirectional ring
    and halving-doubling (fewer hops), PAT beats Bruck (its big rounds go to neighbours), and
    ranking(topology=) puts them first after hierarchical (a ring per torus dimension); auto
    leaves them out without a topology (no calibration of them yet); both simulate on the
    nodes preset no faster than the bounds allow."""
    n, nbytes = 64, 1 << 20
    mesh = torus(8, 8, **LINK)

    def seconds(primitive, algorithm, links=mesh):
        return simulate(build_schedule(primitive, algorithm, n), nbytes, links).seconds

    swing = seconds("allreduce", "swing")
    assert all(swing < seconds("allreduce", other)
               for other in ("ring", "bidirectional_ring", "halving_doubling"))
    assert seconds("allgather", "pat") < seconds("allgather", "bruck")
    for primitive, algorithm in (("allreduce", "swing"), ("allgather", "pat"),
                                 ("reduce_scatter", "pat")):
        ranked = [name for name, _ in ranking(primitive, n, nbytes, topology=mesh)]
        assert ranked[:2] == ["hierarchical", algorithm]
        shipped = jaxcoll.analysis.model.shipped("cpu")
        assert all(choose(primitive, 8, size, shipped) != algorithm
                   for size in (1 << 10, 1 << 24))
        cluster = nodes(8, 8, nvlink=(3e-6, 1 / 370e9), nic=(1e-5, 1 / 50e9))
        assert seconds(primitive, algorithm, cluster) >= jaxcoll.bounds(
            primitive, n, nbytes, topology=cluster).seconds


def test_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    for primitive, algorithm in (("allreduce", "swing"), ("allgather", "pat"),
                                 ("reduce_scatter", "pat")):
        path = jaxcoll.draw(jaxcoll.schedule(primitive, algorithm, 3),
                            tmp_path / f"{primitive}-{algorithm}.png")
        assert path.stat().st_size > 0
