"""verify's one-rank view (symbolic.py): a schedule of symmetric rounds is verified from rank 0's
row alone, with the same verdict as the schedule written out (Schedule.explicit), which every
rank runs; thousands of ranks take seconds."""

import random
from dataclasses import replace

import pytest

import jaxcoll
from jaxcoll.ir import symbolic
from jaxcoll.tools.check import ROOTED
from jaxcoll.ir.families import SCHEDULES
from jaxcoll.ir.schedules import Round, Schedule, Transfer
from jaxcoll.ir.symbolic import ScheduleError, verify

pytestmark = pytest.mark.jax_free  # runs no JAX (schedules, models, pages): the same on every jax

PAIRS = [(primitive, algorithm) for primitive, algorithms in SCHEDULES.items()
         for algorithm, entry in algorithms.items() if not entry.two_level]


def _schedule(primitive: str, algorithm: str, n: int) -> Schedule:
    """The registered schedule, rooted ones at root n // 2."""
    return jaxcoll.schedule(primitive, algorithm, n, root=n // 2 if primitive in ROOTED else 0)


def _symmetric(schedule: Schedule) -> bool:
    """True if every round is symmetric."""
    return bool(schedule.rounds) and all(r.symmetry is not None for r in schedule.rounds)


def _outcome(schedule: Schedule) -> str | None:
    """verify's ScheduleError message, or None if the schedule verifies."""
    try:
        verify(schedule)
    except ScheduleError as error:
        return str(error)
    return None


def _both(schedule: Schedule) -> tuple[str | None, str | None]:
    """verify's outcome on the schedule and written out; they must agree on pass or fail."""
    compact, written = _outcome(schedule), _outcome(schedule.explicit())
    assert (compact is None) == (written is None), (compact, written)
    return compact, written


@pytest.fixture
def every_rank_forbidden(monkeypatch):
    """verify may not run every rank (symbolic._run)."""
    def every_rank(*args):
        raise AssertionError("verify ran every rank")
    monkeypatch.setattr(symbolic, "_run", every_rank)


@pytest.mark.parametrize("primitive, algorithm", PAIRS)
def test_every_schedule_verifies_compact_and_written_out(primitive, algorithm):
    for n in (1, 2, 3, 4, 5, 8, 16, 64):
        schedule = _schedule(primitive, algorithm, n)
        if n < 64 or _symmetric(schedule):
            verify(schedule)
            verify(schedule.explicit())


def test_symmetric_schedules_are_verified_from_rank_0(every_rank_forbidden):
    """Rotations, xors and mirrors (Swing at powers of two)."""
    seen = set()
    for primitive, algorithm in PAIRS:
        for n in (2, 3, 4, 6, 8, 64):
            schedule = _schedule(primitive, algorithm, n)
            if _symmetric(schedule):
                verify(schedule)
                seen.add((primitive, algorithm))
    assert {("allreduce", "ring"), ("allreduce", "halving_doubling"), ("alltoall", "bruck"),
            ("allreduce", "swing")} <= seen


def _ring(primitive: str, n: int = 6) -> Schedule:
    return jaxcoll.schedule(primitive, "ring", n)


def _with_round(schedule: Schedule, index: int, transfers: list[Transfer]) -> Schedule:
    """The schedule with round ``index``'s base transfers replaced (its symmetry kept)."""
    rounds = list(schedule.rounds)
    rounds[index] = Round(transfers, rounds[index].symmetry)
    return replace(schedule, rounds=tuple(rounds))


def _without_round(schedule: Schedule, index: int) -> Schedule:
    return replace(schedule, rounds=schedule.rounds[:index] + schedule.rounds[index + 1:])


def _swing(n: int = 8) -> Schedule:
    """Swing allreduce: every round mirrored (odd ranks r make rank 0's 0 -> d as r -> r - d)."""
    return jaxcoll.schedule("allreduce", "swing", n)


def _as_rotations(schedule: Schedule) -> Schedule:
    """The schedule with every mirrored round rotated instead (odd ranks too: r -> r + d)."""
    return replace(schedule, rounds=tuple(Round(r.base, replace(r.symmetry, kind="rotate"))
                                          for r in schedule.rounds))


BROKEN = {  # a broken symmetric schedule and the error verify names
    "round dropped": (_without_round(_ring("allreduce"), 3),
                      r"after round 8, rank 0 chunk 0 holds \[\(0, 0\), \(5, 0\)\]; "
                      r"missing \[\(1, 0\), "),
    "wrong chunk": (_with_round(_ring("allgather"), 0, [Transfer(0, 1, 2, False)]),
                    r"round 0: rank 0 sends chunk 2 to rank 1 before it holds any data"),
    "double count": (replace(_ring("reduce_scatter"),
                             rounds=_ring("reduce_scatter").rounds * 2),
                     r"round 5: 0->1 \[5\]\+ counts contributions twice into rank 1 chunk 5: "
                     r"\[\(0, 5\)\]$"),
    "reduce into nothing": (_with_round(_ring("allgather"), 0, [Transfer(0, 1, 0, True)]),
                            r"round 0: rank 1 reduces into chunk 0, which holds no data yet"),
    "copied twice": (_with_round(_ring("allgather"), 0, [Transfer(0, 1, 0, False),
                                                         Transfer(0, 2, 1, False)]),
                     r"round 0: rank 1 chunk 0 is written by 2 transfers, at least one a copy: "
                     r"0->1 \[0\]=, 5->1 \[0\]="),
    "mirror round dropped": (_without_round(_swing(), 1),
                             r"after round 4, rank 0 chunk 0 holds \[\(0, 0\), \(1, 0\), "
                             r"\(2, 0\), \(3, 0\)\]; missing \[\(4, 0\), "),
    "mirror double count": (replace(_swing(), rounds=_swing().rounds[:2] + _swing().rounds[1:]),
                            r"round 2: 0->7 \[4,7\]\+ counts contributions twice into rank 7 "
                            r"chunk 4: \[\(0, 4\), \(1, 4\)\]$"),
    "mirror rotated": (_as_rotations(_swing()),
                       r"round 1: 0->7 \[4,7\]\+ counts contributions twice into rank 7 chunk 4: "
                       r"\[\(7, 4\)\]$"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_symmetric_schedule_is_caught_alike(case):
    schedule, message = BROKEN[case]
    compact, written = _both(schedule)
    assert compact == written
    with pytest.raises(ScheduleError, match=message):
        verify(schedule)


def _masks(schedule: Schedule, mask) -> Schedule:
    """The schedule with each round's xor mask replaced by ``mask(round index, mask)``."""
    return replace(schedule, rounds=tuple(
        Round(r.base, replace(r.symmetry, mask=mask(i, r.symmetry.mask)))
        for i, r in enumerate(schedule.rounds)))


def test_xor_rounds_verify_under_one_mask_where_they_agree_with_it(every_rank_forbidden):
    """Halving and doubling rounds each have their own mask; each base transfer's blocks are
    closed under the bits where it differs from the finest, so the rounds are symmetric under
    that one, and written with it for every round they are the same schedule."""
    halving_doubling = jaxcoll.schedule("allreduce", "halving_doubling", 16)
    assert len({r.symmetry.mask for r in halving_doubling.rounds}) == 4
    verify(halving_doubling)
    verify(_masks(halving_doubling, lambda i, mask: 15))


def _written_out(schedule: Schedule) -> list[set]:
    """Each round's transfers as a set, each transfer's (chunk, into) pairs as a set."""
    return [{(t.src, t.dst, frozenset(zip(t.chunks, t.into)), t.reduce) for t in r.transfers}
            for r in schedule.rounds]


def test_an_xor_mask_that_breaks_the_closure_fails_both_ways():
    """Any other mask in one round: the same schedule where its blocks are closed under the
    bits it changes, else a broken one."""
    halving_doubling = jaxcoll.schedule("allreduce", "halving_doubling", 8)
    for index in range(len(halving_doubling.rounds)):
        for other in range(8):  # rank r sends rank 0's blocks xor-ed by r & other
            changed = _masks(halving_doubling, lambda i, mask: other if i == index else mask)
            same = _written_out(changed) == _written_out(halving_doubling)
            compact, _ = _both(changed)
            assert (compact is None) == same, (index, other, compact)


@pytest.mark.parametrize("primitive, root", [("reduce", 2), ("broadcast", 2), ("gather", 0)])
def test_symmetric_rounds_under_a_rooted_primitive_verify_as_written_out(primitive, root):
    """Ring allreduce's rounds labelled with a rooted primitive: a reduce (it keeps its promise)
    and a broadcast and a gather (ranks send chunks that hold nothing)."""
    labelled = replace(jaxcoll.schedule("allreduce", "ring", 6), collective=primitive, root=root)
    compact, written = _both(labelled)
    assert compact == written and (compact is None) == (primitive == "reduce")


def _mutated(schedule: Schedule, rng: random.Random) -> Schedule | None:
    """The schedule with one random change: a round dropped or repeated, or in a round one base
    transfer's chunk, into, destination or kind changed; None if that is no valid schedule."""
    rounds, index = list(schedule.rounds), rng.randrange(len(schedule.rounds))
    change = rng.choice(["drop", "repeat", "chunk", "into", "dst", "kind"])
    if change in ("drop", "repeat"):
        rounds[index:index + 1] = [] if change == "drop" else [rounds[index]] * 2
    else:
        base = list(rounds[index].base)
        k, other = rng.randrange(len(base)), rng.randrange(schedule.n_chunks)
        t = base[k]
        chunks, into = list(t.chunks), list(t.into)
        (chunks if change == "chunk" else into)[rng.randrange(len(chunks))] = other
        dst = rng.randrange(1, schedule.n_ranks) if change == "dst" else t.dst
    try:
        if change not in ("drop", "repeat"):
            base[k] = Transfer(0, dst, chunks, t.reduce != (change == "kind"), into)
            rounds[index] = Round(base, rounds[index].symmetry)
        built = Schedule.build(schedule.name, schedule.n_ranks, n_chunks=schedule.n_chunks,
                               rounds=rounds)
    except ValueError:
        return None
    return replace(built, collective=schedule.collective, root=schedule.root)


@pytest.mark.parametrize("primitive, algorithm", [
    ("allreduce", "ring"), ("allreduce", "bidirectional_ring"), ("allreduce", "halving_doubling"),
    ("reduce_scatter", "pairwise"), ("allgather", "bruck"), ("alltoall", "bruck"),
    ("alltoall", "naive"), ("allreduce", "swing")])
def test_randomly_broken_schedules_fail_both_ways_alike(primitive, algorithm):
    rng = random.Random(f"{primitive} {algorithm}")
    for n in (4, 6, 8):
        schedule = jaxcoll.schedule(primitive, algorithm, n)
        if _symmetric(schedule):
            for _ in range(40):
                mutated = _mutated(schedule, rng)
                if mutated is not None and mutated.rounds:
                    _both(mutated)


def test_ring_allreduce_on_1024_ranks_is_verified_from_rank_0(every_rank_forbidden):
    ring = jaxcoll.schedule("allreduce", "ring", 1024)
    verify(ring)
    again = replace(ring, rounds=ring.rounds[:1023] + ring.rounds[1022:])  # a reduce, twice
    message = r"round 1023: 0->1 \[1\]\+ counts contributions twice into rank 1 chunk 1: "
    with pytest.raises(ScheduleError, match=message + r"\[\(0, 1\), \(2, 1\), "):
        verify(again)


@pytest.mark.parametrize("primitive, algorithm", [
    ("allreduce", "ring"), ("allreduce", "halving_doubling"), ("allreduce", "swing"),
    ("alltoall", "bruck")])
def test_4096_ranks_are_verified_from_rank_0(primitive, algorithm, request,
                                            every_rank_forbidden):
    """verify takes seconds each and under 0.2 GB; alltoall's the longest (about 8 s on 2 busy
    cores, most of it checking that every rank's promised row, n entries, is rank 0's moved)."""
    if not request.config.getoption("--deep"):
        pytest.skip("4096 ranks: seconds each (--deep)")
    verify(jaxcoll.schedule(primitive, algorithm, 4096))
