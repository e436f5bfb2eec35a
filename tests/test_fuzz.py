"""A differential fuzzer: what a user hands in is refused clearly or runs right.

Seeded random mutations of every registered schedule (a round's symmetry, a transfer's ranks,
ids or kind, rounds dropped, repeated, swapped, appended or written out, the chunk count or
root) and random small schedules. Each case must end one of three ways:

- refused when it is made (``Schedule``, ``Round``, ``Symmetry``, ``Transfer``): a ScheduleError;
- refused by ``verify``: a ScheduleError, and the public collective given it as ``algorithm=``
  refuses it too (at trace time: nothing runs);
- verified: its plan passes the plan check and the collective it runs equals lax's, exactly
  (small integers, whose sums are exact in any order).

Any other outcome (an IndexError, a wrong answer, a verified schedule whose plan is refused)
fails. 300 cases by default, 10,000 with ``--deep``; ``python tests/test_fuzz.py --cases N``
prints what the cases came to.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import replace

import numpy as np

if __name__ == "__main__":  # as a script: the tests' devices, before JAX starts
    sys.path.insert(0, os.path.dirname(__file__))
    import conftest  # noqa: F401

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

import jaxcoll
from helpers import AXIS, mesh
from jaxcoll.tools.check import ROOTED, SCATTERING, call_collective, ours_and_reference
from jaxcoll.ir.families import SCHEDULES, build_schedule
from jaxcoll.lowering.plan import lower
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Round, Schedule, ScheduleError, Symmetry, Transfer

NS = (1, 2, 3, 4, 5, 6, 8)
SEED = 20261202


def registered() -> list[Schedule]:
    """Every one-level registered schedule at every n of NS (rooted ones from a middle root)."""
    found = []
    for primitive, algorithms in SCHEDULES.items():
        for name, entry in algorithms.items():
            if entry.two_level:
                continue
            for n in NS:
                root = n // 2 if entry.rooted else 0
                found.append(build_schedule(primitive, name, n, root))
    return found


# ----------------------------------------------------------------------------- mutations

def _new_round(round_: Round, rng) -> Round:
    """One field of the round's symmetry, or of one of its transfers, moved by one."""
    if round_.symmetry is not None and rng.random() < 0.5:
        field = rng.choice(["n_ranks", "stride", "modulus", "mask"])
        symmetry = replace(round_.symmetry, **{field: getattr(round_.symmetry, field)
                                               + int(rng.choice([-1, 1]))})
        return Round(round_.base, symmetry)
    transfers = list(round_.base)
    k = int(rng.integers(len(transfers)))
    t = transfers[k]
    field = rng.choice(["src", "dst", "chunks", "into", "reduce"])
    step = int(rng.choice([-1, 1]))
    if field == "reduce":
        transfers[k] = Transfer(t.src, t.dst, t.chunks, not t.reduce, t.into)
    elif field in ("src", "dst"):
        ends = {"src": t.src, "dst": t.dst}
        ends[field] += step
        transfers[k] = Transfer(ends["src"], ends["dst"], t.chunks, t.reduce, t.into)
    else:
        ids = list(getattr(t, field))
        ids[int(rng.integers(len(ids)))] += step
        chunks, into = (ids, t.into) if field == "chunks" else (t.chunks, ids)
        transfers[k] = Transfer(t.src, t.dst, chunks, t.reduce, into)
    return Round(transfers, round_.symmetry)


def mutate(schedule: Schedule, rng) -> Schedule:
    """``schedule`` with one random change (may raise ScheduleError, as a user's would)."""
    rounds = list(schedule.rounds)
    kind = rng.choice(["round", "round", "round", "drop", "repeat", "swap", "append",
                       "explicit", "drop transfer", "chunks", "root"])
    if not rounds:
        kind = "chunks"
    i = int(rng.integers(len(rounds))) if rounds else 0
    if kind == "round":
        rounds[i] = _new_round(rounds[i], rng)
    elif kind == "drop":
        del rounds[i]
    elif kind == "repeat":
        rounds.insert(i, rounds[i])
    elif kind == "swap" and len(rounds) > 1:
        j = (i + 1) % len(rounds)
        rounds[i], rounds[j] = rounds[j], rounds[i]
    elif kind == "append":
        rounds.append(random_round(schedule.n_ranks, schedule.n_chunks, rng))
    elif kind == "explicit":
        rounds[i] = Round(rounds[i].transfers)
    elif kind == "drop transfer":
        transfers = list(rounds[i].base)
        del transfers[int(rng.integers(len(transfers)))]
        rounds[i] = Round(transfers, rounds[i].symmetry)
    elif kind == "chunks":
        return replace(schedule, n_chunks=schedule.n_chunks + int(rng.choice([-1, 1])))
    elif kind == "root":
        return replace(schedule, root=(schedule.root + 1) % (schedule.n_ranks + 1))
    return replace(schedule, rounds=tuple(rounds))


