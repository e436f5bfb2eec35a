"""Timing on the devices at hand: alternating medians, verifiable inputs, and
:func:`calibrate` (α, β, γ and per-algorithm factors for :mod:`jaxcoll.analysis.model`).

The library's measuring side: the benchmark (bench.py) and ``calibrate`` both use it; the
model (model.py) stays plain arithmetic with no JAX in it.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxcoll.analysis.model import (
    Calibration,
    _fit_line,
    _priced,
    default_calibration,
    schedule_bytes,
    schedule_for,
)
from jaxcoll.analysis.topology import shared, simulate
from jaxcoll.ir.families import SCHEDULES, two_level
from jaxcoll.lowering._compat import all_processes_here
from jaxcoll.tools.check import call_collective
from jaxcoll.tools.distributed import gather, transport


def largest_exact(dtype) -> int:
    """L: every integer of magnitude up to L is exact in ``dtype``."""
    dtype = jnp.dtype(dtype)
    if dtype == np.bool_:
        return 1
    if jnp.issubdtype(dtype, jnp.floating):
        return 2 ** (jnp.finfo(dtype).nmant + 1)
    return int(jnp.iinfo(dtype).max)


def verifiable_values(n: int, count: int, dtype, seed: int = 0) -> np.ndarray:
    """(n, count) small integers in ``dtype``: every sum over the n ranks is exact in any order."""
    dtype = jnp.dtype(dtype)
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, (n, count)).astype(bool)
    bound = max(1, min(8, largest_exact(dtype) // n))
    low = 0 if jnp.issubdtype(dtype, jnp.unsignedinteger) else -bound
    return rng.integers(low, bound + 1, (n, count)).astype(dtype)


def on_mesh(values: np.ndarray, mesh: Mesh):
    """``values`` (n, ...) with row r on rank r of ``mesh`` (all its axes, row-major), built
    shard by shard: across processes each holds the same ``values`` and places its own rows."""
    sharding = NamedSharding(mesh, P(tuple(mesh.axis_names)))
    return jax.make_array_from_callback(values.shape, sharding, lambda index: values[index])


def slowest_process(samples) -> np.ndarray:
    """``samples`` of seconds, timed by each process, as every process agrees on them: each
    call's slowest process (a call is over when all are); alone, the same."""
    return gather(np.asarray(samples, float)).max(axis=0)


def agreed_median(samples) -> np.ndarray:
    """``samples`` (..., repeats): :func:`slowest_process`, then the median over the repeats,
    the same everywhere (so calibrations, and what ``auto`` picks, agree in every process)."""
    return np.median(slowest_process(samples), axis=-1)


def _axis(names: tuple):
    """The axis argument for mesh axes ``names``: a name, or a tuple of them (row-major)."""
    return names[0] if len(names) == 1 else names


@lru_cache(maxsize=None)
def program(op: str, algorithm: str, mesh, root: int = 0, compress=None):
    """jit(shard_map) of one collective over all of ``mesh``'s axes: (n, count) -> (n, ...)."""
    axis = _axis(mesh.axis_names)
    return jax.jit(jax.shard_map(
        lambda b: call_collective(op, algorithm, b[0], axis, root, compress)[None],
        mesh=mesh, in_specs=P(mesh.axis_names), out_specs=P(mesh.axis_names)))


def time_alternating(programs: dict, x, iters: int, warmup: int = 1,
                     tick=lambda: None) -> dict[str, list[float]]:
    """Seconds per call: ``warmup`` calls each, then ``iters`` rounds of one call each, in a
    new order every round (seeded: the same in every process, so each program follows every
    other about as often), each call started in every process at once; ``tick()`` after
    every round."""
    names = list(programs)
    for _ in range(warmup):
        for name in names:
            programs[name](x).block_until_ready()
    times = {name: [] for name in names}
    orders = np.random.default_rng(0)
    for i in range(iters):
        for name in [names[j] for j in orders.permutation(len(names))]:
            # across processes every call starts everywhere at once: a call's stragglers
            # don't run into the next one's time (the next algorithm's)
            all_processes_here()
            start = time.perf_counter()
            programs[name](x).block_until_ready()
            times[name].append(time.perf_counter() - start)
        tick()
    return times


def compile_at_once(programs, *args) -> None:
    """Compile the jitted ``programs`` for ``args``, in threads on a machine of several cores
    (tracing one at a time; XLA compiles outside the GIL); their jit caches then hold them."""
    lowered = [jitted.lower(*args) for jitted in programs]
    workers = min(len(lowered), os.cpu_count() or 1)
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda one: one.compile(), lowered))


# ----------------------------------------------------------------------------- calibration

ALGORITHM_SIZES = (1 << 11, 1 << 17, 1 << 23)  # bytes per rank: 2 KiB, 128 KiB, 8 MiB


