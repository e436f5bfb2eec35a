"""Schedules stored as rank 0's program plus its symmetry (schedules.Symmetry): every consumer
reads the compact form and gets exactly what it gets from the same schedule written out
(``Schedule.explicit``), and at large n nothing writes every rank's transfers out."""

from dataclasses import astuple

import numpy as np
import pytest

import jaxcoll
from jaxcoll.analysis import model, topology
from jaxcoll.ir.families import SCHEDULES, build_schedule
from jaxcoll.lowering.plan import lower
from jaxcoll.ir.schedules import Round, Schedule, Symmetry, Transfer


def symmetric(n: int):
    """Every registered schedule on n ranks with at least one symmetric round."""
    for primitive, algorithms in SCHEDULES.items():
        for name, entry in algorithms.items():
            if entry.two_level:
                continue
            schedule = build_schedule(primitive, name, n, n // 2 if entry.rooted else 0)
            if any(r.symmetry for r in schedule.rounds):
                yield schedule


def plan_of(schedule: Schedule) -> list:
    """Everything the executor reads from the lowering plan, every table written out."""
    n = schedule.n_ranks
    tables = lambda ids: [None if i is None else i.table(n).tolist() for i in ids]  # noqa: E731
    flags = lambda ids: [None if i is None else (i.table(n) != 0).tolist() for i in ids]  # noqa
    return [(s.matchings, tables(s.send_ids), tables(s.recv_ids), flags(s.receivers),
             flags(s.lower_sender_first), s.send_contiguous, s.recv_contiguous, s.one_write)
            for s in lower(schedule)]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64])
def test_compact_and_explicit_forms_agree(n):
    """Cost, simulation (every transfer at once and matching by matching), the lowering plan,
    the schedule run backwards and its printout: the same from the compact form as written
    out, for every algorithm with symmetric rounds (rings, pairwise, Bruck, and recursive
    doubling and halving at powers of two)."""
    names = set()
    switch = topology.switch(n, alpha=1e-6, beta=1e-9, gamma=1e-10)
    ring = topology.ring(n, alpha=1e-6, beta=1e-9)
    for schedule in symmetric(n):
        explicit = schedule.explicit()
        names.add(schedule.name)
        costs = [astuple(model.cost(s, 1 << 20, alpha=1e-6, beta=1e-9, gamma=1e-10))
                 for s in (schedule, explicit)]  # sums in another order: equal to rounding
        assert costs[0] == pytest.approx(costs[1], rel=1e-12), schedule.name
        for on in (switch, ring):
            for concurrent in (True, False):
                a = topology.simulate(schedule, 1 << 20, on, concurrent=concurrent)
                b = topology.simulate(explicit, 1 << 20, on, concurrent=concurrent)
                assert a.seconds == b.seconds, (schedule.name, on.name, concurrent)
                np.testing.assert_allclose(a.link_bytes(), b.link_bytes(), rtol=1e-12)
        assert plan_of(schedule) == plan_of(explicit), schedule.name
        back = schedule.reversed("back", reduce=False).explicit()  # in sender order
        assert [sorted(r, key=lambda t: t.src) for r in back.rounds] == \
            [sorted(r, key=lambda t: t.src)
             for r in explicit.reversed("back", reduce=False).rounds], schedule.name
        if n <= 8:
            assert str(schedule) == str(explicit)
    if n > 1:
        assert "ring reduce_scatter + ring allgather" in names and "bruck alltoall" in names
    if n in (2, 4, 8, 16, 32, 64):
        assert "halving_doubling allreduce" in names


def test_nothing_writes_every_ranks_transfers_out_at_scale(monkeypatch):
    """At 1024 ranks cost, simulate, verify and the lowering plan read rank 0's program: the
    expansion of a symmetric round is never asked for."""
    schedules = [build_schedule("allreduce", "ring", 1024),
                 build_schedule("allreduce", "halving_doubling", 1024),
                 build_schedule("alltoall", "bruck", 1024)]

    def refuse(round_):
        raise AssertionError("a symmetric round was written out")
    monkeypatch.setattr(Round, "transfers", property(
        lambda r: r.base if r.symmetry is None else refuse(r)))
    for schedule in schedules:
        model.cost(schedule, 1 << 20, alpha=1e-6, beta=1e-9)
        topology.simulate(schedule, 1 << 20, topology.switch(1024, alpha=1e-6, beta=1e-9))
        jaxcoll.verify(schedule)
        lower(schedule)


def test_a_symmetric_round_is_checked_at_every_rank():
    """Rank 0's transfers must start at rank 0, the symmetry must fit the schedule, and the
    chunk ids other ranks move must exist."""
    rotate = Symmetry("rotate", 4, modulus=4)
    with pytest.raises(ValueError, match="rank 0's transfers"):
        Round([Transfer(1, 2, 0, False)], rotate)
    with pytest.raises(ValueError, match="power of two"):
        Symmetry("xor", 6)
    with pytest.raises(ValueError, match="symmetry is for 4 ranks"):
        Schedule.build("x", 8, n_chunks=8, rounds=[Round([Transfer(0, 1, 0, False)], rotate)])
    with pytest.raises(ValueError, match="does not close its cycle"):  # 4 ranks, 4 of 8
        Symmetry("rotate", 4, modulus=8)
    with pytest.raises(ValueError, match=r"0->1 \[0\]= made at rank 2\) names chunk 4"):
        Schedule.build("x", 4, n_chunks=4, rounds=[
            Round([Transfer(0, 1, 0, False)], Symmetry("rotate", 4, stride=2, modulus=8))])
    with pytest.raises(ValueError, match=r"made at rank 2\) names chunk 3"):  # 1 ^ 2 of 0..2
        Schedule.build("x", 4, n_chunks=3, rounds=[
            Round([Transfer(0, 1, 1, False)], Symmetry("xor", 4, mask=2))])
    round_ = Round([Transfer(0, 3, [1, 2], True, into=[2, 3])], rotate)
    assert [str(t) for t in round_] == ["0->3 [1,2]>[2,3]+", "1->0 [2,3]>[3,0]+",
                                        "2->1 [3,0]>[0,1]+", "3->2 [0,1]>[1,2]+"]
    assert len(round_) == 4
