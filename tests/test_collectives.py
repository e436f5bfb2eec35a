"""Every primitive x algorithm x n = 1..8 against the lax built-in, bit for bit.

One compiled program per (primitive, algorithm, n) holds every case, each case a separate
collective: float32 sums at element counts {0, 1, 4, 7, 64, 100, 1000, 10000}, a 0-d and a 2-D
input, ``tiled`` both ways and ``dim`` other than 0; then every dtype x op at odd sizes. Inputs are small integers, so every
sum is exact in any order and results must match with zero tolerance.
"""

from dataclasses import dataclass
from functools import lru_cache

import jax.numpy as jnp
import numpy as np
import pytest

import jaxcoll
from helpers import AXIS, COUNTS, DTYPES, assert_same, exact_inputs, per_rank

ALGORITHMS = ("ring", "naive")
PRIMITIVES = ("allreduce", "reduce_scatter", "allgather")


@dataclass(frozen=True)
class Case:
    dtype: type
    shape: tuple
    op: str = "sum"
    dim: int = 0
    tiled: bool = False

    def __str__(self):
        return (f"{jnp.dtype(self.dtype).name}{list(self.shape)} op={self.op} dim={self.dim} "
                f"tiled={self.tiled}")


def ops_for(dtype) -> tuple[str, ...]:
    return jaxcoll.OPS if jnp.issubdtype(dtype, jnp.floating) else ("sum", "max", "min")


def layout_cases(primitive: str, n: int) -> list[Case]:
    """float32 sums: every element count, 0-d and 2-D inputs, tiled both ways, dim != 0."""
    f32 = jnp.float32
    if primitive == "allreduce":
        return [Case(f32, (count,)) for count in COUNTS] + [Case(f32, ()), Case(f32, (3, 5))]
    if primitive == "reduce_scatter":
        return [Case(f32, (n * count,), tiled=True) for count in COUNTS] + [
            Case(f32, (n,)), Case(f32, (n, 5)), Case(f32, (3, n), dim=1),
            Case(f32, (2, 3 * n), dim=1, tiled=True), Case(f32, (2, 2 * n), dim=-1, tiled=True)]
    return [Case(f32, (count,)) for count in COUNTS] + [
        Case(f32, ()), Case(f32, (3, 5), dim=1), Case(f32, (3, 5), dim=-1),
        Case(f32, (3, 5), dim=1, tiled=True), Case(f32, (7,), tiled=True),
        Case(f32, (0, 2), tiled=True)]


def dtype_cases(primitive: str, n: int, dtype) -> list[Case]:
    """Every op this dtype allows, at odd sizes."""
    if primitive == "allreduce":
        return [Case(dtype, (7,), op) for op in ops_for(dtype)]
    if primitive == "reduce_scatter":
        return [Case(dtype, (3, n), op, dim=1) for op in ops_for(dtype)]
    return [Case(dtype, (7,)), Case(dtype, (2, 3), dim=2)]


def cases(primitive: str, n: int) -> list[Case]:
    return layout_cases(primitive, n) + [
        case for dtype in DTYPES for case in dtype_cases(primitive, n, dtype)]


def call(primitive: str, case: Case, algorithm: str, x):
    if primitive == "allreduce":
        return jaxcoll.allreduce(x, AXIS, op=case.op, algorithm=algorithm)
    if primitive == "reduce_scatter":
        return jaxcoll.reduce_scatter(x, AXIS, op=case.op, dim=case.dim, tiled=case.tiled,
                                      algorithm=algorithm)
    return jaxcoll.allgather(x, AXIS, dim=case.dim, tiled=case.tiled, algorithm=algorithm)


@lru_cache(maxsize=None)
def sweep(primitive: str, algorithm: str, n: int):
    """The cases and one jitted program that returns (ours, reference) for each."""
    the_cases = cases(primitive, n)

    def fn(xs):
        return [(call(primitive, c, algorithm, x), call(primitive, c, "xla", x))
                for c, x in zip(the_cases, xs)]

    return the_cases, per_rank(fn, n)


@pytest.mark.parametrize("n", range(1, 9))
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("primitive", PRIMITIVES)
def test_matches_builtin(primitive, algorithm, n):
    the_cases, program = sweep(primitive, algorithm, n)
    inputs = [exact_inputs(n, c.shape, c.dtype, seed=i) for i, c in enumerate(the_cases)]
    for case, (got, want) in zip(the_cases, program(inputs)):
        assert_same(got, want, f"{primitive} {algorithm} n={n} {case}")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_inexact_floats_close_to_builtin(algorithm):
    """Random floats: the summation order differs from psum's, so results agree to rounding."""
    n = 8
    x = jnp.asarray(np.random.default_rng(1).normal(size=(n, 1000)), jnp.float32)
    program = per_rank(lambda x: (jaxcoll.allreduce(x, AXIS, algorithm=algorithm),
                                  jaxcoll.allreduce(x, AXIS, algorithm="xla")), n)
    got, want = program(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # Every rank holds the same bits: no rank-dependent rounding.
    assert (np.asarray(got) == np.asarray(got)[0]).all()
