"""Reliability of the reducing collectives (allreduce, reduce_scatter, reduce), every algorithm
at n = 8 (hierarchical on a 2 x 4 grid), and every algorithm executed at n = 64.

- Exact inputs the nccl-tests way, at the edges: float32 integers near 2^24 / n (sums up to
  2^24), bfloat16 integers near 2^8 / n, any int32 (sums wrap): bit for bit equal to ``xla``.
- Rounding: on random normal floats the order of summation differs from ``psum``'s; how much
  is the table in docs/sharp_bits.md, which ``python tests/test_reliability.py`` prints and
  ``rounding_is_as_documented`` checks.
- Determinism: the same inputs give the same bits on a second run and after a fresh
  compilation, and (allreduce) the same bits on every rank.
- NaN, +Inf, -Inf, Inf + -Inf propagate as through ``lax.add``/``lax.max``/``lax.min`` (numpy's
  reductions): like ``psum`` for sums; ``lax.pmax``/``pmin`` on CPU ignore NaNs
  (docs/sharp_bits.md).

One compiled program per (primitive, algorithm) holds every case, and one test per
(primitive, algorithm) runs every check on it (about 30 s of compiling in all); the n = 64 run
is a subprocess (about 40 s).
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import lru_cache, partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcoll.tools import check
from jaxcoll.ir.families import SCHEDULES
from test_properties import Case, Layout, assert_bits, program

N = 8
ROOT = 3  # of reduce
REDUCING = ("allreduce", "reduce_scatter", "reduce")
PAIRS = [(p, a) for p in REDUCING for a in sorted(SCHEDULES[p])]
ALLREDUCE = [a for p, a in PAIRS if p == "allreduce"]
WIDTH = 3 * N  # elements per rank of the NaN cases (3 per rank after a reduce_scatter)
LENGTH = 125 * N  # elements per rank of the random and exact cases
SHARP_BITS = Path(__file__).parent.parent / "docs" / "sharp_bits.md"
EPS = {"float32": 2.0**-23, "bfloat16": 2.0**-7}


def layout(algorithm: str) -> Layout:
    return Layout(N, (2, N // 2)) if algorithm == "hierarchical" else Layout(N)


def case(primitive: str, dtypes: tuple[str, ...], op: str, label: str, length: int) -> Case:
    kwargs = {"op": op}
    if primitive == "reduce_scatter":
        kwargs["tiled"] = True
    if primitive == "reduce":
        kwargs["root"] = ROOT
    return Case(primitive, ((length,),) * len(dtypes), dtypes, tuple(sorted(kwargs.items())),
                label)


def cases(primitive: str) -> tuple[Case, ...]:
    """random normal floats; exact extremes; NaN/Inf patterns for sum, max, min."""
    return (case(primitive, ("float32", "bfloat16"), "sum", "normal", LENGTH),
            case(primitive, ("float32", "bfloat16", "int32"), "sum", "extremes", LENGTH),
            *(case(primitive, ("float32",), op, "nan", WIDTH) for op in ("sum", "max", "min")))


# ----------------------------------------------------------------------------- data

def extremes(rng, dtype: str) -> np.ndarray:
    """(N, LENGTH): float32 integers of magnitude 2^24/N - (0..2), bfloat16 2^8/N - (0..2),
    one sign per element, so the sums reach 2^24 (2^8) and every partial sum is exact; any int32
    (the sums wrap around, the same in any order)."""
    if dtype == "int32":
        return rng.integers(-2**31, 2**31, size=(N, LENGTH)).astype(np.int32)
    bound = 2 ** {"float32": 24, "bfloat16": 8}[dtype] // N
    sign = rng.choice([-1, 1], size=LENGTH)
    return (sign * (bound - rng.integers(0, 3, size=(N, LENGTH)))).astype(jnp.dtype(dtype))


NAN_PATTERNS = [  # values put at distinct random ranks of a column of small integers
    [np.nan], [np.inf], [-np.inf], [np.inf, -np.inf], [np.nan, np.inf], [np.nan, -np.nan],
    [-np.inf, -np.inf], [np.nan] * N, [np.inf] * N, [-0.0] * N, [-0.0, 0.0] * (N // 2), []]


def nan_inf(rng) -> np.ndarray:
    """(N, WIDTH) small integers, each column with a NAN_PATTERNS entry at random ranks."""
    x = rng.integers(-8, 9, size=(N, WIDTH)).astype(np.float32)
    for column in range(WIDTH):
        pattern = NAN_PATTERNS[column % len(NAN_PATTERNS)]
        x[rng.permutation(N)[:len(pattern)], column] = pattern
    return x


def inputs() -> list[tuple[jnp.ndarray, ...]]:
    """The inputs of cases(): (N, elements) per leaf."""
    rng = np.random.default_rng(2024)
    normal = tuple(jnp.asarray(rng.standard_normal((N, LENGTH)), dtype)
                   for dtype in ("float32", "bfloat16"))
    exact = tuple(jnp.asarray(extremes(rng, d)) for d in ("float32", "bfloat16", "int32"))
    x = jnp.asarray(nan_inf(rng))
    return [normal, exact, (x,), (x,), (x,)]


@lru_cache(maxsize=None)
def measured(primitive: str, algorithm: str):
    """(cases, inputs, [(ours, reference)] per case) from one compiled program."""
    the_cases = cases(primitive)
    xs = inputs()
    results = program(algorithm, layout(algorithm), the_cases)(xs)
    return the_cases, xs, jax.device_get(results)


def oracle(primitive: str, op: str, x: np.ndarray, reduce=None) -> np.ndarray:
    """What each rank must get: numpy's reduction over the ranks (NaN-propagating, exact here),
    laid out as the primitive lays it out; ``reduce`` replaces numpy's."""
    with np.errstate(invalid="ignore"):  # inf - inf
        total = (reduce or {"sum": np.sum, "max": np.max, "min": np.min}[op])(x, axis=0)
    if primitive == "allreduce":
        return np.broadcast_to(total, x.shape)
    if primitive == "reduce_scatter":
        return total.reshape(N, -1)  # rank i: block i
    out = np.zeros_like(x)
    out[ROOT] = total
    return out


