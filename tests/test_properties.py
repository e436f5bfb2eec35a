"""Property-based tests: random structures against the ``xla`` reference, bit for bit.

For every registered (primitive, algorithm) of ``jaxcoll.ir.families.SCHEDULES``, Hypothesis draws
the rank count n (1..8: a sub-mesh of the 8 fake CPU devices), the axis (one name, or a tuple
(outer, inner) over a 2-D mesh: always for ``hierarchical``), and one to three cases, each a
pytree of one to three leaves with random shapes (0-d, empty, primes, long vectors; tiled or
not), dtypes (float32, bfloat16, int32), op, root, dim and data. One jitted program runs every
case through the algorithm and through ``xla``; the two must agree bit for bit.

The data are exact in any order of reduction:

- ``small``: integers in -8..8;
- ``wide`` (sum, mean): integers up to 2^p / n in magnitude (p = 24 for float32, 8 for
  bfloat16) times a power of two, so every partial sum is exact; for int32 any int32 (sums
  wrap around, the same in any order);
- ``any`` (max, min): any nonzero finite value (a max is a max in any order; signed zeros and
  NaNs are left to test_reliability.py, where ``lax.pmax`` on CPU differs: docs/sharp_bits.md);
- ``bits`` (collectives that only move data): random bit patterns, float32 NaN payloads and
  subnormals included; bfloat16 NaNs canonical (XLA's CPU collectives canonicalize them:
  docs/sharp_bits.md); bfloat16 subnormals have their own test below.

Cost: every structure is a new JAX compilation (about 0.3 s a case on CPU); programs are cached
per structure. Hypothesis settings profiles:

- ``jaxcoll-ci`` (default): 2 examples per (primitive, algorithm), i.e. 68 programs of 1 to 3
  cases, a fixed seed per pair (CRC32 of its name), no example database: the same cases on
  every run.
- ``jaxcoll-deep``: 25 examples per pair (850 programs, about 15 minutes on 2 cores), and 40
  instead of 10 in the 32-device subprocess, selected by ``pytest --deep`` or the environment
  variable ``JAXCOLL_HYPOTHESIS=deep``. ``JAXCOLL_HYPOTHESIS_SEED=<int>`` changes the seeds
  (both profiles), to look at cases CI never sees.

``python tests/test_properties.py --devices 32 --max-n 32 --examples 10`` runs the same
property on 32 fake devices (n in 1..32) for random (primitive, algorithm) pairs;
``test_32_devices_in_a_subprocess`` runs it that way.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import zlib
from dataclasses import dataclass
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings, strategies as st
from jax.sharding import PartitionSpec as P

import jaxcoll
from helpers import AXIS, mesh, ours_and_reference
from jaxcoll.tools.check import LEVELS  # the tuple axis (outer, inner) of two-level meshes
from jaxcoll.ir.families import SCHEDULES, two_level

PAIRS = [(p, a) for p, algorithms in SCHEDULES.items() for a in sorted(algorithms)]
# sampled_from tries (and shrinks towards) the first value; each pair's examples rotate these
# tuples by a number of its own (``turn``), so that the first example differs between pairs
NS = (6, 8, 5, 3, 7, 1, 2, 4)
SIZES = (7, 1, 0, 2, 3, 5, 13, 4)  # the sizes of each dimension of a leaf
LONG = (7, 100, 1009, 0, 1)  # a 1-D leaf's size
DTYPES = ("float32", "bfloat16", "int32")
MANTISSA_BITS = {"float32": 24, "bfloat16": 8}
REDUCING = ("allreduce", "reduce_scatter", "reduce")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
SPLITTING = ("reduce_scatter", "scatter", "alltoall")  # x cut into n blocks along a dim
STACKING = ("allgather", "gather")  # n blocks stacked (or concatenated) along a dim
DATA = {"sum": ("small", "wide"), "mean": ("small", "wide"), "max": ("small", "any"),
        "min": ("small", "any"), None: ("small", "bits")}

settings.register_profile(
    "jaxcoll-ci", max_examples=2, deadline=None, database=None, print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("jaxcoll-deep", settings.get_profile("jaxcoll-ci"), max_examples=25)


def is_deep(option: bool = False) -> bool:
    """True with ``--deep`` (``option``) or JAXCOLL_HYPOTHESIS=deep."""
    return option or os.environ.get("JAXCOLL_HYPOTHESIS") == "deep"


def profile(deep: bool = False) -> settings:
    """``jaxcoll-deep`` if ``is_deep(deep)``, else ``jaxcoll-ci``."""
    return settings.get_profile("jaxcoll-deep" if is_deep(deep) else "jaxcoll-ci")


def pair_seed(*names: str) -> int:
    """A fixed seed per test (JAXCOLL_HYPOTHESIS_SEED shifts them all)."""
    return zlib.crc32("/".join(names).encode()) + int(os.environ.get("JAXCOLL_HYPOTHESIS_SEED",
                                                                     0))


# ----------------------------------------------------------------------------- structures

@dataclass(frozen=True)
class Layout:
    """n ranks on one axis, or on a (outer, inner) grid addressed by the tuple axis LEVELS."""

    n: int
    grid: tuple[int, int] | None = None

    @property
    def axis(self):
        return LEVELS if self.grid else AXIS

    def mesh(self):
        return mesh(self.n, self.grid, LEVELS) if self.grid else mesh(self.n)


@dataclass(frozen=True)
class Case:
    """One call: ``primitive`` on a tuple of leaves (shapes per rank), with ``kwargs``."""

    primitive: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    kwargs: tuple[tuple[str, object], ...]
    data: str

    def call(self, algorithm: str, x, axis):
        return getattr(jaxcoll, self.primitive)(x, axis, algorithm=algorithm,
                                                **dict(self.kwargs))

    @property
    def op(self):
        return dict(self.kwargs).get("op")


def _divisors(n: int) -> list[int]:
    """Outer sizes of an (outer, inner) grid of n ranks, real 2-D grids first."""
    proper = [d for d in range(2, n) if n % d == 0]
    return proper + sorted({1, n})


def rotated(values, turn: int) -> tuple:
    values = tuple(values)
    return values[turn % len(values):] + values[:turn % len(values)]


@st.composite
def layouts(draw, two_level_only: bool, max_n: int, turn: int = 0):
    ns = rotated(NS, turn) + tuple(range(len(NS) + 1, max_n + 1))
    n = draw(st.sampled_from([m for m in ns if m <= max_n]))
    if two_level_only or draw(st.booleans()):
        outer = draw(st.sampled_from(_divisors(n)))
        return Layout(n, (outer, n // outer))
    return Layout(n)


def _min_rank(dim: int, extra: int = 0) -> int:
    """The smallest leaf rank r for which ``dim`` indexes r + extra dimensions."""
    return (dim + 1 if dim >= 0 else -dim) - extra


@st.composite
def cases(draw, primitive: str, n: int, turn: int = 0):
    kwargs = {}
    op = draw(st.sampled_from(rotated(jaxcoll.OPS, turn))) if primitive in REDUCING else None
    if op:
        kwargs["op"] = op
    if primitive in ROOTED:
        kwargs["root"] = draw(st.sampled_from(range(n - 1, -1, -1)))
    min_rank = 0
    if primitive in SPLITTING + STACKING:
        tiled = kwargs["tiled"] = draw(st.booleans())
        dim = draw(st.integers(-3, 2))
        if primitive == "alltoall":
            concat = draw(st.integers(-3, 2))
            kwargs.update(split_dim=dim, concat_dim=concat)
            min_rank = max(_min_rank(dim), _min_rank(concat))
        else:
            kwargs["dim"] = dim
            stacked = primitive in STACKING and not tiled  # dim indexes rank + 1 dimensions
            min_rank = max(_min_rank(dim, 1 if stacked else 0),
                           1 if primitive in SPLITTING or tiled else 0)
    dtypes = rotated(DTYPES[:2] if op == "mean" else DTYPES, turn)
    shapes, leaf_dtypes = [], []
    for _ in range(draw(st.integers(1, 3))):
        rank = draw(st.sampled_from([r for r in (1, 0, 2, 3) if r >= min_rank] or [min_rank]))
        shape = [draw(st.sampled_from(rotated(LONG if rank == 1 else SIZES, turn)))
                 for _ in range(rank)]
        if primitive in SPLITTING:
            split = dim % rank
            shape[split] = n * draw(st.sampled_from((1, 2, 0, 3))) if tiled else n
        shapes.append(tuple(shape))
        leaf_dtypes.append(draw(st.sampled_from(dtypes)))
    data = draw(st.sampled_from(rotated(DATA[op], turn)))
    return Case(primitive, tuple(shapes), tuple(leaf_dtypes), tuple(sorted(kwargs.items())),
                data)


@st.composite
def examples(draw, primitive: str, algorithm: str, max_n: int):
    """(layout, cases, data seed): one compiled program."""
    turn = PAIRS.index((primitive, algorithm))
    layout = draw(layouts(two_level(primitive, algorithm), max_n, turn))
    the_cases = draw(st.lists(cases(primitive, layout.n, turn), min_size=1, max_size=3))
    return layout, tuple(the_cases), draw(st.integers(0, 2**32 - 1))


# ----------------------------------------------------------------------------- data

def leaf_data(rng, kind: str, n: int, shape, dtype: str) -> np.ndarray:
    """(n, *shape) values of ``kind`` (module docstring) in ``dtype``, as a numpy array."""
    size, np_dtype = (n, *shape), jnp.dtype(dtype)
    if kind == "small":
        return rng.integers(-8, 9, size=size).astype(np_dtype)
    if kind == "bits":
        unsigned = np.dtype(f"u{np_dtype.itemsize}")
        bits = rng.integers(0, np.iinfo(unsigned).max, size=size, dtype=unsigned, endpoint=True)
        if dtype == "bfloat16":  # canonical NaNs; subnormals: test_bfloat16_subnormals_move_exactly
            nan, subnormal = bits & 0x7FFF > 0x7F80, bits & 0x7F80 == 0
            bits = np.where(nan, bits & 0x8000 | 0x7FC0, np.where(subnormal, bits | 0x0080, bits))
        return bits.astype(unsigned).view(np_dtype)
    if dtype == "int32":  # wide (sums wrap) or any
        return rng.integers(-2**31, 2**31, size=size).astype(np.int32)
    if kind == "wide":
        bound = 2 ** MANTISSA_BITS[dtype] // n
        scale = 2.0 ** int(rng.integers(-10, 11))
        return (rng.integers(-bound, bound + 1, size=size) * scale).astype(np_dtype)
    values = rng.standard_normal(size) * 10.0 ** rng.uniform(-3, 3)  # any
    values = values.astype(np_dtype)
    return np.where(values == 0, np.ones((), np_dtype), values)


def case_inputs(rng, case: Case, n: int) -> tuple:
    return tuple(jnp.asarray(leaf_data(rng, case.data, n, shape, dtype))
                 for shape, dtype in zip(case.shapes, case.dtypes))


def assert_bits(got, want, what: str = "") -> None:
    """Equal shapes, dtypes and bits (NaN payloads and signed zeros included)."""
    got, want = np.asarray(got), np.asarray(want)
    assert (got.shape, got.dtype) == (want.shape, want.dtype), (
        f"{what}: got {got.dtype}{got.shape}, want {want.dtype}{want.shape}")
    unsigned = f"u{got.dtype.itemsize}"
    if not np.array_equal(got.view(unsigned), want.view(unsigned)):
        np.testing.assert_array_equal(got, want, err_msg=what)  # shows where values differ
        raise AssertionError(f"{what}: equal values, different bits (signed zeros or NaNs)")


# ----------------------------------------------------------------------------- programs

@lru_cache(maxsize=None)
def program(algorithm: str, layout: Layout, the_cases: tuple[Case, ...]):
    """One jitted program: (ours, reference) for each case, every rank's results stacked."""
    axis = layout.axis

    def body(xs):
        pairs = ours_and_reference(the_cases, [jax.tree_util.tree_map(lambda a: a[0], x)
                                               for x in xs],
                                   lambda c, x: c.call(algorithm, x, axis),
                                   lambda c, x: c.call("xla", x, axis))
        return jax.tree_util.tree_map(lambda y: y[None], pairs)

    return jax.jit(jax.shard_map(body, mesh=layout.mesh(), in_specs=P(axis),
                                 out_specs=P(axis)))


