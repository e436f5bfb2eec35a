"""The "grid" symmetry (issue 47): hierarchical schedules stored as rank 0's rings plus a
rotation per level, derived by per_rank.rounds from what every rank sends and checked. The
compact form is the written-out one for every consumer: expansion, verify (one-rank view),
dual, reversed, cost, simulate, bounds, MSCCL, the executor's plan. Also ``_largest``, exact for
every kind without expanding ranks (Swing's mirror at 32,768 ranks)."""

import dataclasses
import random
from math import prod

import numpy as np
import pytest

import jaxcoll
from jaxcoll.analysis.topology import nodes, simulate, switch, torus
from jaxcoll.ir.families import build_schedule
from jaxcoll.ir.per_rank import rounds
from jaxcoll.ir.schedules import Round, Schedule, ScheduleError, Symmetry, Transfer, _largest
from jaxcoll.ir.symbolic import _one_rank_symmetry, _promises, dual
from jaxcoll.lowering.plan import lower

PRIMITIVES = ("allreduce", "reduce_scatter", "allgather")
SHAPES = [(2, 2, 2), (2, 3, 2), (3, 1, 2), (4, 2), (3, 5), (7,), (2, 1, 3, 1, 5), (4, 4, 4)]


def _coordinates(x, sizes):
    return np.array(np.unravel_index(x, sizes))


def test_a_grid_moves_ranks_and_chunks_coordinate_by_coordinate():
    sizes = (3, 2, 4)
    n = prod(sizes)
    for stride in (0, 1, 2, 5):
        grid = Symmetry("grid", n, stride=stride, modulus=n, sizes=sizes)
        for x, r, c in [(5, 7, 11), (0, 23, 1), (13, 13, 23 + n)]:
            want = (_coordinates(x, sizes) + _coordinates(r, sizes)) % np.array(sizes)
            assert grid.rank(x, r) == np.ravel_multi_index(want, sizes)
            moved = (_coordinates(c % n, sizes) + stride * _coordinates(r, sizes)) % sizes
            assert grid.chunk(c, r) == c - c % n + np.ravel_multi_index(moved, sizes)
        for d in range(n):  # sender(d)'s copy of 0 -> d arrives at 0
            assert grid.rank(d, grid.sender(d)) == 0
            ranks, partners = grid.partners(d)
            assert sorted(partners.tolist()) == list(range(n))  # a permutation: one ppermute
            assert sorted(grid.order(d)) == list(range(n))
    assert Symmetry("grid", 6, modulus=6, sizes=(3, 2)).order(1) == [0, 1, 2, 3, 4, 5]
    assert Symmetry("grid", 6, modulus=6, sizes=(3, 2)).order(2) == [0, 2, 4, 1, 3, 5]


@pytest.mark.parametrize("kwargs", [dict(sizes=(3, 2)), dict(sizes=(3, 2), modulus=12),
                                    dict(modulus=6), dict(sizes=(3, 0), modulus=0),
                                    dict(sizes=[3, 2], modulus=6)])
