"""A seeded differential fuzzer of MSCCL XML (issue 51): random allreduce programs
(tests/msccl_fuzz.py) read two independent ways must agree.

- jaxcoll: ``jaxcoll.ir.msccl.load`` (MscclError: a race, a read of garbage, a cycle, ...), then
  the schedule run by the XLA executor (``jaxcoll.lowering.execute.execute``, the sum's combine)
  on random integers;
- the checker (tests/msccl_checker.py): one run under a seeded random interleaving, every gpu's
  output as multisets of (gpu, input chunk) contributions (None: garbage), or Wrong.

They agree when both refuse, or both accept and every output chunk agrees: the executor's value
equals the sum of the inputs the checker's multiset names (chunks the checker calls garbage are
skipped), and jaxcoll's schedule, run symbolically with multisets (``multisets`` below, the
executor's rules: every transfer of a round reads the state before it), holds exactly the
checker's multisets, garbage included. Any other outcome fails with the seed, the file and both
readings.

Compiling is the cost (each distinct schedule is a new XLA program, about 0.3-0.6 s each on
two cores, hardly less when several share one jit): the symbolic comparison runs every accepted
program (reading both ways takes about 4 ms a program), the executor one accepted program in
``XLA_EVERY`` (batched, ``BATCH`` programs of one gpu count per jit, each on its own input).
300 programs by default (the executor runs about 30), 2,000 with ``--deep`` (about 390);
``python tests/test_msccl_fuzz.py [--count N] [--first S] [--xla-every E]`` prints the
outcomes, the timings and one disagreement of each kind.
"""

from __future__ import annotations

import os
import re
import sys
import time
import warnings
from collections import Counter

if __name__ == "__main__":  # as a script: the tests' devices, before JAX starts
    sys.path.insert(0, os.path.dirname(__file__))
    import conftest  # noqa: F401

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import msccl_checker
import msccl_fuzz
from helpers import AXIS, mesh
from jaxcoll.ir import msccl
from jaxcoll.lowering.execute import execute

COUNT, DEEP_COUNT = 300, 2000
XLA_EVERY, DEEP_XLA_EVERY = 6, 3  # the executor runs one accepted program in this many
BATCH = 24  # programs of one gpu count per jitted program
WIDTH = 3  # elements per chunk: three independent random draws of every input chunk
COMBINE = lax.add  # what jaxcoll passes the executor for op="sum" (primitives._COMBINE)


# ----------------------------------------------------------------------------- the readings

def checker_run(text: str, inplace: bool, seed: int) -> dict:
    """The checker's reading: {gpu: {o chunk: sorted tuple of (gpu, chunk) | None}}; raises
    msccl_checker.Wrong. (Until the checker's ``run`` exists: its Machine.)"""
    if hasattr(msccl_checker, "run"):
        return msccl_checker.run(text, inplace=inplace, seed=seed)
    machine = msccl_checker.Machine(text, inplace, seed)
    machine.run()
    return {g: machine.output(g) for g in range(machine.n)}


def jaxcoll_load(text: str, inplace: bool):
    with warnings.catch_warnings():  # a chain of differing counts warns: expected here
        warnings.simplefilter("ignore")
        return msccl.load(text, inplace=inplace)


def multisets(schedule, k: int) -> dict:
    """jaxcoll's schedule run symbolically as the executor runs it, each chunk a Counter of
    (gpu, input chunk) contributions (None: nothing written, the executor's zeros): every
    gpu's output chunks as sorted tuples, like the checker's."""
    n, width = schedule.n_ranks, schedule.buffer_chunks
    state = [[None] * width for _ in range(n)]
    for g in range(n):
        for c in range(schedule.n_chunks):
            state[g][schedule.input_at + c] = Counter({(g, c): 1})
    for round_ in schedule.rounds:
        before = [row[:] for row in state]
        for t in round_.transfers:
            for c, d in zip(t.chunks, t.into):
                sent = before[t.src][c]
                if t.reduce:
                    held = state[t.dst][d]
                    state[t.dst][d] = None if sent is None or held is None else held + sent
                else:
                    state[t.dst][d] = None if sent is None else Counter(sent)
    return {g: {c: None if state[g][schedule.output_at + c] is None
                else tuple(sorted(state[g][schedule.output_at + c].elements()))
                for c in range(k)} for g in range(n)}