def random_round(n: int, n_chunks: int, rng) -> Round:
    """A few random transfers, or one symmetric transfer of rank 0 under a random symmetry."""
    def transfer(src, dst):
        moved = int(rng.integers(1, min(3, n_chunks) + 1))
        chunks = rng.choice(n_chunks, moved, replace=False).tolist()
        into = rng.choice(n_chunks, moved, replace=False).tolist()
        return Transfer(src, dst, chunks, bool(rng.random() < 0.5), into)

    if n == 1:  # no rank to send to
        return Round([])
    if rng.random() < 0.4:
        kind = rng.choice(["rotate", "xor", "mirror"])
        stride = int(rng.integers(0, 3))
        symmetry = Symmetry(kind, n, stride=stride, modulus=int(rng.choice([n, 2 * n, n_chunks])),
                            mask=int(rng.integers(0, n)))
        return Round([transfer(0, int(rng.integers(1, n)))], symmetry)
    pairs = [tuple(rng.choice(n, 2, replace=False).tolist()) for _ in range(rng.integers(1, 4))]
    pairs = [(src, src) if rng.random() < 0.2 else (src, dst) for src, dst in pairs]  # local
    return Round([transfer(src, dst) for src, dst in pairs])


def random_schedule(rng) -> Schedule:
    """A small random schedule of a random primitive, with scratch chunks and out of place at
    times."""
    n = int(rng.choice(NS))
    primitive = str(rng.choice(sorted(RECORDS)))
    n_chunks = RECORDS[primitive].rows("schedule_blocks", n) * int(rng.integers(1, 3))
    n_scratch = int(rng.choice([0, 0, 2, n_chunks, n_chunks + 1]))
    input_at = n_chunks if n_scratch >= n_chunks and rng.random() < 0.5 else 0
    rounds = [random_round(n, n_chunks + n_scratch, rng) for _ in range(rng.integers(1, 5))]
    return Schedule("random", n, n_chunks, tuple(rounds), primitive, int(rng.integers(n)),
                    n_scratch=n_scratch, input_at=input_at)


def cases(count: int, seed: int = SEED):
    """``count`` (label, make) pairs: make() builds the case (and may raise ScheduleError)."""
    rng = np.random.default_rng(seed)
    schedules = registered()
    for k in range(count):
        if k % 4 == 3:
            yield f"random #{k}", (lambda r=np.random.default_rng(rng.integers(2**32)):
                                   random_schedule(r))
        else:
            base = schedules[int(rng.integers(len(schedules)))]
            yield (f"{base.name} n={base.n_ranks} #{k}",
                   lambda b=base, r=np.random.default_rng(rng.integers(2**32)): mutate(b, r))


# ----------------------------------------------------------------------------- outcomes

def classify(make) -> tuple[str, Schedule | None]:
    """("made", "verify" or "run", the schedule): where the case stopped."""
    try:
        schedule = make()
    except ScheduleError:
        return "made", None
    try:
        jaxcoll.verify(schedule)
    except ScheduleError:
        return "verify", schedule
    lower(schedule)  # a verified schedule's plan must pass the plan check: no error here
    return "run", schedule


def _x(primitive: str, n: int):
    count = 2 * n if primitive in SCATTERING else 5
    return jax.ShapeDtypeStruct((n, count), jnp.float32)


def refused_by_the_collective(schedule: Schedule) -> None:
    """The public collective given the schedule raises a ScheduleError at trace time."""
    n = schedule.n_ranks
    fn = jax.shard_map(lambda x: call_collective(schedule.collective, schedule, x[0], AXIS,
                                                 root=schedule.root)[None],
                       mesh=mesh(n), in_specs=P(AXIS), out_specs=P(AXIS))
    with pytest.raises(ScheduleError, match="does not do what"):
        jax.eval_shape(fn, _x(schedule.collective, n))


