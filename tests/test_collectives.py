"""Every unrooted primitive x algorithm x n = 1..8 against the lax built-in, bit for bit.

One compiled program per (primitive, algorithm, n) holds every case, each case a separate
collective: float32 sums at element counts {0, 1, 4, 7, 64, 100, 1000, 10000}; a 0-d and a 2-D
input, ``tiled`` both ways and ``dim`` other than 0; every dtype x op at odd sizes (the last
two for ring at every n, for the other algorithms at n in FULL_NS, or everywhere with --deep). Inputs are small integers, so every
sum is exact in any order and results must match with zero tolerance.
"""

from dataclasses import dataclass
from functools import lru_cache, partial

import jax.numpy as jnp
import numpy as np
import pytest

import jaxcoll
from helpers import (AXIS, COUNTS, DTYPES, assert_same, exact_inputs, ours_and_reference,
                     ours_vs_xla, per_rank)
from jaxcoll.ir.families import SCHEDULES

PRIMITIVES = ("allreduce", "reduce_scatter", "allgather", "alltoall")


def distinct_algorithms(primitive: str) -> list[str]:
    """The single-axis algorithms of ``primitive``, one name per schedule builder (allgather's
    halving_doubling is its recursive_doubling); two-level ones are in test_levels.py."""
    builders = {}
    for name, entry in sorted(SCHEDULES[primitive].items()):
        if not entry.two_level:
            builders.setdefault(entry.build, name)
    return sorted(builders.values())


PAIRS = [(p, a) for p in PRIMITIVES for a in distinct_algorithms(p)]


@dataclass(frozen=True)
class Case:
    dtype: type
    shape: tuple
    op: str = "sum"
    dim: int = 0  # alltoall: split_dim
    tiled: bool = False
    concat: int = 0  # alltoall: concat_dim

    def __str__(self):
        return (f"{jnp.dtype(self.dtype).name}{list(self.shape)} op={self.op} dim={self.dim} "
                f"tiled={self.tiled} concat={self.concat}")


def ops_for(dtype) -> tuple[str, ...]:
    return jaxcoll.OPS if jnp.issubdtype(dtype, jnp.floating) else ("sum", "max", "min")


def count_cases(primitive: str, n: int) -> list[Case]:
    """float32 sums at every element count (rounded up to a multiple of n to scatter)."""
    if primitive in ("reduce_scatter", "alltoall"):
        return [Case(jnp.float32, (n * count,), tiled=True) for count in COUNTS]
    return [Case(jnp.float32, (count,)) for count in COUNTS]


def layout_cases(primitive: str, n: int) -> list[Case]:
    """0-d and 2-D inputs, tiled both ways, dim != 0 (float32 sums)."""
    f32 = jnp.float32
    if primitive == "allreduce":
        return [Case(f32, ()), Case(f32, (3, 5))]
    if primitive == "reduce_scatter":
        return [Case(f32, (n,)), Case(f32, (n, 5)), Case(f32, (3, n), dim=1),
                Case(f32, (2, 3 * n), dim=1, tiled=True), Case(f32, (2, 2 * n), dim=-1, tiled=True)]
    if primitive == "alltoall":
        return [Case(f32, (n,)), Case(f32, (n, 5), concat=1), Case(f32, (3, n), dim=1),
                Case(f32, (2, 3 * n), dim=1, tiled=True), Case(f32, (2 * n, 3), tiled=True,
                                                               concat=-1),
                Case(f32, (0, n), dim=-1, tiled=True, concat=0)]
    return [Case(f32, ()), Case(f32, (3, 5), dim=1), Case(f32, (3, 5), dim=-1),
            Case(f32, (3, 5), dim=1, tiled=True), Case(f32, (7,), tiled=True),
            Case(f32, (0, 2), tiled=True)]


def dtype_cases(primitive: str, n: int, dtype) -> list[Case]:
    """Every op this dtype allows, at odd sizes."""
    if primitive == "allreduce":
        return [Case(dtype, (7,), op) for op in ops_for(dtype)]
    if primitive == "reduce_scatter":
        return [Case(dtype, (3, n), op, dim=1) for op in ops_for(dtype)]
    if primitive == "alltoall":
        return [Case(dtype, (3, n), dim=1, concat=1)]
    return [Case(dtype, (7,)), Case(dtype, (2, 3), dim=2)]


FULL_NS = (2, 3, 8)  # besides ring, other algorithms run layouts, dtypes and ops at these n


def cases(primitive: str, algorithm: str, n: int, deep: bool) -> list[Case]:
    """Every count always. Layouts, dtypes and ops (which the packing code shared by all
    algorithms handles) for ring at every n, for the others at FULL_NS (``--deep``: all n)."""
    out = count_cases(primitive, n)
    if deep or algorithm == "ring" or n in FULL_NS:
        out += layout_cases(primitive, n)
        out += [case for dtype in DTYPES for case in dtype_cases(primitive, n, dtype)]
    return out


def call(primitive: str, case: Case, algorithm: str, x):
    if primitive == "allreduce":
        return jaxcoll.allreduce(x, AXIS, op=case.op, algorithm=algorithm)
    if primitive == "reduce_scatter":
        return jaxcoll.reduce_scatter(x, AXIS, op=case.op, dim=case.dim, tiled=case.tiled,
                                      algorithm=algorithm)
    if primitive == "alltoall":
        return jaxcoll.alltoall(x, AXIS, split_dim=case.dim, concat_dim=case.concat,
                                tiled=case.tiled, algorithm=algorithm)
    return jaxcoll.allgather(x, AXIS, dim=case.dim, tiled=case.tiled, algorithm=algorithm)


@lru_cache(maxsize=None)
def sweep(primitive: str, algorithm: str, n: int, deep: bool):
    """The cases and one jitted program that returns (ours, reference) for each."""
    the_cases = cases(primitive, algorithm, n, deep)
    return the_cases, ours_vs_xla(the_cases, partial(call, primitive), algorithm, n)


@pytest.mark.sweep
@pytest.mark.parametrize("n", range(1, 9))
@pytest.mark.parametrize("primitive, algorithm", PAIRS)
def test_matches_builtin(primitive, algorithm, n, request):
    the_cases, program = sweep(primitive, algorithm, n, request.config.getoption("--deep"))
    inputs = [exact_inputs(n, c.shape, c.dtype, seed=i) for i, c in enumerate(the_cases)]
    for case, (got, want) in zip(the_cases, program(inputs)):
        assert_same(got, want, f"{primitive} {algorithm} n={n} {case}")


@pytest.mark.parametrize("algorithm", distinct_algorithms("allreduce"))
def test_inexact_floats_close_to_builtin(algorithm):
    """Random floats: the summation order differs from psum's, so results agree to rounding."""
    n = 8
    x = jnp.asarray(np.random.default_rng(1).normal(size=(n, 1000)), jnp.float32)
    program = per_rank(lambda x: ours_and_reference(
        [None], [x], lambda _, v: jaxcoll.allreduce(v, AXIS, algorithm=algorithm),
        lambda _, v: jaxcoll.allreduce(v, AXIS, algorithm="xla")), n)
    [(got, want)] = program(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # Every rank holds the same bits: no rank-dependent rounding.
    assert (np.asarray(got) == np.asarray(got)[0]).all()