def check(algorithm: str, layout: Layout, the_cases: tuple[Case, ...], data_seed: int) -> None:
    rng = np.random.default_rng(data_seed)
    inputs = [case_inputs(rng, case, layout.n) for case in the_cases]
    results = program(algorithm, layout, the_cases)(inputs)
    for case, (got, want) in zip(the_cases, results):
        for leaf, (g, w) in enumerate(zip(got, want)):
            assert_bits(g, w, f"{algorithm} {layout} {case} leaf {leaf} seed {data_seed}")


def run_property(primitive: str, algorithm: str, the_settings: settings, max_n: int) -> None:
    @the_settings
    @seed(pair_seed(primitive, algorithm))
    @given(examples(primitive, algorithm, max_n))
    def matches_reference(example):
        check(algorithm, *example)

    matches_reference()


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("primitive, algorithm", PAIRS)
def test_matches_reference(primitive, algorithm, request):
    run_property(primitive, algorithm, profile(request.config.getoption("--deep")), max_n=8)


@pytest.mark.parametrize("primitive, algorithm, kwargs", [
    ("allgather", "naive", ()), ("gather", "naive", (("root", 1),)),
    ("scatter", "binomial", (("root", 1), ("tiled", True))),
    ("alltoall", "naive", (("concat_dim", 0), ("split_dim", 0), ("tiled", True)))],
    ids=["allgather-naive", "gather-naive", "scatter-binomial", "alltoall-naive"])