def run_against_lax(schedules: list[Schedule], rng) -> None:
    """Every schedule (all on n ranks) run as its collective, in one program, equal to lax's."""
    n = schedules[0].n_ranks

    def body(*xs):
        pairs = ours_and_reference(
            schedules, [x[0] for x in xs],
            lambda s, x: call_collective(s.collective, s, x, AXIS, root=s.root),
            lambda s, x: call_collective(s.collective, "xla", x, AXIS, root=s.root))
        return jax.tree_util.tree_map(lambda y: y[None], pairs)

    program = jax.jit(jax.shard_map(body, mesh=mesh(n), in_specs=P(AXIS), out_specs=P(AXIS)))
    inputs = [jnp.asarray(rng.integers(-8, 9, _x(s.collective, n).shape), jnp.float32)
              for s in schedules]
    for schedule, (ours, reference) in zip(schedules, program(*inputs)):
        np.testing.assert_array_equal(ours, reference, err_msg=str(schedule))


def fuzz(count: int, seed: int = SEED) -> Counter:
    """Run ``count`` cases; return how many ended each way (an assertion fails otherwise)."""
    outcomes, verified = Counter(), {}
    for label, make in cases(count, seed):
        outcome, schedule = classify(make)
        outcomes[outcome] += 1
        if outcome == "verify":
            refused_by_the_collective(schedule)
        elif outcome == "run":
            verified.setdefault(schedule.n_ranks, {})[schedule] = label
    rng = np.random.default_rng(seed)
    for n, found in sorted(verified.items()):
        found = list(found)
        for start in range(0, len(found), 16):  # one program per 16 schedules
            run_against_lax(found[start:start + 16], rng)
    outcomes["distinct runs"] = sum(map(len, verified.values()))
    return outcomes


def symmetry_mutations(fields=("n_ranks", "stride", "modulus", "mask"), steps=(-1, 1)):
    """One symmetric round of ring, bruck, recursive doubling, swing and pat schedules at
    n = 4, 6, 8 with one of its symmetry's ``fields`` moved by each of ``steps`` (the first and
    the last symmetric round of each): the cases where the executor used to run wrong."""
    algorithms = ("ring", "bruck", "recursive_doubling", "swing", "pat")
    for primitive, entries in SCHEDULES.items():
        for name in set(entries) & set(algorithms):
            for n in (4, 6, 8):
                schedule = build_schedule(primitive, name, n)
                symmetric = [i for i, r in enumerate(schedule.rounds) if r.symmetry is not None]
                for i in sorted({*symmetric[:1], *symmetric[-1:]}):
                    for field in fields:
                        for step in steps:
                            def make(s=schedule, i=i, field=field, step=step):
                                rounds = list(s.rounds)
                                symmetry = rounds[i].symmetry
                                rounds[i] = Round(rounds[i].base, replace(
                                    symmetry, **{field: getattr(symmetry, field) + step}))
                                return replace(s, rounds=tuple(rounds))
                            yield f"{schedule.name} n={n} round {i} {field}{step:+d}", make


def test_a_symmetric_round_moved_by_one_is_refused_or_runs_right(request):
    """Every field by -1 and +1 with --deep (432 cases, 126 run); else a stride or modulus by
    +1, where the wrong answers were (108 cases)."""
    deep = request.config.getoption("--deep")
    verified = {}
    for label, make in (symmetry_mutations() if deep else
                        symmetry_mutations(("stride", "modulus"), (1,))):
        outcome, schedule = classify(make)
        if outcome == "verify":
            refused_by_the_collective(schedule)
        elif outcome == "run":
            verified.setdefault(schedule.n_ranks, {})[schedule] = label
    rng = np.random.default_rng(SEED)
    for found in verified.values():
        run_against_lax(list(found), rng)


def test_mutated_and_random_schedules_are_refused_or_run_right(request):
    count = 10_000 if request.config.getoption("--deep") else 300
    outcomes = fuzz(count)
    assert sum(outcomes[k] for k in ("made", "verify", "run")) == count
    assert min(outcomes["made"], outcomes["verify"], outcomes["run"]) > 0, outcomes


if __name__ == "__main__":
    import argparse
    import time

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    start = time.perf_counter()
    print(dict(fuzz(args.cases, args.seed)), f"{time.perf_counter() - start:.0f} s")