# ----------------------------------------------------------------------------- checks
# Each takes (primitive, algorithm) and reads measured(); test_reducing_algorithm runs them all
# on one compiled program (under pytest-xdist, separate tests could compile it on each worker).

def exact_extremes_bit_for_bit(primitive, algorithm):
    the_cases, xs, results = measured(primitive, algorithm)
    got, want = results[1]
    for dtype, g, w in zip(the_cases[1].dtypes, got, want):
        assert_bits(g, w, f"{primitive} {algorithm} {dtype}")
        if dtype == "float32":  # the sums do reach 2^24 = 16777216 in magnitude
            assert np.abs(np.asarray(w)).max() >= 2**24 - 3 * N


def nan_and_inf_propagate(primitive, algorithm):
    """NaN positions and every other value as numpy's reduction over the ranks gives them
    (lax.add/max/min semantics); sums equal psum's too."""
    the_cases, xs, results = measured(primitive, algorithm)
    x = np.asarray(xs[2][0])
    for case_, (got, want) in zip(the_cases[2:], results[2:]):
        what = f"{primitive} {algorithm} op={case_.op}"
        np.testing.assert_array_equal(got[0], oracle(primitive, case_.op, x), err_msg=what)
        if case_.op == "sum":
            np.testing.assert_array_equal(got[0], want[0], err_msg=what)


def deterministic_across_runs_and_recompiles(primitive, algorithm):
    """A second run of the program, and a fresh compilation of a program holding only the
    random-normal case, give the first run's bits."""
    the_cases, xs, results = measured(primitive, algorithm)
    again = program(algorithm, layout(algorithm), the_cases)(xs)
    for (got, _), (first, _) in zip(again, results):
        for g, f in zip(got, first):
            assert_bits(g, f, f"{primitive} {algorithm}, second run")
    fresh = program.__wrapped__(algorithm, layout(algorithm), the_cases[:1])
    [(got, _)] = fresh.lower(xs[:1]).compile()(xs[:1])
    for g, f in zip(got, results[0][0]):
        assert_bits(g, f, f"{primitive} {algorithm}, fresh compilation")


