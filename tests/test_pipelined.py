"""simulate(runtime="pipelined") (jaxcoll.analysis.pipelined): lock-step unchanged, never slower
than lock-step in one slice, the same where rounds strictly depend on each other, hand-derived
closed forms in slices, and the arguments it refuses. No JAX: plain arithmetic."""

import math

import numpy as np
import pytest

from jaxcoll.analysis import pipelined
from jaxcoll.analysis.model import cost
from jaxcoll.analysis.topology import nodes, ring, shared, simulate, switch
from jaxcoll.ir.families import SCHEDULES, build_schedule
from jaxcoll.ir.records import RECORDS

pytestmark = pytest.mark.jax_free  # runs no JAX (schedules, models, pages): the same on every jax

A, B, G = 1e-5, 1e-9, 3e-10


def _registered(ns):
    """(primitive, algorithm, schedule) for every registered one-level schedule at ``ns``
    (pipelined ones in 3 pieces) and the hierarchical ones on 2 x 2 and 2 x 3."""
    for primitive, entries in SCHEDULES.items():
        for algorithm, entry in entries.items():
            shapes = [(2, 2), (2, 3)] if entry.two_level else ns
            for n in shapes:
                yield primitive, algorithm, build_schedule(primitive, algorithm, n, 0,
                                                           3 if entry.pipelined else 1)


def test_lockstep_is_todays_simulate():
    """runtime="lockstep" is the default and today's numbers: simulate's docstring examples,
    and matching by matching on a switch cost() exactly."""
    allreduce = build_schedule("allreduce", "ring", 8)
    doubling = build_schedule("allgather", "recursive_doubling", 8)
    links, on_a_ring = switch(8, alpha=1e-6, beta=1e-9), ring(8, alpha=1e-6, beta=1e-9)
    for schedule, topology, micros in ((allreduce, links, 1849.0), (doubling, links, 920.5),
                                       (doubling, on_a_ring, 2759.5)):
        assert simulate(schedule, 1 << 20, topology, runtime="lockstep").seconds * 1e6 == \
            pytest.approx(micros, abs=0.05)
    for primitive, algorithm in (("allreduce", "ring"), ("allreduce", "tree"),
                                 ("reduce_scatter", "pairwise"), ("alltoall", "bruck"),
                                 ("broadcast", "binomial"), ("allgather", "bruck")):
        schedule = build_schedule(primitive, algorithm, 6)
        topology = switch(6, alpha=A, beta=B, gamma=G)
        default, lockstep = (simulate(schedule, 1e6, topology, **runtime)
                             for runtime in ({}, {"runtime": "lockstep"}))
        assert lockstep.seconds == default.seconds, (primitive, algorithm)
        np.testing.assert_array_equal(lockstep.round_seconds, default.round_seconds)
        np.testing.assert_array_equal(lockstep.busiest_link, default.busiest_link)
        exact = simulate(schedule, 1e6, topology, concurrent=False, runtime="lockstep").seconds
        assert exact == pytest.approx(cost(schedule, 1e6, alpha=A, beta=B, gamma=G).seconds,
                                      rel=1e-12), (primitive, algorithm)


def test_one_slice_is_never_slower_than_lockstep():
    """In one slice every input of round i has arrived, and every link is free, by the time
    lock-step starts round i; a link carries the round's messages within lock-step's round
    and a transfer reduces only its own bytes: so never later, on any topology, with
    channels, overhead and γ (the module's docstring). It moves the same bytes over each
    link, and its rounds' times sum to its makespan."""
    for primitive, algorithm, schedule in _registered(range(1, 7)):
        n = schedule.n_ranks
        rooted = RECORDS[primitive].rooted
        for topology in (switch(n, alpha=A, beta=B, gamma=G), ring(n, alpha=A, beta=B, gamma=G),
                         shared(n, alpha=A, beta=B, overhead=2e-6, gamma=G)):
            for channels in (1,) if rooted else (1, 2):
                lockstep = simulate(schedule, 1e6, topology, channels=channels)
                one = simulate(schedule, 1e6, topology, channels=channels,
                               runtime="pipelined", slices=1)
                where = (primitive, algorithm, n, topology.name, channels)
                assert one.seconds <= lockstep.seconds * (1 + 1e-12), where
                assert one.round_seconds.sum() == pytest.approx(one.seconds, rel=1e-12), where
                np.testing.assert_allclose(one.link_bytes(), lockstep.link_bytes(), rtol=1e-12)


def test_one_slice_is_lockstep_where_rounds_strictly_depend():
    """A 2-rank allreduce on a switch: round 1 sends what round 0 brought (rank 0 sends chunk
    0, which rank 1 reduced into it), the two transfers of a round share no link and take as
    long, so each round starts when the one before ended: lock-step's α + N/2·β + N/2·γ,
    then α + N/2·β. A chain broadcast likewise: (n - 1)·(α + N·β)."""
    topology = switch(2, alpha=A, beta=B, gamma=G)
    allreduce = build_schedule("allreduce", "ring", 2)
    one = simulate(allreduce, 1e6, topology, runtime="pipelined", slices=1).seconds
    assert one == pytest.approx(simulate(allreduce, 1e6, topology).seconds, rel=1e-12)
    assert one == pytest.approx(2 * (A + 5e5 * B) + 5e5 * G, rel=1e-12)
    chain = build_schedule("broadcast", "chain", 5, pieces=1)
    one = simulate(chain, 1e6, switch(5, alpha=A, beta=B), runtime="pipelined", slices=1)
    assert one.seconds == pytest.approx(4 * (A + 1e6 * B), rel=1e-12)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