def test_bad_grids_are_refused(kwargs):
    n = 6 if kwargs.get("modulus", 6) else 0
    with pytest.raises(ScheduleError, match="grid"):
        Symmetry("grid", n or 6, **kwargs)
    with pytest.raises(ScheduleError, match="sizes"):
        Symmetry("rotate", 6, modulus=6, sizes=(3, 2))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_hierarchical_is_stored_compact_and_expands_to_the_written_out_rings(shape):
    n = prod(shape)
    for primitive in PRIMITIVES:
        schedule = jaxcoll.schedule(primitive, "hierarchical", shape)
        levels = tuple(size for size in shape if size > 1)  # a level of one moves nothing
        assert all(len(r.base) == 1 and r.symmetry.kind == "grid" and r.symmetry.stride == 1
                   and r.symmetry.sizes == (levels or (1,)) and r.symmetry.modulus == n
                   for r in schedule.rounds)
        assert len({r.symmetry for r in schedule.rounds}) <= 1  # one shared object
        for round_ in schedule.rounds:  # every rank sends once to its next in a line
            (t,) = round_.base
            assert sorted(t.src for t in round_) == list(range(n))
            assert sorted(t.dst for t in round_) == list(range(n))
            level = int(np.flatnonzero(_coordinates(t.dst, levels))[0])
            for moved in round_:
                differ = _coordinates(moved.src, levels) != _coordinates(moved.dst, levels)
                assert np.flatnonzero(differ).tolist() == [level]
                assert list(moved.chunks) == sorted(moved.chunks)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_verified_at_rank_0_alone_and_priced_as_written_out(shape):
    topologies = [switch(prod(shape), alpha=1e-6, beta=1e-9, gamma=1e-10)]
    if len(shape) == 2:
        topologies.append(nodes(shape[0], shape[1], nvlink=(1e-6, 1e-10), nic=(5e-6, 1e-9)))
    if len(shape) == 3:
        topologies.append(torus(*shape, alpha=1e-6, beta=1e-9))
    for primitive in PRIMITIVES:
        compact = jaxcoll.schedule(primitive, "hierarchical", shape)
        explicit = compact.explicit()
        if compact.rounds:
            assert _one_rank_symmetry(compact, _promises(compact)) is not None
        for s in (compact, explicit, dual(compact)):
            jaxcoll.verify(s)
        cut = dataclasses.replace(compact, rounds=compact.rounds[:-1])
        if compact.rounds:
            errors = []
            for s in (cut, cut.explicit()):
                with pytest.raises(ScheduleError) as error:
                    jaxcoll.verify(s)
                errors.append(str(error.value))
            assert errors[0] == errors[1]  # the one-rank view names what every rank's does
        assert [[str(t) for t in r] for r in dual(compact).rounds] == [
            [str(t) for t in r] for r in dual(explicit).rounds]
        back = compact.reversed("back", reduce=True)
        assert [sorted(map(str, r)) for r in back.rounds] == [
            sorted(map(str, r)) for r in explicit.reversed("back", reduce=True).rounds]
        for kw in (dict(alpha=1e-6, beta=1e-9, gamma=1e-10),):
            assert jaxcoll.cost(compact, 1e6, **kw) == jaxcoll.cost(explicit, 1e6, **kw)
        for topology in topologies:
            for concurrent in (True, False):
                a = simulate(compact, 1e6, topology, concurrent=concurrent)
                b = simulate(explicit, 1e6, topology, concurrent=concurrent)
                assert a.seconds == pytest.approx(b.seconds, rel=1e-12)


@pytest.mark.parametrize("shape", [(2, 2, 2), (4, 2), (3, 2), (2, 3, 2)], ids=str)
def test_msccl_and_the_plan_run_every_ranks_rings(shape):
    """MSCCL writes every rank's program (the same file as written out); the executor's plan
    keeps the grid: rank 0's ids, each rank moving them by its coordinates (validated against
    the schedule at every rank when lowered), each id at every rank the written-out round's."""
    n = prod(shape)
    for primitive in PRIMITIVES:
        compact = jaxcoll.schedule(primitive, "hierarchical", shape)
        assert jaxcoll.msccl.dump(compact) == jaxcoll.msccl.dump(compact.explicit())
        segments = lower(compact)
        assert sum(segment.n_steps for segment in segments) == compact.n_rounds
        step = 0
        for segment in segments:
            assert {ids.kind for ids in segment.send_ids + segment.recv_ids} == {"grid"}
            (matching,) = segment.matchings
            sends, recvs = segment.send_ids[0].table(n), segment.recv_ids[0].table(n)
            for s_ in range(segment.n_steps):
                written = {(t.src, t.dst): t for t in compact.rounds[step + s_]}
                assert set(matching.perm) == set(written)
                for src, dst in matching.perm:
                    t = written[src, dst]
                    assert sorted(zip(sends[s_, src], recvs[s_, dst])) == sorted(
                        zip(t.chunks, t.into))
            step += segment.n_steps


