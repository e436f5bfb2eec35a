"""Symbolic verification of every registered schedule, hand-broken schedules, and the cost model."""

import gc
import math
from contextlib import contextmanager
from dataclasses import replace

import pytest

import jaxcoll
from jaxcoll.tools.check import ROOTED, level_shape
from jaxcoll.ir.families import SCHEDULES, build_schedule, two_level
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Round, Schedule, Transfer
from jaxcoll.ir.symbolic import ScheduleError, verify

pytestmark = pytest.mark.jax_free  # runs no JAX (schedules, models, pages): the same on every jax

PAIRS = [(p, a) for p, algorithms in SCHEDULES.items() for a in algorithms]


def shapes(primitive: str, algorithm: str, n: int) -> list:
    """n itself, or for a hierarchical algorithm every (outer, inner) with outer * inner = n,
    and three levels where n has three prime factors (the main job's: 2 x 2 x 2 for 8). A
    level of one adds nothing (tests/test_hierarchical_levels.py): (1, n) and (n, 1) are the
    n-rank ring, verified as "ring" here, and the slowest shapes to build: n <= 16 only."""
    if two_level(primitive, algorithm):
        three = [level_shape(n, 3)] if min(level_shape(n, 3)) > 1 else []
        outers = [o for o in range(1, n + 1) if n % o == 0 and (n <= 16 or 1 < o < n)]
        return [(outer, n // outer) for outer in outers] + three
    return [n]


@pytest.mark.parametrize("primitive, algorithm", PAIRS)
def test_every_schedule_verifies_for_n_up_to_64(primitive, algorithm):
    for n in range(1, 65):
        roots = range(n) if primitive in ROOTED and n <= 9 else [n - 1]
        for root, shape in [(r, s) for r in roots for s in shapes(primitive, algorithm, n)]:
            verify(jaxcoll.schedule(primitive, algorithm, shape, root=root))


@pytest.mark.parametrize("algorithm", ["tree", "double_tree"])
def test_pipelined_schedules_verify(algorithm):
    for n in (2, 5, 8):
        verify(jaxcoll.schedule("allreduce", algorithm, n, pieces=3))


def _broken(schedule, rounds):
    return replace(schedule, rounds=tuple(rounds))


def test_promises_say_what_each_rank_must_end_with():
    """records.py's promises, rows built as asked for: (rank, [(chunk, origin, ranks), ...])."""
    assert list(RECORDS["alltoall"].promises(3, 6, 0)) == [  # chunk 3 + c: rank c's chunk r
        (r, [(3 + c, r, 1 << c) for c in range(3)]) for r in range(3)]
    assert list(RECORDS["reduce_scatter"].promises(3, 6, 0)) == [
        (r, [(c, c, 0b111) for c in (2 * r, 2 * r + 1)]) for r in range(3)]
    assert list(RECORDS["broadcast"].promises(3, 2, 1)) == [
        (r, [(0, 0, 0b010), (1, 1, 0b010)]) for r in range(3)]
    assert list(RECORDS["reduce"].promises(3, 2, 1)) == [(1, [(0, 0, 0b111), (1, 1, 0b111)])]


def test_dropped_transfer_is_caught():
    ring = jaxcoll.schedule("allreduce", "ring", 4)
    first = ring.rounds[0]
    rounds = [type(first)(first.transfers[1:])] + list(ring.rounds[1:])
    with pytest.raises(ScheduleError, match=r"rank \d chunk \d holds .*missing \[\(0, 3\)\]"):
        verify(_broken(ring, rounds))


def test_duplicated_reduce_is_caught():
    ring = jaxcoll.schedule("reduce_scatter", "ring", 4)
    rounds = list(ring.rounds) + [ring.rounds[-1]]
    with pytest.raises(ScheduleError, match=r"round 3: .* counts contributions twice"):
        verify(_broken(ring, rounds))


def test_wrong_chunk_id_is_caught():
    ring = jaxcoll.schedule("allgather", "ring", 4)
    first = ring.rounds[0]
    bad = Transfer(0, 1, 2, reduce=False)  # rank 0 holds only chunk 0 at the start
    rounds = [type(first)((bad,) + first.transfers[1:])] + list(ring.rounds[1:])
    with pytest.raises(ScheduleError, match=r"round 0: rank 0 sends chunk 2 to rank 1 before"):
        verify(_broken(ring, rounds))


def test_two_copies_into_one_chunk_in_a_round_are_caught():
    bad = Schedule.build("bad", 3, n_chunks=1, rounds=[[Transfer(0, 2, 0, False),
                                                        Transfer(1, 2, 0, False)]])
    with pytest.raises(ScheduleError, match=r"round 0: rank 2 chunk 0 is written by 2"):
        verify(replace(bad, collective="broadcast"))


def test_a_rank_sending_twice_in_one_ppermute_is_caught(monkeypatch):
    from jaxcoll.ir import symbolic
    both = [Transfer(0, 1, 0, False), Transfer(0, 2, 0, False)]  # split_round: two ppermutes
    fan_out = replace(Schedule.build("fan-out", 3, n_chunks=1, rounds=[both]),
                      collective="broadcast")
    verify(fan_out)
    monkeypatch.setattr(symbolic, "split_round", lambda round_: [list(round_)])
    with pytest.raises(ScheduleError, match=r"rank 0 sends twice in one ppermute"):
        verify(fan_out)


ONE_LEVEL = [(p, a) for p, a in PAIRS if not two_level(p, a)]

# --deep: large rank counts and, for hierarchical algorithms, a square and a flat (outer, inner)
# of each, and three levels.
LARGE = {1024: [(32, 32), (4, 256), (4, 16, 16)], 1023: [(31, 33), (3, 341), (3, 11, 31)],
         1000: [(25, 40), (4, 250), (10, 10, 10)]}


@contextmanager
def _no_cyclic_gc():
    """Build and verify with Python's cycle collector off: a schedule written out on thousands
    of ranks holds millions of transfers, which the collector would walk again and again,
    though none is garbage until the schedule is."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _large(primitive: str, algorithm: str, shape, root: int) -> Schedule:
    """Built without jaxcoll.schedule's cache, which would keep it for the rest of the
    session."""
    return build_schedule.__wrapped__(primitive, algorithm, shape, root)


@pytest.mark.parametrize("primitive, algorithm", ONE_LEVEL)
def test_every_schedule_verifies_on_1024_ranks(primitive, algorithm):
    """Every one-level schedule on 1024 ranks, rooted ones at root 1023: about 9 s in all on 2
    busy cores. Symmetric ones are verified from rank 0 alone, in under half a second each; of
    the others, which run every rank, the composites take longest (1-2 s: a binomial scatter
    or gather, explicit, with a ring's 1023 rounds written out around it)."""
    with _no_cyclic_gc():
        verify(_large(primitive, algorithm, 1024, root=1023))


@pytest.mark.parametrize("primitive, algorithm", PAIRS)
def test_every_schedule_verifies_at_large_n(primitive, algorithm, request):
    """With --deep, every schedule on 1000 and 1023 ranks, and one-level ones on 4096 (rooted
    ones at root n - 1); hierarchical ones in LARGE's shapes, 1024 too.

    Measured on 2 busy cores: about 6 minutes in all, most one-level ones 1-8 s and 0.2 GB.
    Those that run every rank with every rank's data in every chunk hold 16 million 4096-bit
    cells at 4096, 10 GB: naive reduce_scatter (35 s) and reduce_scatter_gather (90 s).
    """
    if not request.config.getoption("--deep"):
        pytest.skip("1000, 1023 and 4096 ranks, hierarchical shapes: minutes, GBs (--deep)")
    hierarchical = two_level(primitive, algorithm)
    for n in (1000, 1023, 1024) if hierarchical else (1000, 1023, 4096):
        for shape in LARGE[n] if hierarchical else [n]:
            with _no_cyclic_gc():
                verify(_large(primitive, algorithm, shape, root=n - 1))


def test_a_broken_large_schedule_is_caught():
    """Ring allreduce on 1024 ranks with its first round dropped, every rank's transfer
    (symmetric: verified from rank 0 alone), and on 64 ranks written out with one rank's
    transfer dropped. A reduce counted twice on 1024 ranks: test_symmetric_verify.py."""
    ring = _large("allreduce", "ring", 1024, root=0)
    message = r"after round 2044, rank 0 chunk 0 holds \[.*\]; missing \[\(1, 0\)\], "
    with pytest.raises(ScheduleError, match=message + r"unexpected \[\]$"):
        verify(_broken(ring, ring.rounds[1:]))
    written = jaxcoll.schedule("allreduce", "ring", 64).explicit()
    first = written.rounds[0]  # rank 0 adds its chunk 63 into rank 1's
    dropped = [Round(first.transfers[1:])] + list(written.rounds[1:])
    message = r"after round 125, rank 0 chunk 63 holds \[.*\]; missing \[\(0, 63\)\], "
    with pytest.raises(ScheduleError, match=message + r"unexpected \[\]$"):
        verify(_broken(written, dropped))


def test_a_reduce_of_two_chunk_ids_into_one_is_reported():
    """The fast path holds one chunk id per chunk; a schedule mixing two is run on sets."""
    mixed = Schedule.build("mixed", 2, n_chunks=2, rounds=[[Transfer(1, 0, 1, True, into=0)]])
    with pytest.raises(ScheduleError, match=r"rank 0 chunk 0 holds \[\(0, 0\), \(1, 1\)\]; "
                                            r"missing \[\(1, 0\)\], unexpected \[\(1, 1\)\]"):
        verify(replace(mixed, collective="allreduce"))


# ----------------------------------------------------------------------------- cost

A, B, G = 1e-5, 1e-9, 1e-10


@pytest.mark.parametrize("n", [2, 3, 4, 7, 8, 16])
def test_cost_reproduces_textbook_formulas(n):
    N = 1e6
    ring = jaxcoll.cost(jaxcoll.schedule("allreduce", "ring", n), N, alpha=A, beta=B, gamma=G)
    assert ring.seconds == pytest.approx(2 * (n - 1) * A + 2 * (n - 1) / n * N * B
                                         + (n - 1) / n * N * G)
    log2 = math.ceil(math.log2(n))
    binomial = jaxcoll.cost(jaxcoll.schedule("broadcast", "binomial", n), N, alpha=A, beta=B)
    assert binomial.seconds == pytest.approx(log2 * (A + N * B))
    naive = jaxcoll.cost(jaxcoll.schedule("broadcast", "naive", n), N, alpha=A, beta=B)
    assert naive.seconds == pytest.approx((n - 1) * (A + N * B))
    gather = jaxcoll.cost(jaxcoll.schedule("allgather", "ring", n), N, alpha=A, beta=B)
    assert gather.seconds == pytest.approx((n - 1) * A + (n - 1) / n * N * B)
    assert ring.messages == 2 * (n - 1)
    assert ring.bytes_sent == pytest.approx(2 * (n - 1) / n * N)
    assert ring.bytes_reduced == pytest.approx((n - 1) / n * N)