def test_bfloat16_subnormals_move_exactly(primitive, algorithm, kwargs):
    n = 4
    subnormals = np.array([0x0001, 0x0033, 0x8005, 0x007F, 0x3F80], np.uint16)  # and a 1.0
    x = jnp.asarray(np.tile(subnormals, (n, n)).view(jnp.bfloat16))  # (n, 5n)
    case = Case(primitive, ((5 * n,),), ("bfloat16",), kwargs, "subnormals")
    [(got, want)] = program(algorithm, Layout(n), (case,))([(x,)])
    assert_bits(got[0], want[0], f"{primitive} {algorithm}")


def test_strategies_reach_every_structure():
    """The case strategy can draw every dtype, data kind, op, 0-d and empty leaves, both
    ``tiled`` and negative dims (a check of the strategy, not of jaxcoll: no JAX)."""
    seen = set()

    @settings(profile(), max_examples=300)
    @seed(0)
    @given(st.sampled_from(list(SCHEDULES)).flatmap(lambda p: cases(p, 4)))
    def collect(case):
        kwargs = dict(case.kwargs)
        seen.update(case.dtypes)
        seen.update({case.data, kwargs.get("op"), kwargs.get("tiled")})
        seen.update("0-d" for s in case.shapes if not s)
        seen.update("empty" for s in case.shapes if math.prod(s) == 0)
        seen.update("negative dim" for k in ("dim", "split_dim") if kwargs.get(k, 0) < 0)

    collect()
    assert seen >= {*DTYPES, "small", "wide", "any", "bits", *jaxcoll.OPS, True, False, "0-d",
                    "empty", "negative dim"}