def test_a_plan_that_moves_a_grid_otherwise_is_refused():
    from jaxcoll.lowering import validate
    from jaxcoll.lowering.ids import Ids

    schedule = jaxcoll.schedule("allreduce", "hierarchical", (3, 2))
    segments = list(lower(schedule))
    ids = segments[0].send_ids[0]
    for wrong in (dataclasses.replace(ids, stride=0), dataclasses.replace(ids, sizes=(2, 3)),
                  Ids("affine", ids.n_steps, ids.n_moved, (ids.arrays.base, ids.arrays.base * 0
                      + 1, ids.arrays.offset, ids.arrays.base[:1] * 0), modulus=6)):
        bad = dataclasses.replace(segments[0], send_ids=(wrong,))
        with pytest.raises(ScheduleError, match="disagrees"):
            validate.check(schedule, tuple([bad] + segments[1:]))


def test_k_levels_at_datacenter_scale_store_one_transfer_a_round():
    for shape in [(4096, 8), (64, 64, 8), (16, 16, 16, 8)]:
        schedule = build_schedule("allreduce", "hierarchical", shape)
        assert schedule.n_rounds == 2 * sum(s - 1 for s in shape)
        assert sum(len(r.base) for r in schedule.rounds) == schedule.n_rounds
        assert len(schedule.rounds[0]) == prod(shape)  # as every rank's, without writing them


def test_a_grid_family_whose_ranks_disagree_is_refused():
    shape, n = (3, 4), 12

    def ring_on_a_line(r, step):  # every line a ring, but rank 5 sends the wrong chunk
        p, c = divmod(r, 4)
        chunk = [4 * q + (c - step - 1) % 4 for q in range(3)]
        if r == 5 and step == 1:
            chunk = chunk[:2]
        return [Transfer(r, 4 * p + (c + 1) % 4, chunk, True)]

    made = rounds(n, range(1), ring_on_a_line, symmetry="grid", sizes=shape)
    assert made[0].symmetry == Symmetry("grid", n, modulus=n, sizes=shape)
    with pytest.raises(ScheduleError, match="rank 5 sends"):
        rounds(n, range(3), ring_on_a_line, symmetry="grid", sizes=shape)
    with pytest.raises(ScheduleError, match="sizes"):
        rounds(n, range(3), ring_on_a_line, symmetry="grid")
    with pytest.raises(ScheduleError, match="sizes"):
        rounds(n, range(3), ring_on_a_line, symmetry="grid", sizes=(3, 3))
    with pytest.raises(ScheduleError, match="sizes"):
        rounds(n, range(3), ring_on_a_line, symmetry="rotate", sizes=shape)


def test_largest_is_exact_for_every_kind():
    rng = random.Random(47)
    for _ in range(2000):
        kind = rng.choice(["rotate", "mirror", "grid", "xor"])
        if kind == "grid":
            sizes = tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 3)))
            n = prod(sizes)
            symmetry = Symmetry("grid", n, stride=rng.randint(0, 7), modulus=n, sizes=sizes)
            top = 3 * n
        elif kind == "xor":
            n = 1 << rng.randint(0, 5)
            symmetry, top = Symmetry("xor", n, mask=rng.randint(0, 63)), 4 * n
        else:
            n = 2 * rng.randint(1, 12)
            m = rng.randint(1, 4 * n)
            stride = rng.choice([s for s in range(3 * m + 1) if s * n % m == 0])
            symmetry, top = Symmetry(kind, n, stride=stride, modulus=m), 3 * m
        ids = tuple(rng.randint(0, top) for _ in range(rng.randint(1, 12)))  # > 8: numpy
        brute = int(symmetry.chunk(np.array(ids)[:, None], np.arange(n)).max())
        assert _largest(symmetry, ids) == brute  # every rank's ids, as they are


def test_the_compact_round_is_a_round_like_any_other():
    grid = Symmetry("grid", 6, modulus=6, sizes=(3, 2))
    round_ = Round([Transfer(0, 2, [0, 2], reduce=True)], grid)
    assert len(round_) == 6
    assert str(round_) == ("0->2 [0,2]+  2->4 [2,4]+  4->0 [0,4]+  "
                           "1->3 [1,3]+  3->5 [3,5]+  5->1 [1,5]+")
    s = Schedule.build("toy", 6, n_chunks=6, rounds=[round_])
    assert s.rounds[0].extent() == (2, 5)
    with pytest.raises(ScheduleError, match="round 0"):
        Schedule.build("toy", 6, n_chunks=5, rounds=[round_])
