"""simulate(runtime="pipelined") (jaxcoll.analysis.pipelined): lock-step unchanged, never slower
than lock-step in one slice, the same where rounds strictly depend on each other, hand-derived
closed forms in slices, and the arguments it refuses. No JAX: plain arithmetic."""

import dataclasses
import math

import numpy as np
import pytest

from jaxcoll.analysis import pipelined
from jaxcoll.analysis.model import cost
from jaxcoll.analysis.topology import nodes, ring, shared, simulate, switch
from jaxcoll.analysis.topology import ring as ring_topology
from jaxcoll.ir.families import SCHEDULES, build_schedule
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Schedule, Transfer

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
    with pytest.raises(ValueError, match="prices at most"):  # 24 transfers, written out
        simulate(allreduce.explicit(), 1e6, topology, runtime="pipelined",
                 slices=pipelined.MAX_EVENTS // 24 + 1)
    # naive reduce_scatter: 15 transfers of every id, then 15 of one: 255 cells read x 2
    # channels, refused before any is read (below SHARED_LONG ids: no shared set)
    naive = build_schedule("reduce_scatter", "naive", 16)
    switch16 = switch(16, alpha=A, beta=B)
    assert simulate(naive, 1e6, switch16, runtime="pipelined", channels=2).seconds > 0
    saved, pipelined.MAX_EVENTS = pipelined.MAX_EVENTS, 2 * 255 - 1
    try:
        with pytest.raises(ValueError, match="read 255 cells .* x 2 channels; the pipelined "
                                             "engine reads at most 509"):
            simulate(naive, 1e6, switch16, runtime="pipelined", channels=2, slices=1)
    finally:
        pipelined.MAX_EVENTS = saved


def test_a_protocol_is_its_wire_bytes_latencies_and_step():
    """protocol="LL"/"LL128" prices exactly as Simple on the topology with each link's β times
    the protocol's bytes on the wire per byte of data and its α scaled by NCCL's ring step
    latency over Simple's on that kind of link, in the protocol's steps; None is Simple."""
    from jaxcoll.analysis import protocols

    schedule = build_schedule("allreduce", "ring", 16)
    two_nodes = nodes(2, 8, nvlink=(3.4e-6, 1 / 370e9), nic=(1e-5, 1 / 50e9))
    assert two_nodes.link_kinds.count("net") == 2 * 2 * 8
    for nbytes in (1 << 10, 1 << 20, 64 << 20):
        simple = simulate(schedule, nbytes, two_nodes, runtime="pipelined")
        assert simple.seconds == simulate(schedule, nbytes, two_nodes, runtime="pipelined",
                                          protocol="simple").seconds
        for name, wire, nvlink, net in (("LL", 2.0, .6 / 3.4, 2.7 / 14), ("ll128", 128 / 120,
                                                                          1.9 / 3.4, 4 / 14)):
            protocol = protocols.named(name)
            assert protocol.wire == wire
            scale = np.where(np.array(two_nodes.link_kinds) == "net", net, nvlink)
            seen = dataclasses.replace(two_nodes, alpha=two_nodes.alpha * scale,
                                       beta=two_nodes.beta * wire)
            slices = pipelined.default_slices(nbytes / 16, protocol.step_bytes)
            assert simulate(schedule, nbytes, two_nodes, runtime="pipelined",
                            protocol=name).seconds == pytest.approx(
                simulate(schedule, nbytes, seen, runtime="pipelined", slices=slices).seconds,
                rel=1e-12)
    # NCCL's buffers over its 8 steps: LL 32 KiB of data (half of each 16-byte line is flags),
    # LL128 120 of each 128 bytes of 614,400, Simple 512 KiB
    assert [protocols.BY_NAME[p].step_bytes for p in protocols.PROTOCOLS] == [
        32768, 576000, 524288]
    # LL wins a 1 KiB allreduce across two nodes (its steps' latency), LL128 a 64 MiB one (one
    # slice a channel: still its latency), Simple a 256 MiB one (its bytes on the wire)
    winners = [int(np.argmin([simulate(schedule, nbytes, two_nodes, runtime="pipelined",
                                       protocol=p, channels=8).seconds
                              for p in protocols.PROTOCOLS]))
               for nbytes in (1 << 10, 64 << 20, 256 << 20)]
    assert winners == [0, 1, 2]


def test_protocols_refused_where_they_do_not_apply():
    schedule = build_schedule("allreduce", "ring", 4)
    links = switch(4, alpha=A, beta=B)
    with pytest.raises(ValueError, match="protocol='LL' is for runtime='pipelined'"):
        simulate(schedule, 1 << 20, links, protocol="LL")
    with pytest.raises(ValueError, match=r"protocol='LL64', must be one of \('LL', 'LL128'"):
        simulate(schedule, 1 << 20, links, runtime="pipelined", protocol="LL64")


def _written_out(schedule, nbytes, topology, **kwargs):
    """simulate pipelined with every rank's transfers (no group standing for all)."""
    return simulate(schedule.explicit(), nbytes, topology, runtime="pipelined", **kwargs)


@pytest.mark.parametrize("topology", [
    nodes(4, 4, nvlink=(1e-6, 1e-9), nic=(1e-5, 4e-9)),  # a NIC per GPU
    nodes(2, 8, nvlink=(3.4e-6, 1 / 370e9), nic=(1e-5, 1 / 50e9)),
    switch(8, alpha=A, beta=B)], ids=["4x4", "2x8", "switch"])
def test_a_group_stands_for_all_exactly(topology):
    """Every registered schedule that is its own image under one symmetry (rings, xor, Swing's
    mirror, the hierarchical grid) is priced at one node's ranks (a switch's: one rank) for all;
    the times, every round's, every link's bytes and the busiest links equal every rank's
    written out, where no two messages of a slice share a link."""
    grouped = 0
    for primitive, algorithm, schedule in _registered([topology.n]):
        if SCHEDULES[primitive][algorithm].two_level:
            if topology.period < 2:
                continue
            schedule = build_schedule(primitive, algorithm,
                                      (topology.n // topology.period, topology.period))
        placements = [topology.channel_ranks(c) for c in range(2)]
        grouped += pipelined._group(schedule, topology, placements) is not None
        for channels in (1, 2) if not RECORDS[primitive].rooted else (1,):
            for nbytes in (1 << 10, 1 << 24):
                group = simulate(schedule, nbytes, topology, runtime="pipelined",
                                 channels=channels)
                every = _written_out(schedule, nbytes, topology, channels=channels)
                where = (primitive, algorithm, channels, nbytes)
                assert group.seconds == pytest.approx(every.seconds, rel=1e-12), where
                assert np.allclose(group.round_seconds, every.round_seconds), where
                assert np.allclose(group.link_bytes(), every.link_bytes()), where
                assert (group.busiest_link == every.busiest_link).all(), where
                for k in {0, len(group.round_seconds) - 1} if len(group.round_seconds) else ():
                    assert group.round_links(k) == pytest.approx(every.round_links(k)), where
    assert grouped >= 15  # 18 on a switch, hierarchical too on nodes


def test_where_gpus_share_a_nic_a_group_queues_in_its_own_order():
    """Two GPUs per NIC: messages of one slice share a link, and a group queues them in its
    ranks' order rather than all ranks' (the wrap-around differs): a tie-break, within 1%."""
    shared_nics = nodes(4, 4, nvlink=(1e-6, 1e-9), nic=(1e-5, 4e-9), nics=2)
    swing = build_schedule("allreduce", "swing", 16)
    group = simulate(swing, 1 << 10, shared_nics, runtime="pipelined", channels=2).seconds
    every = _written_out(swing, 1 << 10, shared_nics, channels=2).seconds
    assert group != every and group == pytest.approx(every, rel=0.01)


def test_a_group_needs_a_symmetric_schedule_and_grouped_topology():
    """A schedule written out, in-switch or mixed, a topology with no groups (a ring of links),
    xor on groups that are not a power of two, or channels that move ranks between groups:
    every rank is priced."""
    ring = build_schedule("allreduce", "ring", 12)
    two_nodes = nodes(2, 6, nvlink=(1e-6, 1e-9), nic=(1e-5, 4e-9))
    one = [two_nodes.channel_ranks(0)]
    assert pipelined._group(ring, two_nodes, one)[0] == 6
    assert pipelined._group(ring.explicit(), two_nodes, one) is None
    assert pipelined._group(ring, ring_topology(12, alpha=A, beta=B), [np.arange(12)]) is None
    crossing = [np.roll(np.arange(12), 3)]  # a channel that moves ranks across nodes
    assert pipelined._group(ring, two_nodes, crossing) is None
    doubling = build_schedule("allreduce", "halving_doubling", 8)
    odd = nodes(2, 4, nvlink=(1e-6, 1e-9), nic=(1e-5, 4e-9))
    assert pipelined._group(doubling, odd, [odd.channel_ranks(0)])[1].kind == "xor"
    six = build_schedule("allreduce", "halving_doubling", 12)  # not symmetric under xor
    assert pipelined._group(six, two_nodes, one) is None


def test_a_32768_rank_ring_is_8_ranks_a_round():
    """At 4,096 ranks (512 DGX nodes) a ring allreduce is priced pipelined with one node's 8
    ranks' transfers a round (its state 8 ranks wide), in 8 channels; what bench/scale.py
    runs at 32,768 ranks."""
    from jaxcoll.analysis.systems import dgx
    n = 4096
    topology = dgx("h100", n // 8)
    ring = build_schedule("allreduce", "ring", n)
    placements = [topology.channel_ranks(c) for c in range(8)]
    assert pipelined._group(ring, topology, placements)[0] == 8
    rounds, _ = pipelined._rounds(ring, 1, 8, pipelined._group(ring, topology, placements))
    assert {len(r[1]) for r in rounds} == {8}
    priced = simulate(ring, 256 << 20, topology, runtime="pipelined", channels=8)
    # every GPU sends 2(n-1)/n·N; in one channel of 8 it is its node's last on the ring and
    # sends through a NIC instead of its NVSwitch port
    link_bytes = priced.link_bytes()
    assert link_bytes[topology.link_names.index("gpu4095->nvswitch")] == \
        pytest.approx(7 / 8 * 2 * (n - 1) / n * (256 << 20), rel=1e-12)
    assert link_bytes[topology.link_names.index("node511.nic7->fabric")] == \
        pytest.approx(1 / 8 * 2 * (n - 1) / n * (256 << 20), rel=1e-12)


@pytest.mark.parametrize("topology", [
    nodes(4, 4, nvlink=(1e-6, 1e-9), nic=(1e-5, 4e-9), nics=2, gamma=G),  # NICs shared
    switch(8, alpha=A, beta=B, gamma=G)], ids=["4x4", "switch"])
def test_lockstep_prices_a_group_for_all_exactly(topology, monkeypatch):
    """Lock-step prices a symmetric round from one node's ranks (a switch's: one rank), links
    standing for their like in every node: every registered schedule's times, busiest links
    and every round's link bytes equal every rank's, matching by matching too."""
    for primitive, algorithm, schedule in _registered([topology.n]):
        if SCHEDULES[primitive][algorithm].two_level:
            if topology.period < 2:
                continue
            schedule = build_schedule(primitive, algorithm, (4, 4))
        for concurrent in (True, False):
            for channels in (1, 2) if not RECORDS[primitive].rooted else (1,):
                group = simulate(schedule, 1 << 20, topology, concurrent=concurrent,
                                 channels=channels)
                with monkeypatch.context() as patch:
                    patch.setattr(pipelined, "group_period", lambda *args: 0)
                    every = simulate(schedule, 1 << 20, topology, concurrent=concurrent,
                                     channels=channels)
                where = (primitive, algorithm, concurrent, channels)
                assert group.seconds == pytest.approx(every.seconds, rel=1e-12), where
                assert np.allclose(group.round_seconds, every.round_seconds, rtol=1e-12), where
                assert (group.busiest_link == every.busiest_link).all(), where
                assert np.allclose(group.link_bytes(), every.link_bytes()), where
                assert all(group.round_links(k) == every.round_links(k)
                           for k in range(len(group.round_seconds))), where


def test_only_the_cells_touched_where_every_cell_would_not_fit(monkeypatch):
    """Past MAX_CELLS the state holds only the cells some transfer reads or writes: the same
    run (a binomial gather's n chunks at every rank, but a few touched); past it still, a
    ValueError saying so."""
    topology = nodes(4, 4, nvlink=(1e-6, 1e-9), nic=(1e-5, 4e-9))
    for primitive, algorithm in (("gather", "binomial"), ("scatter", "naive")):
        schedule = build_schedule(primitive, algorithm, 16)
        dense = simulate(schedule, 1 << 22, topology, runtime="pipelined", slices=4)
        monkeypatch.setattr(pipelined, "MAX_CELLS", 4 * 16 * schedule.buffer_chunks - 1)
        touched = simulate(schedule, 1 << 22, topology, runtime="pipelined", slices=4)
        assert touched.seconds == dense.seconds
        assert np.array_equal(touched.round_seconds, dense.round_seconds)
        monkeypatch.setattr(pipelined, "MAX_CELLS", 3)
        with pytest.raises(ValueError, match="reads and writes .* cells"):
            simulate(schedule, 1 << 22, topology, runtime="pipelined", slices=4)
        monkeypatch.undo()


@pytest.mark.jax_free
@pytest.mark.parametrize("primitive", ["reduce_scatter", "allgather"])
def test_shared_sets_price_bitwise_as_every_cell(primitive, monkeypatch):
    """naive reduce_scatter and allgather name every chunk id in n - 1 transfers (one shared
    tuple); past SETS_FROM ids read the engine keeps one cell per shared set and rank instead
    of one per chunk (pipelined._SharedSets): the same run bitwise, on a switch and on
    nodes with shared NICs, 1 and 3 channels; with a hand-made schedule mixing shared sets
    that overlap, single chunks and local moves too."""
    from jaxcoll.analysis.systems import cluster

    n = 72
    naive = build_schedule(primitive, "naive", n)
    half, rest = tuple(range(n // 2)), tuple(range(n // 3, n))
    mixed = Schedule.build("mixed", n, n_chunks=n, rounds=[
        [Transfer(1, 0, half, True), Transfer(2, 0, rest, True)],
        [Transfer(3, 0, half, True), Transfer(0, 5, 7, False), Transfer(4, 0, rest, True)],
        [Transfer(0, 1, rest, False), Transfer(0, 2, half, False), Transfer(0, 0, 3, False,
                                                                          into=60)],
        [Transfer(1, 6, 50, True), Transfer(2, 6, 10, True), Transfer(6, 1, rest, True)]])
    monkeypatch.setattr(pipelined, "SHARED_LONG", 16)
    for schedule in (naive, mixed):
        assert len(pipelined._SharedSets(schedule).sets) == 1 + (schedule is mixed)
        for topology in (switch(n, alpha=A, beta=B), cluster("h100", 9, nics=2)):
            for channels in (1, 3):
                kwargs = dict(runtime="pipelined", channels=channels, slices=2)
                every = simulate(schedule, 1e6, topology, **kwargs)
                monkeypatch.setattr(pipelined, "SETS_FROM", 0)
                sets = simulate(schedule, 1e6, topology, **kwargs)
                monkeypatch.setattr(pipelined, "SETS_FROM", pipelined.MAX_EVENTS)
                assert sets.seconds == every.seconds > 0
                assert (sets.round_seconds == every.round_seconds).all()
                assert (sets.link_bytes() == every.link_bytes()).all()


@pytest.mark.jax_free
def test_the_scale_bench_prices_both_ways_and_says_what_it_refuses(monkeypatch):
    """bench/schedule_scale.py --priced's row: build, lock-step and pipelined seconds and
    prices; a schedule past the pipelined engine's limits keeps its lock-step price, says why
    pipelined was refused (a binomial scatter then a ring: every rank's transfers) and
    brackets the pipelined price by its phases priced apart (checked against the whole run
    where the engine takes it)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "schedule_scale.py"
    spec = importlib.util.spec_from_file_location("schedule_scale", path)
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)
    ring = scale.priced("allreduce", "ring", 16)
    assert ring["refused"] is None and ring["lockstep_ms"] > ring["pipelined_ms"] > 0
    # every rank's transfers: 15 + 240; a phase apart: 15, then a node's 8 ranks' 120
    monkeypatch.setattr(pipelined, "MAX_TRANSFERS", 150)
    composite = scale.priced("broadcast", "scatter_allgather", 16)
    assert composite["pipelined_ms"] is None and composite["lockstep_ms"] > 0
    assert "transfers (every rank's)" in composite["refused"]
    assert "no symmetry lets a few ranks stand for all" in composite["refused"]
    assert "pipelined_bounds" in composite["refused"] and composite["bounds_ms"][0] > 0


@pytest.mark.jax_free
@pytest.mark.parametrize("primitive, algorithm", [("broadcast", "scatter_allgather"),
                                                  ("reduce", "reduce_scatter_gather"),
                                                  ("allreduce", "naive")])
def test_pipelined_bounds_bracket_the_whole_run(primitive, algorithm):
    """pipelined_bounds prices a schedule's phases (runs of rounds with a symmetry or
    without) apart: the whole pipelined run is between the longest phase and their sum, on
    nodes with shared NICs, in 1 and 4 slices; one phase is its price exactly."""
    from jaxcoll.analysis.systems import cluster
    from jaxcoll.analysis.topology import pipelined_bounds

    schedule = build_schedule(primitive, algorithm, 24)
    topology = cluster("h100", 3, nics=2)
    for slices in (1, 4):
        whole = simulate(schedule, 1 << 24, topology, runtime="pipelined", slices=slices)
        low, high = pipelined_bounds(schedule, 1 << 24, topology, slices=slices)
        assert low <= whole.seconds <= high
        assert low < high or algorithm == "naive"
    ring = build_schedule("allreduce", "ring", 24)
    assert pipelined_bounds(ring, 1 << 24, topology) == (simulate(
        ring, 1 << 24, topology, runtime="pipelined").seconds,) * 2
    with pytest.raises(ValueError, match="channels=2 moves a broadcast's root"):
        pipelined_bounds(schedule if primitive == "broadcast" else
                         build_schedule("broadcast", "scatter_allgather", 24), 1 << 24,
                         topology, channels=2)