def reading(seed: int) -> dict:
    """One program read both ways (the executor's part comes later, batched)."""
    text = msccl_fuzz.program(seed)
    inplace = msccl_fuzz.inplace(text)
    case = {"seed": seed, "text": text, "inplace": inplace, "intent": msccl_fuzz.intent(text),
            "differing chain": msccl_fuzz.differing_chain(text)}
    try:
        case["checker"] = checker_run(text, inplace, seed)
    except msccl_checker.Wrong as error:
        case["checker"], case["wrong"] = None, str(error)
    except Exception as error:  # noqa: BLE001 (a crash of the checker is an outcome)
        case["checker"], case["crash"] = None, f"checker: {type(error).__name__}: {error}"
    try:
        case["schedule"] = jaxcoll_load(text, inplace)
    except msccl.MscclError as error:
        case["schedule"], case["refused"] = None, str(error)
    except Exception as error:  # noqa: BLE001
        case["schedule"], case["crash"] = None, f"jaxcoll: {type(error).__name__}: {error}"
    return case


def classify(case: dict) -> str:
    """What the two readings came to (a category, or 'disagree: ...')."""
    if "crash" in case:
        return "disagree: crash"
    if case["schedule"] is None and case["checker"] is None:
        words = case["refused"] + " | " + case["wrong"]
        if "race" in words:
            return "refused: race"
        if "garbage" in words or "nothing wrote" in words:
            return "refused: garbage"
        if "deadlock" in words or "cannot finish" in words or "for ever" in words:
            return "refused: deadlock"
        if "nops before it" in words:
            return "refused: nops a step does not carry"
        return "refused: other"
    if case["schedule"] is None:
        return "disagree: jaxcoll refuses, the checker runs it"
    if case["checker"] is None:
        return "disagree: the checker refuses, jaxcoll runs it"
    k = case["schedule"].n_chunks
    mine = multisets(case["schedule"], k)
    if mine != case["checker"]:
        case["symbolic"] = mine
        kind = "differing chain" if case["differing chain"] else "other"
        return f"disagree: outputs ({kind})"
    return "runs: differing chain" if case["differing chain"] else "runs"


# ----------------------------------------------------------------------------- the executor

def inputs(n: int, k: int, rng) -> np.ndarray:
    """(n, K, WIDTH) random integers: every sum is exact, and values that agree on all three
    columns agree on the multisets (in practice: the range is wide)."""
    return rng.integers(-1000, 1001, size=(n, k, WIDTH)).astype(np.int32)


def expected_values(outputs: dict, x: np.ndarray) -> dict:
    """The checker's multisets as sums of x: {(gpu, chunk): row} (garbage left out)."""
    return {(g, c): sum((x[a, b] for a, b in held), np.zeros(WIDTH, np.int32))
            for g, chunks in outputs.items() for c, held in chunks.items() if held is not None}


def run_executor(cases: list[dict], rng) -> None:
    """Every case (all on n gpus, accepted both ways) run by the XLA executor in one jitted
    program, each on its own input; ``case['executor']`` its (n, K, WIDTH) output."""
    n = cases[0]["schedule"].n_ranks
    schedules = [case["schedule"] for case in cases]

    def body(*xs):
        return [execute(s, x[0], AXIS, COMBINE)[None] for s, x in zip(schedules, xs)]

    program = jax.jit(jax.shard_map(body, mesh=mesh(n), in_specs=P(AXIS), out_specs=P(AXIS)))
    xs = [inputs(n, s.n_chunks, rng) for s in schedules]
    for case, x, out in zip(cases, xs, program(*[jnp.asarray(x) for x in xs])):
        case["x"], case["executor"] = x, np.asarray(out)


def executor_agrees(case: dict) -> bool:
    want = expected_values(case["checker"], case["x"])
    return all(np.array_equal(case["executor"][g, c], row) for (g, c), row in want.items())


# ----------------------------------------------------------------------------- the fuzzer

def fuzz(count: int, first: int = 0, xla_every: int = XLA_EVERY
         ) -> tuple[Counter, list[dict], dict]:
    """Read ``count`` programs (seeds first..first+count-1) both ways; the executor runs one
    in ``xla_every`` of those both accept (0: none). Returns (outcomes, the disagreeing cases,
    timings)."""
    timings, start = {}, time.perf_counter()
    cases = [reading(seed) for seed in range(first, first + count)]
    for case in cases:
        case["outcome"] = classify(case)
    timings["read both ways"] = time.perf_counter() - start
    start = time.perf_counter()
    accepted = [c for c in cases if c["outcome"].startswith("runs")]
    if xla_every:
        rng = np.random.default_rng(first)
        by_n = {}
        for case in accepted[::xla_every]:
            by_n.setdefault(case["schedule"].n_ranks, []).append(case)
        for group in by_n.values():
            for at in range(0, len(group), BATCH):
                run_executor(group[at:at + BATCH], rng)
        for case in accepted[::xla_every]:
            if not executor_agrees(case):
                kind = "differing chain" if case["differing chain"] else "other"
                case["outcome"] = f"disagree: executor values ({kind})"
    timings["executor"] = time.perf_counter() - start
    timings["executed"] = len(accepted[::xla_every]) if xla_every else 0
    outcomes = Counter(c["outcome"] for c in cases)
    outcomes["intent " + "/".join(msccl_fuzz.INTENTS)] = 0
    for c in cases:
        outcomes[f"intent {c['intent']}"] += 1
    return outcomes, [c for c in cases if c["outcome"].startswith("disagree")], timings