@pytest.mark.parametrize("slices", [1, 2, 7])
def test_chain_broadcast_in_slices(n, slices):
    """Chain broadcast, N bytes in S slices of m = N/S on a switch (α, β): rank i's up link and
    rank i+1's down link carry only round i, so T(i, k) = max(T(i-1, k) + α + m·β (slice k
    reached rank i), T(i, k-1) + m·β (the links carried slice k-1)) = i·(α + m·β) + k·m·β,
    and the last arrives at (n - 1)·(α + m·β) + (S - 1)·m·β. The issue's
    (n - 2 + S)·(α + m·β) counts α as occupancy, once per slice on each link: it is this
    with α = 0, and (S - 1)·α more otherwise."""
    size = 1e6
    chain = build_schedule("broadcast", "chain", n, pieces=1)
    m = size / slices
    expected = (n - 1) * (A + m * B) + (slices - 1) * m * B
    seconds = simulate(chain, size, switch(n, alpha=A, beta=B), runtime="pipelined",
                       slices=slices).seconds
    assert seconds == pytest.approx(expected, rel=1e-12)
    no_alpha = simulate(chain, size, switch(n, alpha=0.0, beta=B), runtime="pipelined",
                        slices=slices).seconds
    assert no_alpha == pytest.approx((n - 2 + slices) * m * B, rel=1e-12)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("slices", [1, 2, 5, 40])
def test_ring_allreduce_in_slices(n, slices):
    """Ring allreduce, R = 2(n - 1) rounds of one chunk, t = N/(n·S)·β a slice's time on a
    link, on a switch (γ = 0). Every rank's up link carries one message per round and slice,
    round-major. Two lower bounds on the last arrival: the link's busy time, R·S·t, + the
    last message's α; and slice 0's chain through the rounds (each waits for the round
    before's arrival from the left neighbour: R·(t + α)) then the last round's other S - 1
    slices on the link: R·(t + α) + (S - 1)·t. The run meets the larger: slices pay α about
    once per round on the critical path, overlapped with the link's work; one slice is
    lock-step's R·(α + N/n·β)."""
    size = 1e6 * n
    rounds, t = 2 * (n - 1), size / n / slices * B
    expected = max(rounds * slices * t + A, rounds * (t + A) + (slices - 1) * t)
    allreduce = build_schedule("allreduce", "ring", n)
    seconds = simulate(allreduce, size, switch(n, alpha=A, beta=B), runtime="pipelined",
                       slices=slices).seconds
    assert seconds == pytest.approx(expected, rel=1e-12)
    if slices == 1:
        assert seconds == pytest.approx(rounds * (A + size / n * B), rel=1e-12)


def test_default_slices_and_channels():
    """The default: one slice per 512 KiB (NCCL's Simple step: 4 MiB / NCCL_STEPS) of a
    channel's chunk, 1 to 64; channels each price a disjoint share, their links' bytes
    those of lock-step."""
    assert pipelined.STEP_BYTES == 512 * 1024
    assert [pipelined.default_slices(b) for b in (1, 512 * 1024, 512 * 1024 + 1, 1e12)] == \
        [1, 1, 2, pipelined.MAX_DEFAULT_SLICES]
    allreduce = build_schedule("allreduce", "ring", 8)
    topology = switch(8, alpha=A, beta=B)
    size = 64 << 20  # 8 MiB chunks: 16 slices
    assert simulate(allreduce, size, topology, runtime="pipelined").seconds == \
        simulate(allreduce, size, topology, runtime="pipelined",
                 slices=math.ceil(size / 8 / (512 * 1024))).seconds
    machine = nodes(2, 4, nvlink=(1e-6, 1 / 300e9), nic=(5e-6, 1 / 50e9))
    ring8 = build_schedule("allreduce", "ring", 8)
    for channels in (1, 2, 4):
        piped = simulate(ring8, size, machine, runtime="pipelined", channels=channels, slices=4)
        lockstep = simulate(ring8, size, machine, channels=channels)
        np.testing.assert_allclose(piped.link_bytes(), lockstep.link_bytes(), rtol=1e-12)
        assert 0 < piped.seconds and len(piped.round_seconds) == ring8.n_rounds


def test_refused():
    """An unknown runtime, slices < 1 or not an int, slices given lock-step, concurrent=False
    pipelined and a schedule past the engine's limits each raise a ValueError saying so."""
    allreduce = build_schedule("allreduce", "ring", 4)
    topology = switch(4, alpha=A, beta=B)
    with pytest.raises(ValueError, match="runtime='async', must be one of"):
        simulate(allreduce, 1e6, topology, runtime="async")
    for slices in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="slices=.*must be an int >= 1"):
            simulate(allreduce, 1e6, topology, runtime="pipelined", slices=slices)
    with pytest.raises(ValueError, match="slices=2 is for runtime='pipelined'"):
        simulate(allreduce, 1e6, topology, slices=2)
    with pytest.raises(ValueError, match="concurrent=False"):
        simulate(allreduce, 1e6, topology, runtime="pipelined", concurrent=False)
    with pytest.raises(ValueError, match="prices at most"):
        simulate(allreduce, 1e6, topology, runtime="pipelined",
                 slices=pipelined.MAX_EVENTS // 24 + 1)  # 24 transfers
