"""Symbolic verification of every registered schedule, hand-broken schedules, and the cost model."""

import math
from dataclasses import replace

import pytest

import jaxcoll
from jaxcoll.execute import Matching, Segment
from jaxcoll.families import SCHEDULES, two_level
from jaxcoll.schedules import Schedule, Transfer
from jaxcoll.symbolic import ScheduleError, verify

PAIRS = [(p, a) for p, algorithms in SCHEDULES.items() for a in algorithms]
ROOTED = ("broadcast", "reduce", "gather", "scatter")


def shapes(primitive: str, algorithm: str, n: int) -> list:
    """n itself, or for a two-level algorithm every (outer, inner) with outer * inner = n."""
    if two_level(primitive, algorithm):
        return [(outer, n // outer) for outer in range(1, n + 1) if n % outer == 0]
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
        verify(replace(bad, primitive="broadcast"))


def test_a_rank_sending_twice_in_one_ppermute_is_caught(monkeypatch):
    from jaxcoll import symbolic
    broken = Segment((Matching(((0, 1), (0, 2)), 1, False),), ((),), ((),))
    monkeypatch.setattr(symbolic, "lower", lambda schedule: (broken,))
    with pytest.raises(ScheduleError, match=r"rank 0 sends twice in one ppermute"):
        verify(jaxcoll.schedule("broadcast", "binomial", 3))


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