def report(case: dict) -> str:
    """A disagreement, for a failure message: the seed, both readings and the file."""
    lines = [f"seed {case['seed']} ({case['intent']}, {'in' if case['inplace'] else 'out of'} "
             f"place): {case['outcome']}"]
    for key in ("crash", "refused", "wrong"):
        if key in case:
            lines.append(f"  {key}: {case[key]}")
    if case.get("checker") is not None and case.get("schedule") is not None:
        mine = case.get("symbolic") or multisets(case["schedule"], case["schedule"].n_chunks)
        for g in sorted(mine):
            for c in sorted(mine[g]):
                if mine[g][c] != case["checker"][g][c]:
                    lines.append(f"  gpu {g} o[{c}]: jaxcoll {mine[g][c]}, checker "
                                 f"{case['checker'][g][c]}")
        if "executor" in case:
            want = expected_values(case["checker"], case["x"])
            for (g, c), row in sorted(want.items()):
                if not np.array_equal(case["executor"][g, c], row):
                    lines.append(f"  gpu {g} o[{c}]: executor {case['executor'][g, c]}, "
                                 f"checker's sum {row}")
    return "\n".join(lines + [case["text"]])


def test_random_programs_are_read_alike_by_jaxcoll_and_the_checker(request):
    deep = request.config.getoption("--deep")
    count = DEEP_COUNT if deep else COUNT
    outcomes, disagreements, _ = fuzz(count, xla_every=DEEP_XLA_EVERY if deep else XLA_EVERY)
    assert not disagreements, (f"{len(disagreements)} of {count} programs read differently "
                               f"({dict(outcomes)}); the first:\n" + report(disagreements[0]))


def test_the_generator_makes_every_kind_of_program():
    """Valid programs that run, chains of differing counts, and files refused for a race, a
    read of garbage and a deadlock, all among the first 200 seeds (the generator cannot quietly
    degenerate); every intent reached; both modes; every step type."""
    outcomes, _, _ = fuzz(200, xla_every=0)
    for outcome in ("runs", "refused: race", "refused: garbage", "refused: deadlock"):
        assert outcomes[outcome] >= 5, (outcome, dict(outcomes))
    chains = [msccl_fuzz.program(seed) for seed in range(200)]
    assert sum(msccl_fuzz.differing_chain(text) for text in chains) >= 20
    assert sum(bool(msccl_fuzz.chains(text)) for text in chains) >= 60
    assert {msccl_fuzz.inplace(text) for text in chains} == {True, False}
    types = Counter(t for text in chains for t in
                    re.findall(r'type="(\w+)"', text))
    assert set(types) == {"s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop"}, types
    assert all(outcomes[f"intent {i}"] >= 10 for i in msccl_fuzz.INTENTS), dict(outcomes)


def test_the_generator_is_seeded():
    assert [msccl_fuzz.program(s) for s in range(20)] == [msccl_fuzz.program(s)
                                                           for s in range(20)]


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=COUNT)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--xla-every", type=int, default=XLA_EVERY, help="0: no executor")
    parser.add_argument("--show", type=int, default=1, help="disagreements to print per kind")
    args = parser.parse_args()
    started = time.perf_counter()
    outcomes, disagreements, timings = fuzz(args.count, args.first, args.xla_every)
    total = time.perf_counter() - started
    for outcome, many in sorted(outcomes.items()):
        print(f"{many:6d}  {outcome}")
    print({k: round(v, 2) for k, v in timings.items()}, f"total {total:.1f} s,",
          f"{args.count / total:.1f} programs/s")
    shown = Counter()
    for case in sorted(disagreements, key=lambda c: len(c["text"])):
        if shown[case["outcome"]] < args.show:
            shown[case["outcome"]] += 1
            print("-" * 80)
            print(report(case))