@pytest.mark.subprocess_jax
def test_32_devices_in_a_subprocess(request):
    """The property on 32 fake devices, n in 1..32 (a few examples: compiling at n = 32 is
    slower)."""
    deep = is_deep(request.config.getoption("--deep"))
    examples = 40 if deep else 10
    result = subprocess.run(
        [sys.executable, __file__, "--devices", "32", "--max-n", "32", "--examples",
         str(examples), *(["--deep"] if deep else [])],
        capture_output=True, text=True, timeout=3600,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": " ".join(
            [os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0"])})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"{examples} examples on 32 devices" in result.stdout, result.stdout


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="The property on more fake CPU devices, over "
                                                 "random (primitive, algorithm) pairs.")
    parser.add_argument("--devices", type=int, default=32)
    parser.add_argument("--max-n", type=int, default=32)
    parser.add_argument("--examples", type=int, default=10)
    parser.add_argument("--deep", action="store_true", help="the jaxcoll-deep profile")
    args = parser.parse_args(argv)
    jax.config.update("jax_num_cpu_devices", args.devices)
    seen = []

    @settings(profile(args.deep), max_examples=args.examples)
    @seed(pair_seed("subprocess", str(args.devices)))
    @given(st.sampled_from(PAIRS).flatmap(
        lambda pair: st.tuples(st.just(pair), examples(*pair, max_n=args.max_n))))
    def matches_reference(drawn):
        (primitive, algorithm), example = drawn
        seen.append(f"{primitive} {algorithm} n={example[0].n}")
        check(algorithm, *example)

    matches_reference()
    print("\n".join(seen))
    print(f"{len(seen)} examples on {len(jax.devices())} devices")
    return 0


if __name__ == "__main__":
    sys.exit(main())
