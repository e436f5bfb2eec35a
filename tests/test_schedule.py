"""Schedule objects, and the executor against a plain-numpy simulation of any schedule."""

from functools import lru_cache

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from helpers import AXIS, assert_same, per_rank
from jaxcoll.ir.families import build_schedule
from jaxcoll.lowering.execute import execute, in_sequence, lower
from jaxcoll.ir.schedules import Round, Schedule, ScheduleError, Transfer, split_round


def simulate(schedule: Schedule, buffers: np.ndarray) -> np.ndarray:
    """The meaning of a schedule, in numpy: buffers (n_ranks, n_chunks, chunk_len)."""
    buffers = buffers.copy()
    for round_ in schedule.rounds:
        before = buffers.copy()  # every transfer of a round reads the state before it
        for t in round_:
            sent = before[t.src, list(t.chunks)]
            if t.reduce:
                buffers[t.dst, list(t.into)] += sent
            else:
                buffers[t.dst, list(t.into)] = sent
    return buffers


def random_schedule(n: int, rng) -> Schedule:
    """Random rounds: ranks may send and receive several times a round, any chunk ids, received
    into the same ids or others. A chunk copied into in a round is written by nothing else in
    it (else the round has no meaning); several reduces into one chunk are fine."""
    n_chunks = int(rng.integers(1, 6))
    rounds = []
    for _ in range(int(rng.integers(1, 5))):
        transfers, written = [], {}  # (dst, chunk) -> "copy" or "reduce"
        for _ in range(int(rng.integers(1, 2 * n + 1))):
            src, dst = (int(r) for r in rng.choice(n, size=2, replace=False))
            n_moved = int(rng.integers(1, n_chunks + 1))
            chunks = [int(c) for c in rng.choice(n_chunks, size=n_moved, replace=False)]
            into = chunks
            if rng.integers(2):
                into = [int(c) for c in rng.choice(n_chunks, size=n_moved, replace=False)]
            kind = "reduce" if rng.integers(2) else "copy"
            clash = [written.get((dst, c)) for c in into]
            if "copy" in clash or (kind == "copy" and any(clash)):
                continue
            written.update({(dst, c): kind for c in into})
            transfers.append(Transfer(src, dst, chunks, kind == "reduce", into=into))
        rounds.append(transfers)
    return Schedule.build(f"random n={n}", n, n_chunks=n_chunks, rounds=rounds)


@lru_cache(maxsize=None)
def random_program(n: int, seed: int):
    rng = np.random.default_rng(seed)
    schedules = [random_schedule(n, rng) for _ in range(4)]
    program = per_rank(lambda bufs: in_sequence(lambda b, s: execute(s, b, AXIS, lax.add), bufs,
                                                schedules), n)
    return schedules, program


@pytest.mark.parametrize("n", range(2, 9))
def test_executor_matches_simulation_of_random_schedules(n):
    schedules, program = random_program(n, seed=n)
    rng = np.random.default_rng(100 + n)
    buffers = [rng.integers(-50, 50, size=(n, s.n_chunks, 3)).astype(np.int32) for s in schedules]
    for schedule, buf, got in zip(schedules, buffers, program([jnp.asarray(b) for b in buffers])):
        assert_same(got, simulate(schedule, buf), str(schedule))


def test_round_where_a_rank_sends_twice_is_split():
    round_ = Round([Transfer(0, 1, 0, True), Transfer(0, 2, 1, True), Transfer(3, 1, 2, True)])
    groups = split_round(round_)
    assert [[(t.src, t.dst) for t in g] for g in groups] == [[(0, 1)], [(0, 2), (3, 1)]]


def test_ring_rounds_fold_into_one_segment_per_phase():
    segments = lower(build_schedule("allreduce", "ring", 8))
    assert [s.n_steps for s in segments] == [7, 7]
    assert [s.matchings[0].reduce for s in segments] == [True, False]