def calibrate(mesh_or_n=None, *, sizes=(1 << 8, 1 << 12, 1 << 16, 1 << 20, 1 << 22),
              steps: int = 8, repeats: int = 7, primitives=(),
              algorithm_sizes=ALGORITHM_SIZES, links: str = "port") -> Calibration:
    """Measure the cost model's α, β and γ on the devices at hand.

    A ring of ppermutes (``steps`` in a loop, so dispatch is amortised) and a local add are
    timed over a size sweep, each fitted to relative errors: α the time a message pays, β
    the time per byte it carries, γ the time per byte reduced. Under ``python -m
    jaxcoll.tools.launch`` (several processes) it measures the transport between them,
    every process gets the same numbers (:func:`agreed_median`), and the result is for
    :func:`~jaxcoll.tools.distributed.transport` ``"gloo"``.

    Args:
      mesh_or_n: a Mesh (all its axes form the ring) or a device count (the first n
        devices); default None: all devices.
      sizes: the bytes per rank
        of the sweep.
      steps: the ppermutes (and adds) each timed call makes
        in a loop.
      repeats: the timed calls per size;
        their median is kept.
      primitives: collectives, e.g. ``("allreduce",)``, whose every algorithm to also time
        at ``algorithm_sizes`` and fit per-algorithm factors to (see :class:`Calibration`;
        slow: every algorithm compiles at every size).
      algorithm_sizes: the bytes per rank
        those algorithms are timed at.
      links: ``"port"`` (default), or ``"shared"`` (with ``primitives``): instead of
        per-algorithm factors, fit one shared medium's α per round, overhead per message
        and β per byte to all those times (what processes of one host over loopback are:
        ``jaxcoll/analysis/calibrations/gloo.json``).

    Returns:
      The :class:`Calibration`; pass it to :func:`~jaxcoll.set_calibration` to use it.

    Raises:
      ValueError: if ``links`` is neither ``"port"`` nor ``"shared"``, or is ``"shared"``
        with no ``primitives``.
    """
    if links not in ("port", "shared") or (links == "shared" and not primitives):
        raise ValueError(f"calibrate: links={links!r}: 'port', or 'shared' with primitives "
                         "to fit it to")
    if isinstance(mesh_or_n, Mesh):
        mesh = mesh_or_n
    else:
        n = len(jax.devices()) if mesh_or_n is None else int(mesh_or_n)
        mesh = Mesh(np.array(jax.devices()[:n]), ("ranks",))
    axes, n = tuple(mesh.axis_names), mesh.size
    ring = [(r, (r + 1) % n) for r in range(n)]

    def timed(body, count):
        program = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(axes), out_specs=P(axes)))
        x = on_mesh(np.ones((n, count), np.float32), mesh)
        program(x).block_until_ready()  # compile and warm up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            program(x).block_until_ready()
            times.append((time.perf_counter() - start) / steps)
        return times

    permute = lambda x: lax.fori_loop(0, steps, lambda i, y: lax.ppermute(y, axes, ring), x)  # noqa: E731
    add = lambda x: lax.fori_loop(0, steps, lambda i, y: y + x, x)  # noqa: E731
    counts = [max(1, s // 4) for s in sizes]
    permuted, added = agreed_median([[timed(body, c) for c in counts] for body in (permute, add)])
    alpha, beta = _fit_line(sizes, permuted)
    _, gamma = _fit_line(sizes, added)
    device, processes = jax.devices()[0], jax.process_count()
    where = f"{processes} processes, " if processes > 1 else ""
    plain = Calibration(alpha, beta, gamma, transport(),
                        f"jaxcoll.calibrate on {where}{n} x {device.device_kind}, "
                        f"jax {jax.__version__}")
    measured = {primitive: _measure_algorithms(mesh, primitive, algorithm_sizes, repeats)
                for primitive in primitives}
    if links == "shared":
        return _shared_fit(plain, n, measured)
    per_algorithm = tuple(row for primitive, points in measured.items()
                          for row in _algorithm_factors(plain, n, primitive, points))
    return replace(plain, per_algorithm=per_algorithm)


def time_algorithms(mesh, primitive: str, input_bytes: int, names, repeats: int,
                    keep_within: float = np.inf, budget: float = 0.0,
                    clear: float = np.inf) -> dict[str, float]:
    """{algorithm: median seconds} of ``primitive`` by each of ``names`` on float32 inputs
    of about ``input_bytes`` per rank (a multiple of n elements), timed in alternation and
    agreed over the processes: a warm-up call each, then rounds of one call each, ``repeats``
    at a time. After each batch only those within ``keep_within`` of the fastest are timed
    again (the others keep their medians so far); more batches (up to 5 x ``repeats``
    rounds) while they took less than ``budget`` seconds in all and the runner-up is within
    ``clear`` of the fastest (the order not yet clear)."""
    n = mesh.size
    count = max(n, input_bytes // 4 // n * n)  # float32, a multiple of n
    x = on_mesh(verifiable_values(n, count, "float32"), mesh)
    programs = {name: program(primitive, name, mesh) for name in names}
    compile_at_once(programs.values(), x)
    time_alternating(programs, x, 0, warmup=1)  # warm
    samples = {name: [] for name in names}
    medians, kept, spent = {}, list(names), 0.0
    while kept:
        batch = time_alternating({name: programs[name] for name in kept}, x, repeats, 0)
        for name in kept:
            samples[name] += batch[name]
        # the same numbers (and so the same decisions) in every process
        medians.update(zip(kept, map(float, agreed_median([samples[name] for name in kept]))))
        spent += repeats * sum(medians[name] for name in kept)
        fastest = min(medians[name] for name in kept)
        kept = [name for name in kept if medians[name] <= keep_within * fastest]
        rest = sorted(medians[name] for name in kept)
        if (len(rest) < 2 or rest[1] > clear * rest[0] or spent >= budget
                or len(samples[kept[0]]) >= 5 * repeats):
            break
    return medians


def _measure_algorithms(mesh, primitive: str, sizes, repeats: int):
    """[(algorithm, buffer bytes, seconds)] for every one-level algorithm of ``primitive``,
    timed in alternation at each size (bytes per rank), agreed over the processes."""
    n = mesh.size
    names = [name for name in sorted(SCHEDULES[primitive]) if not two_level(primitive, name)]
    points = []
    for size in sizes:
        medians = time_algorithms(mesh, primitive, size, names, repeats)
        nbytes = schedule_bytes(primitive, max(n, size // 4 // n * n) * 4, n)
        points += [(name, nbytes, medians[name]) for name in names]
    return points


def _algorithm_factors(plain: Calibration, n: int, primitive: str, points):
    """(primitive, algorithm, latency factor, bandwidth factor) for every algorithm measured
    in ``points``: t = a·(α part) + b·(β, γ part) fitted to relative errors."""
    for name in sorted({name for name, _, _ in points}):
        rows = []  # (α part, β/γ part, measured)
        for algorithm, nbytes, measured in points:
            if algorithm == name:
                c, latency_part = _priced(primitive, name, n, nbytes, plain)
                rows.append((latency_part, c.seconds - latency_part, measured))
        parts = np.array(rows)  # (sizes, 3)
        weighted = parts[:, :2] / parts[:, 2:]  # relative errors: divide each row by its time
        factors, *_ = np.linalg.lstsq(weighted, np.ones(len(parts)), rcond=None)
        latency, bandwidth = (max(float(f), 0.05) for f in factors)
        yield primitive, name, round(latency, 3), round(bandwidth, 3)


def _nonnegative_fit(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin |a·x - b| over x >= 0, for a few columns: least squares on every subset of them,
    the best one whose coefficients are all >= 0 (the others 0)."""
    columns = a.shape[1]
    best, best_residual = None, np.inf
    for mask in range(1, 1 << columns):
        keep = [k for k in range(columns) if mask >> k & 1]
        fit, *_ = np.linalg.lstsq(a[:, keep], b, rcond=None)
        residual = float(np.sum((a[:, keep] @ fit - b) ** 2))
        if (fit >= 0).all() and residual < best_residual:
            best, best_residual = np.zeros(columns), residual
            best[keep] = fit
    if best is None:
        raise ValueError("calibrate: no non-negative fit of the measured times")
    return best


def _shared_fit(plain: Calibration, n: int, measured: dict) -> Calibration:
    """``plain`` with links="shared": α per round, overhead per message and β per byte of the
    shared medium, fitted to relative errors over every measured algorithm and size (no
    per-algorithm factors: the schedules' rounds, messages and bytes carry the differences)."""
    unit = [dict(alpha=1.0, overhead=0.0, beta=0.0), dict(alpha=0.0, overhead=1.0, beta=0.0),
            dict(alpha=0.0, overhead=0.0, beta=1.0)]
    features, seconds = [], []
    traced = default_calibration()  # what the timed programs cut their pieces with
    for primitive, points in measured.items():
        for algorithm, nbytes, took in points:
            schedule = schedule_for(primitive, algorithm, n, nbytes, traced)
            features.append([simulate(schedule, nbytes, shared(n, **u)).seconds for u in unit])
            seconds.append(took)
    features, seconds = np.array(features), np.array(seconds)  # (points, 3), (points,)
    alpha, overhead, beta = _nonnegative_fit(features / seconds[:, None], np.ones(len(seconds)))
    return replace(plain, alpha=float(alpha), beta=float(beta), overhead=float(overhead),
                   links="shared",
                   source=plain.source + "; links: shared, fitted to every algorithm's time")
