"""What runs is what was proved: the executor's plan is checked against its schedule before
anything is traced (jaxcoll/lowering/validate.py), and a plan broken on purpose is refused with a
ScheduleError that says so, never run."""

from dataclasses import replace

import numpy as np
import pytest

from jaxcoll.lowering import ids, validate
from jaxcoll.ir.families import SCHEDULES, build_schedule
from jaxcoll.lowering.plan import Ids, lower
from jaxcoll.ir.schedules import Round, Schedule, ScheduleError, Symmetry, Transfer


def registered(n: int):
    for primitive, algorithms in SCHEDULES.items():
        for name, entry in algorithms.items():
            if not entry.two_level:
                yield build_schedule(primitive, name, n)
    if n in (4, 8):
        for primitive in ("allreduce", "reduce_scatter", "allgather"):
            yield build_schedule(primitive, "hierarchical", (2, n // 2))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 8, 12, 16])
def test_every_registered_plan_is_what_its_schedule_says(n):
    """Every registered schedule's plan passes the check (lower runs it; here once more on the
    cached plan, in case lower stopped calling it)."""
    for schedule in registered(n):
        validate.check(schedule, lower(schedule))


def _symmetric_segment(schedule):
    return next(k for k, s in enumerate(lower(schedule)) if s.receivers[0] is None
                and len(s.matchings[0].perm) == schedule.n_ranks)


def _broken(schedule, k, **fields):
    """The plan of ``schedule`` with segment k's fields replaced."""
    segments = list(lower(schedule))
    segments[k] = replace(segments[k], **fields)
    return segments


def _moved(ids: Ids, **arrays) -> Ids:
    """``ids`` with some of its arrays replaced (by name)."""
    return replace(ids, arrays=ids.arrays._replace(**arrays))


def _refused(schedule, segments, match="disagrees with the schedule"):
    with pytest.raises(ScheduleError, match=match):
        validate.check(schedule, segments)


def test_a_symmetric_round_read_another_way_is_refused():
    """The ring's receive ids composed with a stride the symmetry does not have (the kind of
    misreading the issue found), its send ids one chunk off, its pairs reversed."""
    ring = build_schedule("allreduce", "ring", 6)
    k = _symmetric_segment(ring)
    segment = lower(ring)[k]
    recv, send = segment.recv_ids[0], segment.send_ids[0]
    _refused(ring, _broken(ring, k, recv_ids=(_moved(recv, stride=recv.arrays.stride + 1),)),
             "move by stride")
    _refused(ring, _broken(ring, k, send_ids=(_moved(send, base=(send.arrays.base + 1) % 6),)),
             "rank 0 sends chunks")
    matching = segment.matchings[0]
    backwards = replace(matching, perm=tuple((dst, src) for src, dst in matching.perm))
    _refused(ring, _broken(ring, k, matchings=(backwards,)), "not every rank's copy")


def test_the_group_action_the_proof_needs_is_checked_again():
    """A Symmetry made without its constructor's checks (a stride that does not close its
    cycle): the plan check refuses it rather than trust that it composes."""
    bad = object.__new__(Symmetry)
    for name, value in dict(kind="rotate", n_ranks=2, stride=1, modulus=3, mask=0).items():
        object.__setattr__(bad, name, value)
    round_ = object.__new__(Round)
    object.__setattr__(round_, "base", (Transfer(0, 1, [0, 1, 2], True),))
    object.__setattr__(round_, "symmetry", bad)
    schedule = object.__new__(Schedule)
    for name, value in dict(name="bad", n_ranks=2, n_chunks=3, rounds=(round_,),
                            collective="allreduce", root=0).items():
        object.__setattr__(schedule, name, value)
    with pytest.raises(ScheduleError, match="not a group action"):
        lower(schedule)


def test_an_explicit_round_read_another_way_is_refused():
    """A tree's round with one pair's receiver changed, its ids shifted, its receiver mask
    one rank short, a transfer dropped; a scatter that writes a chunk twice."""
    tree = build_schedule("broadcast", "tree", 8)
    k, segment = next((k, s) for k, s in enumerate(lower(tree)) if len(s.matchings[0].perm) > 1)
    matching = segment.matchings[0]
    (src, dst), *rest = matching.perm
    elsewhere = next(r for r in range(8) if r not in {d for _, d in matching.perm} | {src})
    moved = replace(matching, perm=((src, elsewhere), *rest))
    _refused(tree, _broken(tree, k, matchings=(moved,) + segment.matchings[1:]))
    recv = segment.recv_ids[0]
    shifted = Ids("table", recv.n_steps, recv.n_moved, (recv.table(8) + 1,))
    _refused(tree, _broken(tree, k, recv_ids=(shifted,) + segment.recv_ids[1:]))
    flags = np.zeros((1, 8, 1), np.int32)
    flags[0, [d for _, d in matching.perm][1:]] = 1
    mask = Ids("table", 1, 1, (flags,))
    _refused(tree, _broken(tree, k, receivers=(mask,) + segment.receivers[1:]),
             "receiver mask")
    _refused(tree, lower(tree)[:-1], "runs .* rounds")

    double = Schedule("two writes", 3, 3, ([Transfer(0, 2, 0, True), Transfer(1, 2, 0, True)],),
                      "reduce")
    (only,) = lower(double)
    assert len(only.matchings) == 2 and not only.one_write  # two reduces: one after the other
    _refused(double, [replace(only, one_write=True)], "writes a chunk twice")
    # one transfer writing a chunk twice (made past Transfer's own check): caught all the same
    twice = object.__new__(Transfer)
    for name, value in dict(src=0, dst=1, chunks=(0, 1), reduce=True, into=(1, 1)).items():
        object.__setattr__(twice, name, value)
    within = Schedule("one transfer, two writes", 2, 2, ([twice],), "reduce", root=1)
    (only,) = lower(within)
    assert not only.one_write
    _refused(within, [replace(only, one_write=True)], "writes a chunk twice")


def test_malformed_tables_and_masks_are_refused():
    """Arrays holding fewer rows than their steps (the check would read past them, the
    executor clamp), and a one-rank receiver mask whose own row is 0 (the executor once
    flagged that rank by its listing alone): refused, not read either way."""
    ring = build_schedule("allreduce", "ring", 6)
    k = next(k for k, s in enumerate(lower(ring)) if s.n_steps > 2)
    send = lower(ring)[k].send_ids[0]
    short = _moved(send, base=np.repeat(send.arrays.base[:1], 2, axis=0))  # 2 rows, not 1 or 5
    assert send.arrays.base.shape[0] == 1 and send.n_steps > 2
    _refused(ring, _broken(ring, k, send_ids=(short,)), "malformed")
    tree = build_schedule("broadcast", "tree", 8)
    k, segment = next((k, s) for k, s in enumerate(lower(tree))
                      if len(s.matchings[0].perm) == 1 and s.receivers[0] is not None)
    mask = segment.receivers[0]
    assert mask.kind == "rows" and len(mask.arrays.ranks) == 1
    _refused(tree, _broken(tree, k, receivers=(_moved(mask, rows=0 * mask.arrays.rows),)),
             "receiver mask")


def test_a_run_of_ids_read_another_way_is_refused():
    """The naive allgather's broadcast sends the whole buffer as one run (its first id
    kept): that run starting one chunk on, or its receive ids as a table one chunk on, is
    refused; so is a round whose run the schedule breaks."""
    naive = build_schedule("allgather", "naive", 5)
    k, segment = next((k, s) for k, s in enumerate(lower(naive))
                      if s.send_ids[0].first_only and s.send_ids[0].n_moved > 1)
    send = segment.send_ids[0]
    assert send.kind == "rows"
    _refused(naive, _broken(naive, k, send_ids=(_moved(send, rows=send.arrays.rows + 1),)),
             "the plan moves")
    recv = segment.recv_ids[0]
    table = Ids("table", recv.n_steps, recv.n_moved, (recv.table(5) + 1,))
    _refused(naive, _broken(naive, k, recv_ids=(table,)), "the plan moves")
    assert all(s.n_steps == 1 for s in lower(naive))  # segment k runs round k
    (t,) = naive.rounds[k].base
    swapped = Round([Transfer(t.src, t.dst, (t.chunks[1], t.chunks[0], *t.chunks[2:]),
                              t.reduce)])
    other = replace(naive, rounds=naive.rounds[:k] + (swapped,) + naive.rounds[k + 1:])
    _refused(other, lower(naive), "the plan moves")


def test_the_check_is_cheap_for_a_large_ring(monkeypatch):
    """At 1024 ranks the ring allreduce's plan (2046 rounds) is checked without writing out
    its 2 million transfers: rank 0's rows and the symmetry (no (n_steps, n_ranks) table),
    every table read in one call."""
    ring = build_schedule("allreduce", "ring", 1024)
    segments = lower(ring)
    asked = []

    def id_values(items):
        items = list(items)
        asked.append([len(ranks) for _, ranks in items])
        return ids.id_values(items)
    monkeypatch.setattr(validate, "id_values", id_values)
    validate.check(ring, segments)
    assert len(asked) == 1 and set(asked[0]) == {1}, asked