def test_str_prints_rounds_as_a_table():
    text = str(build_schedule("allgather", "naive", 3))
    assert text.splitlines() == [
        "naive gather + naive broadcast: 3 ranks, 3 chunks, 4 rounds   (src->dst [chunks], '+' reduce, '=' copy)",
        "  round 0 | 1->0 [1]=",
        "  round 1 | 2->0 [2]=",
        "  round 2 | 0->1 [0,1,2]=",
        "  round 3 | 0->2 [0,1,2]="]
    assert repr(build_schedule("allreduce", "ring", 4)) == (
        "Schedule('ring reduce_scatter + ring allgather', n_ranks=4, n_chunks=4, n_rounds=6)")


def test_concatenation_needs_matching_layouts():
    with pytest.raises(ValueError, match="cannot concatenate"):
        build_schedule("allreduce", "ring", 4) + build_schedule("allreduce", "naive", 4)


@pytest.mark.parametrize("make, message", [
    (lambda: [Transfer(0, 4, 0, True)], r"round 0: transfer 0->4 \[0\]\+ names rank 4"),
    (lambda: [Transfer(0, 1, 9, True)], r"round 0: transfer 0->1 \[9\]\+ names chunk 9"),
    (lambda: [Transfer(1, 1, 0, False)], "a local transfer .* moves a chunk onto itself"),
    (lambda: [Transfer(0, 1, (), False)], "moves no chunk"),
    (lambda: [Transfer(0, 1, -1, False)], "chunk ids must be >= 0"),
    (lambda: [Transfer(0, 1, 0.5, False)], "chunk ids must be ints"),
    (lambda: [Transfer(0, 1, [0, 1], True, into=[1, 1])], "writes a chunk twice"),
    (lambda: [(0, 1, 0, False)], "every transfer must be a Transfer"),
])
def test_bad_transfers_are_rejected(make, message):
    """Every index is checked when a schedule is made, by hand or not: a ScheduleError (a
    ValueError) that names the round, the transfer and the rank or chunk, never an
    IndexError later."""
    with pytest.raises(ScheduleError, match=message):
        Schedule("bad", 4, 2, (make(),))


def test_long_ids_shared_by_transfers_are_checked_once_and_still_refused_where_wrong():
    """naive reduce_scatter and allgather share one tuple of every chunk id between n - 1
    transfers: it is checked once (remembered by identity, with its largest id); a transfer
    reusing it is still refused for a bad rank, a local move onto itself or an ``into`` of
    another length, and so is a schedule with fewer chunks; a tuple with a repeated id is
    never remembered."""
    from jaxcoll.ir import schedules

    everything = tuple(range(100))
    Transfer(1, 0, everything, reduce=True)
    assert schedules._largest_known(everything) == 99
    assert schedules._largest_known(tuple(range(100))) is None  # equal, another tuple
    for make, message in ((lambda: Transfer(-1, 0, everything, True), ">= 0"),
                          (lambda: Transfer(0, 0, everything, True), "onto itself"),
                          (lambda: Transfer(1, 0, everything, True, into=everything[1:]),
                           "differ in length")):
        with pytest.raises(ScheduleError, match=message):
            make()
    with pytest.raises(ScheduleError, match="names chunk 50 "):
        Schedule.build("short", 2, n_chunks=50, rounds=[[Transfer(1, 0, everything, True)]])
    repeated = tuple(range(99)) + (0,)
    with pytest.raises(ScheduleError, match="twice"):
        Transfer(1, 0, everything, True, into=repeated)
    assert schedules._largest_known(repeated) is None
    from jaxcoll.ir.families import naive  # made here, not build_schedule's cached one

    built = naive.reduce_scatter(70)
    assert schedules._largest_known(built.rounds[0].base[0].chunks) == 69


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_textbook_round_counts(n):
    assert build_schedule("allreduce", "ring", n).n_rounds == 2 * (n - 1)
    assert build_schedule("reduce_scatter", "ring", n).n_rounds == n - 1
    assert build_schedule("allgather", "ring", n).n_rounds == n - 1
    assert build_schedule("allreduce", "naive", n).n_rounds == 2 * (n - 1)


def test_executor_rejects_a_schedule_for_another_rank_count():
    program = per_rank(lambda b: execute(build_schedule("allreduce", "ring", 3), b, AXIS, lax.add),
                       4)
    with pytest.raises(ValueError, match="the schedule is for 3 ranks but axis 'i' has 4"):
        program(jnp.zeros((4, 1, 6)))