def rank_identical(algorithm: str, indices=(0, 2, 3, 4)) -> None:
    """allreduce: every rank holds the same bits (random normal float32 and bfloat16; NaN
    cases of sum, max, min)."""
    _, _, results = measured("allreduce", algorithm)
    for index in indices:
        for got in results[index][0]:
            bits = np.asarray(got).view(f"u{np.asarray(got).dtype.itemsize}")
            different = np.nonzero((bits != bits[0]).any(axis=0))[0]
            assert different.size == 0, (
                f"{algorithm} case {index}: ranks hold different bits at elements "
                f"{different[:8]}: {[[hex(b) for b in bits[:, e]] for e in different[:2]]}")


def rounding_is_as_documented(primitive, algorithm):
    """No worse than the table of docs/sharp_bits.md: the same % of elements at most (+5
    points: psum's own order may change with the jax version), ulps and errors at most the
    documented ones (or 1 eps·Σ|x| where the table says 0, a changed psum order again); every
    error within the first-order bound of two summation orders, (n-1) eps·Σ|x|."""
    documented = documented_rounding()[primitive, algorithm]
    got = [v for triple in rounding(primitive, algorithm).values() for v in triple]
    for what, value, doc in zip(["f32 %", "f32 ulps", "f32 err", "bf16 %", "bf16 ulps",
                                 "bf16 err"], got, documented):
        slack = {"%": 5.0, "ulps": 0, "err": 0}[what.split()[1]]
        assert value <= max(doc + slack, 1.0 if what.endswith("err") else 0), (
            f"{primitive} {algorithm} {what}: measured {value}, documented {doc}")
        assert not what.endswith("err") or value <= N - 1


@pytest.mark.parametrize("primitive, algorithm", PAIRS)
def test_reducing_algorithm(primitive, algorithm):
    """Exact extremes bit for bit; NaN and Inf; determinism; rounding as documented; and for
    allreduce the same bits on every rank (recursive_doubling's NaNs: the test below)."""
    checks = {check.__name__: partial(check, primitive, algorithm) for check in (
        exact_extremes_bit_for_bit, nan_and_inf_propagate,
        deterministic_across_runs_and_recompiles, rounding_is_as_documented)}
    if primitive == "allreduce":
        indices = (0,) if algorithm == "recursive_doubling" else (0, 2, 3, 4)
        checks["rank_identical"] = partial(rank_identical, algorithm, indices)
    failures = []
    for name, check in checks.items():
        try:
            check()
        except AssertionError as error:
            failures.append(f"{name}: {error}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("index", [2, 3, 4], ids=["sum", "max", "min"])
def test_recursive_doubling_nans_are_the_same_bits_on_every_rank(index):
    rank_identical("recursive_doubling", (index,))


@pytest.mark.parametrize("primitive", REDUCING)
def test_xla_pmax_pmin_ignore_nan_on_cpu(primitive):
    """What docs/sharp_bits.md says of the reference: on CPU, lax.pmax/pmin skip NaNs (an
    all-NaN max is -inf, min +inf) where jaxcoll (like lax.max, jnp.max) returns NaN; psum
    propagates them. If this fails, XLA changed: update the doc."""
    the_cases, xs, results = measured(primitive, "ring" if primitive != "reduce" else "tree")
    x = np.asarray(xs[2][0])
    skip_nan = {"max": lambda v, axis: np.max(np.where(np.isnan(v), -np.inf, v), axis=axis),
                "min": lambda v, axis: np.min(np.where(np.isnan(v), np.inf, v), axis=axis)}
    for case_, (_, want) in zip(the_cases[3:], results[3:]):
        np.testing.assert_array_equal(want[0], oracle(primitive, case_.op, x,
                                                      skip_nan[case_.op]))


def test_signed_zeros_follow_ieee():
    """A sum of -0.0s is -0.0, max(-0.0, 0.0) = 0.0 and min = -0.0 on every rank; psum returns
    +0.0 for a sum of -0.0s (its accumulator starts at +0.0)."""
    _, xs, results = measured("allreduce", "ring")
    x = np.asarray(xs[2][0])
    zero, negative = x == 0, np.signbit(x)
    all_negative = np.all(zero & negative, axis=0)
    mixed = np.all(zero, axis=0) & np.any(negative, axis=0) & ~all_negative
    (ours_sum, psum), (ours_max, _), (ours_min, _) = results[2:]
    assert all_negative.any() and mixed.any()
    assert np.signbit(ours_sum[0][:, all_negative]).all()
    assert not np.signbit(psum[0][:, all_negative]).any()
    assert not np.signbit(ours_max[0][:, mixed]).any()
    assert np.signbit(ours_min[0][:, mixed]).all()


# ----------------------------------------------------------------------------- rounding

def ordinal(values: np.ndarray) -> np.ndarray:
    """Floats as integers in the order of the floats (adjacent floats differ by 1)."""
    bits = values.view(f"i{values.dtype.itemsize}").astype(np.int64)
    return np.where(bits < 0, np.iinfo(np.dtype(f"i{values.dtype.itemsize}")).min - bits, bits)


def rounding(primitive: str, algorithm: str) -> dict[str, tuple[float, int, float]]:
    """Per dtype, ours against the reference on random normal inputs: (% of elements that
    differ, most units in the last place apart, most |ours - ref| / (eps · sum_r |x_r|))."""
    the_cases, xs, results = measured(primitive, algorithm)
    got, want = results[0]
    out = {}
    for dtype, g, w, x in zip(the_cases[0].dtypes, got, want, xs[0]):
        g, w = np.asarray(g), np.asarray(w)
        scale = oracle(primitive, "sum", np.abs(np.asarray(x, np.float64)))
        if primitive == "reduce":
            g, w, scale = g[ROOT], w[ROOT], scale[ROOT]
        error = np.abs(g.astype(np.float64) - w.astype(np.float64)) / (EPS[dtype] * scale)
        out[dtype] = (100 * float(np.mean(g != w)),
                      int(np.abs(ordinal(g) - ordinal(w)).max()), float(error.max()))
    return out


def rounding_table() -> str:
    lines = ["| primitive | algorithm | float32: % differ | max ulps | max err / (eps Σ|x|) "
             "| bfloat16: % differ | max ulps | max err / (eps Σ|x|) |", "|" + "---|" * 8]
    for primitive, algorithm in PAIRS:
        cells = [f"{p:.1f} | {u} | {e:.2f}" for p, u, e in rounding(primitive, algorithm).values()]
        lines.append(f"| {primitive} | {algorithm} | " + " | ".join(cells) + " |")
    return "\n".join(lines).replace("|x|", "\\|x\\|")


def documented_rounding() -> dict[tuple[str, str], list[float]]:
    """The numbers of the rounding table in docs/sharp_bits.md, by (primitive, algorithm)."""
    rows = {}
    for line in SHARP_BITS.read_text().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 8 and (cells[0], cells[1]) in PAIRS:
            rows[cells[0], cells[1]] = [float(c) for c in cells[2:]]
    return rows


def test_rounding_table_lists_every_algorithm():
    assert set(documented_rounding()) == set(PAIRS)


# ----------------------------------------------------------------------------- n = 64

@pytest.mark.subprocess_jax
@pytest.mark.skipif("not config.getoption('--deep')")
def test_every_algorithm_executed_at_n64():
    """Every primitive x algorithm at n = 64 (hierarchical on 2 x 32), 7 elements per rank
    (64 for the scattering ones): the main job in a subprocess (--deep: about a minute of
    compiling; n = 12 runs by default, tests/test_rooted.py)."""
    result = subprocess.run([sys.executable, "-m", "jaxcoll", "--devices", "64", "--ranks",
                             "64", "--counts", "7"], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    checks = len(check.cases(64))  # hierarchical on 2 x 32, its allreduce on 2 x 2 x 16 too
    assert f"{checks} of {checks} checks match the xla reference exactly" in result.stdout


if __name__ == "__main__":  # the rounding table of docs/sharp_bits.md
    jax.config.update("jax_num_cpu_devices", N)
    print(f"jax {jax.__version__}, {jax.default_backend()}, n = {N}, {LENGTH} random normal "
          "elements per rank")
    print(rounding_table())
