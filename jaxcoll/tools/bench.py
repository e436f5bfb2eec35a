"""nccl-tests style benchmark: every algorithm of a collective against ``xla``, over a size sweep.

    python -m jaxcoll.tools.bench -b 1K -e 16M -f 4 --op allreduce,allgather --plot sweep.png

One line per collective (``--op``), size (``-b`` to ``-e``, times ``-f``) and algorithm
(``--algorithms``; the ``xla`` built-in always runs too, as the reference), with nccl-tests'
columns: size, count, type, redop, root, time (median, us), algbw and busbw (GB/s), #wrong,
and the time relative to ``xla`` in the same run.

Size, count and bandwidth follow nccl-tests (doc/PERFORMANCE.md; ``src/*.cu``, GetCollByteCount
and GetBw). The size S is the larger of one rank's input and output buffers, in bytes; count is
the count argument of the NCCL call; algbw = S / time; busbw = algbw x a factor per collective
that makes it comparable with the hardware's bandwidth whatever the rank count n:

    op              S is             count (elements)      input per rank   busbw factor
    allreduce       the buffer       S / itemsize          S                2(n-1)/n
    reduce_scatter  the input        S / n / itemsize      S (n blocks)     (n-1)/n
    allgather       the output       S / n / itemsize      S / n            (n-1)/n
    alltoall        the input        S / n / itemsize      S (n blocks)     (n-1)/n
    broadcast       the buffer       S / itemsize          S                1
    reduce          the buffer       S / itemsize          S                1
    gather          root's output    S / n / itemsize      S / n            (n-1)/n
    scatter         root's input     S / n / itemsize      S (n blocks)     (n-1)/n

S is rounded down to whole elements (whole blocks of n), at least one element per block; the
size column shows the S actually run. Only ``sum`` is benchmarked (redop ``none`` where
nothing is reduced); root is -1 for collectives without one.

Verifiable inputs: every element is a small integer, at most m = min(8, L // n) in magnitude,
where every integer up to L is exact in the dtype (2^24 for float32, 256 for bfloat16), so any
partial sum of n of them is exact and every summation order gives the same bits. #wrong is the
number of result elements (all ranks) that differ from ``xla``'s, with zero tolerance. A
wrong algorithm is reported, not hidden, and makes the exit status 1.

Timing: each algorithm is one ``jit(shard_map(...))`` program with one collective over the n
devices (one collective per program also avoids a jaxlib 0.10 CPU crash, docs/guide/typing.md). It
is compiled and checked, then called ``--warmup`` times; then ``--iters`` rounds call every
algorithm once each (A B C, B C A, ...: drift hits all alike), each call timed on the host up to
``block_until_ready`` (Python dispatch included; nccl-tests averages back-to-back launches
instead). The table gives medians and "iqr", the interquartile range in % of the median; the json
has min, quartiles, max and every sample.

Devices: on CPU, ``--devices N`` fake devices (``jax_num_cpu_devices``, set before JAX starts;
if it has started already, the first N of its devices); otherwise all local devices. A single
accelerator cannot run a collective: ``--emulate N`` runs the same algorithms on N ranks
emulated with ``jax.vmap(..., axis_name=...)`` on that one device, labelled as emulation in
every output: it measures the device's memory traffic, not links. Two-level algorithms
(``hierarchical``) see the same ranks as an (outer, inner) grid, outer the smallest prime
factor of n (2 x 4 for 8), ranks in row-major order; they are left out of emulation (JAX's
ppermute under vmap takes one axis name at a time).

On GPUs, collective-permute (what every ppermute becomes) depends on XLA flags set in
``XLA_FLAGS``, which every result records: ``--xla_gpu_enable_latency_hiding_scheduler``,
``--xla_gpu_use_memcpy_local_p2p`` (copies between GPUs of one process with cudaMemcpy
instead of NCCL send/recv), ``--xla_gpu_collective_permute_combine_threshold_bytes`` and
``--xla_gpu_collective_permute_decomposer_threshold``; bench/RESULTS.md cites the sources.

One job, the nccl-tests style benchmark: its sweep, its table and outputs, its command line.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import os
import platform
import shlex
import statistics
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from jax.sharding import Mesh

from jaxcoll.analysis.compression import Compress, result_bound
from jaxcoll.analysis.model import choose, pieces_for
from jaxcoll.collectives import algorithms
from jaxcoll.ir import _renamed
from jaxcoll.ir.families import COLLECTIVES, build_schedule, two_level
from jaxcoll.ir.records import RECORDS
from jaxcoll.lowering._checks import check_op_dtype
from jaxcoll.tools.check import ROOTED, call_collective, two_level_mesh
from jaxcoll.tools.console import Parser, Progress, format_size, parse_size, start_jax, writable
from jaxcoll.tools.distributed import gather, local_blocks
from jaxcoll.tools.palette import MUTED
from jaxcoll.tools.timing import (  # noqa: F401 (API)
    on_mesh,
    program,
    slowest_process,
    time_alternating,
    verifiable_values,
)

BENCH_AXIS = "i"  # the axis the benchmark's meshes and vmaps name (check.py's is AXIS)
# AXIS, its name before 0.5.0, reads it with a DeprecationWarning
__getattr__ = _renamed.module_getattr(__name__, {"AXIS": "BENCH_AXIS"}, globals())
DTYPES = ("float32", "bfloat16", "float16", "int32", "int16", "int8", "uint32", "uint8", "bool")
MAX_SIZES = 200  # steps of a sweep
EMULATION_NOTE = ("ranks emulated with jax.vmap(axis_name=...) on one device: this measures "
                  "memory traffic, not links")


# ----------------------------------------------------------------------------- conventions

@dataclass(frozen=True)
class Convention:
    """How nccl-tests sizes and scores one collective."""
    factor: str  # busbw = algbw x this factor of n (records.CollectiveRecord.busbw_factor)
    layout: str  # "whole": S is the buffer; "scatter", "exchange": the input, n blocks;
    #              "gather": the output, n blocks (records.CollectiveRecord.layout)
    reduces: bool = False


CONVENTIONS = {name: Convention(record.busbw, record.layout, record.reduces)
               for name, record in RECORDS.items()}


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw for ``op`` on ``n`` ranks."""
    return RECORDS[op].busbw_factor(n)


def layout(op: str, size: int, itemsize: int, n: int) -> tuple[int, int, int]:
    """(count, input elements per rank, S actually run) for ``size`` bytes, as nccl-tests."""
    if CONVENTIONS[op].layout == "whole":
        count = max(1, size // itemsize)
        return count, count, count * itemsize
    count = max(1, size // itemsize // n)  # one block
    elements = count * n if CONVENTIONS[op].layout in ("scatter", "exchange") else count
    return count, elements, count * n * itemsize


# ----------------------------------------------------------------------------- sizes

def sweep(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """nccl-tests' sizes: ``min_bytes`` times ``factor`` to the k, up to ``max_bytes``."""
    if min_bytes <= 0 or max_bytes <= 0:
        raise ValueError(f"sizes must be positive, got -b {min_bytes} -e {max_bytes}")
    if min_bytes > max_bytes:
        raise ValueError(f"min size -b {min_bytes} is larger than max size -e {max_bytes}")
    if not factor > 1:
        raise ValueError(f"factor -f {factor} must be > 1")
    steps = math.floor(math.log(max_bytes / min_bytes) / math.log(factor) + 1e-9)
    if steps >= MAX_SIZES:
        raise ValueError(f"-b {min_bytes} -e {max_bytes} -f {factor} takes more than "
                         f"{MAX_SIZES} steps; use a larger factor")
    sizes = {round(min_bytes * factor ** k) for k in range(steps + 1)}
    return sorted(size for size in sizes if size <= max_bytes)


# ----------------------------------------------------------------------------- inputs

def place(values: np.ndarray, where):
    """``values`` (n, count) on the devices: row r on rank r of a mesh, or all on one device."""
    if isinstance(where, Mesh):  # (from every process's identical copy, when several)
        return on_mesh(values, where)
    return jax.device_put(values, where)


# ----------------------------------------------------------------------------- programs

@lru_cache(maxsize=None)
def emulated_program(op: str, algorithm: str, root: int = 0, compress=None):
    """jit(vmap) of one collective on ranks emulated on one device: (n, count) -> (n, ...)."""


    return jax.jit(jax.vmap(lambda b: call_collective(op, algorithm, b, BENCH_AXIS, root, compress),
                            axis_name=BENCH_AXIS))


@dataclass(frozen=True)
class Ranks:
    """Where the n ranks run: a mesh of n devices, or emulated on one device.

    Two-level algorithms (``hierarchical``) run on the tuple axis (outer, inner) of
    ``check.two_level_mesh`` (2 x 4 for 8: two "nodes" of four), ranks in row-major order.
    They cannot be emulated: JAX's ppermute under vmap takes one axis name at a time.
    """
    n: int
    devices: tuple
    emulated: bool = False

    def mesh(self):
        """The devices as a mesh with the one axis "i"."""
        return Mesh(np.array(self.devices), (BENCH_AXIS,))

    def program(self, op: str, algorithm: str, root: int, compress=None):
        """The jitted program of ``op`` by ``algorithm`` on these ranks (``compress``ed)."""
        if self.emulated:
            return emulated_program(op, algorithm, root, compress)
        levels = two_level(op, algorithm)
        return program(op, algorithm, two_level_mesh(self.n, self.devices) if levels
                       else self.mesh(), root, compress)

    def place(self, values: np.ndarray):
        """``values`` (n, count) on these ranks."""
        return place(values, self.devices[0] if self.emulated else self.mesh())


def verifiable_input(ranks: Ranks, size: int, dtype="float32"):
    """(n, count) verifiable values on ``ranks``, about ``size`` bytes per rank: count is a
    multiple of n (>= n), so that every collective can cut it into n blocks."""
    count = max(ranks.n, size // jnp.dtype(dtype).itemsize // ranks.n * ranks.n)
    return ranks.place(verifiable_values(ranks.n, count, dtype))


def count_wrong(programs: dict, x) -> dict[str, int]:
    """Elements of each program's result differing from ``programs["xla"]``'s (zero tolerance)."""
    reference = local_blocks(programs["xla"](x))
    wrong = {}
    for name, prog in programs.items():
        wrong[name] = sum(int(np.sum(mine != theirs)) if mine.shape == theirs.shape
                          else theirs.size
                          for mine, theirs in zip(local_blocks(prog(x)), reference))
    # Across processes: each compares the blocks it holds; the counts add up.
    totals = gather([wrong[name] for name in programs]).sum(axis=0)
    return {name: int(total) for name, total in zip(programs, totals)}


# ----------------------------------------------------------------------------- results

@dataclass(frozen=True)
class Result:
    """One line of the table: one algorithm of one collective at one size."""
    op: str
    algorithm: str
    size: int  # S, bytes
    count: int
    dtype: str
    root: int  # -1: the collective has none
    ranks: int
    wrong: int
    times: tuple[float, ...]  # seconds, one per timed call
    xla_median: float
    wire_size: int = 0  # compressed: the bytes S takes encoded (algbw and busbw count these)
    error: float = 0.0  # compressed: RMS error / RMS of the exact float64 result

    @property
    def redop(self) -> str:
        """nccl-tests' redop column: "sum" where the collective reduces, else "none"."""
        return "sum" if CONVENTIONS[self.op].reduces else "none"

    @property
    def median(self) -> float:
        """Median seconds per call."""
        return statistics.median(self.times)

    @property
    def quartiles(self) -> tuple[float, float]:
        """First and third quartiles of the seconds per call."""
        if len(self.times) < 2:
            return self.median, self.median
        q1, _, q3 = statistics.quantiles(self.times, n=4, method="inclusive")
        return q1, q3

    @property
    def algbw(self) -> float:
        """S (compressed: its encoded bytes) / median time, in GB/s."""
        return (self.wire_size or self.size) / self.median / 1e9

    @property
    def busbw(self) -> float:
        """algbw x nccl-tests' factor for the collective, in GB/s."""
        return self.algbw * busbw_factor(self.op, self.ranks)

    @property
    def vs_xla(self) -> float:
        """Median time / xla's median time at the same size, in the same run."""
        return self.median / self.xla_median

    def as_dict(self) -> dict:
        """Everything about this line, times in microseconds."""
        q1, q3 = self.quartiles
        return dict(op=self.op, algorithm=self.algorithm, size=self.size, count=self.count,
                    dtype=self.dtype, redop=self.redop, root=self.root, ranks=self.ranks,
                    time_us_median=self.median * 1e6, time_us_min=min(self.times) * 1e6,
                    time_us_q1=q1 * 1e6, time_us_q3=q3 * 1e6,
                    time_us_max=max(self.times) * 1e6, algbw_gbs=self.algbw,
                    busbw_gbs=self.busbw, wrong=self.wrong, vs_xla=self.vs_xla,
                    wire_size=self.wire_size, rms_error=self.error)


def run_point(op: str, size: int, algorithms: list[str], ranks: Ranks, dtype: str, root: int,
              iters: int, warmup: int, tick=lambda: None) -> list[Result]:
    """Every algorithm of ``op`` at ``size`` bytes: checked against xla, then timed in turn."""


    count, elements, nbytes = layout(op, size, jnp.dtype(dtype).itemsize, ranks.n)
    x = ranks.place(verifiable_values(ranks.n, elements, dtype))  # (n, elements)
    programs = {name: ranks.program(op, name, root) for name in ["xla", *algorithms]}
    wrong = count_wrong(programs, x)
    tick()
    times = time_alternating(programs, x, iters, warmup, tick)
    slowest = slowest_process([times[name] for name in programs])  # (algorithms, iters)
    times = {name: list(row) for name, row in zip(programs, slowest.tolist())}
    xla = statistics.median(times["xla"])
    shown_root = root if op in ROOTED else -1
    return [Result(op, name, nbytes, count, dtype, shown_root, ranks.n, wrong[name],
                   tuple(times[name]), xla) for name in programs]


def run_compressed_point(op: str, size: int, algorithms: list[str], ranks: Ranks,
                         compress: Compress, iters: int, warmup: int,
                         tick=lambda: None) -> list[Result]:
    """Every algorithm of ``op`` compressed at ``size`` bytes beside the uncompressed xla: normal
    float32 inputs; #wrong counts the values outside the error bound (compression.py), error
    is the RMS error over the RMS of the exact (float64) result."""
    n = ranks.n
    count, elements, nbytes = layout(op, size, 4, n)
    values = np.random.default_rng(0).standard_normal((n, elements)).astype(np.float32)
    x = ranks.place(values)
    exact = {"allreduce": lambda: np.broadcast_to(values.astype(np.float64).sum(0), (n, count)),
             "reduce_scatter": lambda: values.astype(np.float64).sum(0).reshape(n, count),
             "allgather": lambda: np.broadcast_to(values.reshape(1, -1), (n, n * count))}[op]()
    programs = {"xla": ranks.program(op, "xla", 0)}
    programs.update({name: ranks.program(op, name, 0, compress) for name in algorithms})
    wrong, errors = {}, {}
    for name, prog in programs.items():
        got = np.asarray(prog(x)).reshape(exact.shape)
        error = np.abs(got - exact)
        errors[name] = float(np.sqrt(np.mean(error ** 2) / max(np.mean(exact ** 2), 1e-300)))
        if name == "xla":
            wrong[name] = 0
            continue
        chosen = choose(op, n, elements * 4, compress=compress) if name == "auto" else name
        schedule = build_schedule(op, chosen, n, 0, pieces_for(op, chosen, n, elements * 4))
        bound = result_bound(compress, schedule, values)  # flat, in the result's order
        bound = bound.reshape(n, count) if CONVENTIONS[op].layout == "scatter" else bound
        wrong[name] = int(np.sum(error > bound))
    tick()
    times = time_alternating(programs, x, iters, warmup, tick)
    xla = statistics.median(times["xla"])
    wire = compress.wire_bytes(nbytes // 4)
    return [Result(op, name if name == "xla" else f"{name}/{compress.kind}", nbytes, count,
                   "float32", -1, n, wrong[name], tuple(times[name]), xla,
                   0 if name == "xla" else wire, errors[name]) for name in programs]


def environment(ranks: Ranks, argv: list[str]) -> dict:
    """Versions, backend, devices, XLA_FLAGS and emulation: recorded with every result."""
    return dict(jax=jax.__version__, jaxlib=jaxlib.__version__,
                python=platform.python_version(), backend=jax.default_backend(),
                device_kind=ranks.devices[0].device_kind, devices=len(ranks.devices),
                processes=jax.process_count(), ranks=ranks.n, emulated=ranks.emulated,
                xla_flags=os.environ.get("XLA_FLAGS", ""),
                date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                command=shlex.join(["python", "-m", "jaxcoll.tools.bench", *argv]))


# ----------------------------------------------------------------------------- output

COLUMNS = (  # name, unit, width (negative: left-aligned), format of the value
    ("size", "(B)", 12, "d"), ("count", "(elements)", 12, "d"), ("type", "", 8, "s"),
    ("redop", "", 5, "s"), ("root", "", 4, "d"), ("algorithm", "", -21, "s"),
    ("time", "(us)", 10, ".1f"), ("iqr", "(%)", 4, ".0f"), ("algbw", "(GB/s)", 8, ".3g"),
    ("busbw", "(GB/s)", 8, ".3g"), ("#wrong", "", 6, "d"), ("vs xla", "(time)", 6, ".2f"))


def _cells(texts) -> str:
    """One table line: texts right-aligned (left for negative widths) in COLUMNS' widths."""
    return "  ".join(f"{text:<{-width}}" if width < 0 else f"{text:>{width}}"
                     for text, (_, _, width, _) in zip(texts, COLUMNS))


def header(meta: dict, ops: list[str], dtype: str, iters: int, warmup: int,
           compress: Compress | None = None) -> str:
    """The '#' lines above the table: what ran, where, and with which versions and flags."""
    where = (f"{meta['ranks']} ranks EMULATED on one {meta['backend']} device "
             f"({meta['device_kind']}): {EMULATION_NOTE}" if meta["emulated"] else
             f"{meta['ranks']} {meta['backend']} devices ({meta['device_kind']})")
    if meta.get("processes", 1) > 1:
        where += (f" in {meta['processes']} processes (jax.distributed; a call's time is "
                  f"its slowest process's)")
    factors = ", ".join(f"{op} {CONVENTIONS[op].factor}" for op in ops)
    about = [f"jaxcoll.tools.bench: {', '.join(ops)}; {dtype}; {where}",
             f"jax {meta['jax']}, jaxlib {meta['jaxlib']}, python {meta['python']}, "
             f"XLA_FLAGS={meta['xla_flags'] or '(unset)'}",
             f"{iters} timed calls per line (median; iqr = interquartile range / median), "
             f"{warmup} warm-up, algorithms alternating in a new order each round; "
             f"busbw = algbw x {factors}"]
    columns = [_cells(name for name, *_ in COLUMNS), _cells(unit for _, unit, *_ in COLUMNS)]
    if compress is not None:
        about.append(f"compressed ({compress.kind}, blocks of {compress.block}): algbw and "
                     "busbw count the encoded bytes; #wrong = values outside the error bound; "
                     "rms err = RMS error / RMS of the exact result (normal inputs)")
        columns = [columns[0] + f"  {'rms err':>9}", columns[1] + f"  {'(rel)':>9}"]
    return "\n".join([f"# {line}" for line in about] + ["#"] + ["#" + c[1:] for c in columns])


def table_line(result: Result, compressed: bool = False) -> str:
    """One result as a table line (``compressed``: with its error column)."""
    q1, q3 = result.quartiles
    values = (result.size, result.count, result.dtype, result.redop, result.root,
              result.algorithm, result.median * 1e6, 100 * (q3 - q1) / result.median,
              result.algbw, result.busbw, result.wrong, result.vs_xla)
    line = _cells(format(v, fmt) for v, (*_, fmt) in zip(values, COLUMNS))
    return line + f"  {result.error:>9.2e}" if compressed else line


def write_json(path: str, meta: dict, results: list[Result]) -> None:
    """{"meta": ..., "results": [... with every timed sample in "times_us"]}."""
    rows = [dict(r.as_dict(), times_us=[t * 1e6 for t in r.times]) for r in results]
    with open(path, "w") as f:
        json.dump(dict(meta=meta, results=rows), f, indent=1)


def write_csv(path: str, meta: dict, results: list[Result]) -> None:
    """One row per result, the run's meta (versions, devices, emulated, ...) on every row."""
    rows = [dict(r.as_dict(), **{k: v for k, v in meta.items() if k != "command"})
            for r in results]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


# ----------------------------------------------------------------------------- plot

def _new_figure(**kwargs):
    """A matplotlib Figure of its own (no pyplot: the caller's backend, e.g. a notebook's
    inline one, is left alone), or a clear error if matplotlib is missing."""
    try:
        from matplotlib.figure import Figure  # optional: jaxcoll[viz]
    except ImportError:
        raise ImportError("jaxcoll.tools.bench.plot needs matplotlib: pip install 'jaxcoll[viz]'"
                          ) from None
    return Figure(**kwargs)


# Filled markers but the reference's square: 14, prime to the 9 colours, so no two of the first
# 126 algorithms share both, and an algorithm sharing a colour with one 9 before it has a
# marker of another shape.
MARKERS = "o^DvX<>*pPdh8H"


def plot(path: str, meta: dict, results: list[Result]) -> None:
    """busbw against size (log-log) and time / xla, one column per collective."""
    from matplotlib.ticker import (  # optional: jaxcoll[viz]
        FuncFormatter,
        LogLocator,
        NullFormatter,
        NullLocator,
    )

    ops = list(dict.fromkeys(r.op for r in results))
    ours = sorted({r.algorithm for r in results} - {"xla"})
    styles = _styles(ours)
    fig = _new_figure(figsize=(5.5 * len(ops) + 2, 8))
    axes = fig.subplots(2, len(ops), squeeze=False, sharex="col")
    for (top, bottom), op in zip(axes.T, ops):
        _plot_op(top, bottom, [r for r in results if r.op == op], styles)
        bottom.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        bottom.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        bottom.yaxis.set_minor_formatter(NullFormatter())
        for ax in (top, bottom):
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_size(v)))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.grid(True, which="major", alpha=0.3)
    handles = {label: h for ax in axes.flat for h, label in zip(*ax.get_legend_handles_labels())}
    order = [styles[a]["label"] for a in ("xla", *ours)] + ["#wrong > 0"]
    labels = [label for label in order if label in handles]
    fig.legend([handles[label] for label in labels], labels, loc="center right", fontsize=9)
    fig.suptitle(_plot_title(meta), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1 - 1.9 / fig.get_figwidth(), 1))
    fig.savefig(path, dpi=110)


def _styles(algorithms: list[str]) -> dict[str, dict]:
    """Each algorithm's line: Paul Tol's colour-blind-safe muted colours (the pictures' ranks)
    paired with a marker, no two lines alike; the reference ``xla`` black, dashed, squares."""
    styles = {a: dict(color=MUTED[i % len(MUTED)], marker=MARKERS[i % len(MARKERS)], label=a)
              for i, a in enumerate(algorithms)}
    styles["xla"] = dict(color="black", marker="s", linestyle="--", label="xla (reference)")
    return styles


def _plot_op(top, bottom, results: list[Result], styles: dict) -> None:
    """One collective's two panels; points with #wrong > 0 circled in red."""
    for algorithm in dict.fromkeys(r.algorithm for r in results):
        rows = sorted((r for r in results if r.algorithm == algorithm), key=lambda r: r.size)
        x = [r.size for r in rows]
        top.loglog(x, [r.busbw for r in rows], markersize=5, **styles[algorithm])
        bottom.loglog(x, [r.vs_xla for r in rows], markersize=5, **styles[algorithm])
        bad = [r for r in rows if r.wrong]
        for ax, y in ((top, [r.busbw for r in bad]), (bottom, [r.vs_xla for r in bad])):
            if bad:
                ax.scatter([r.size for r in bad], y, s=150, facecolors="none",
                           edgecolors="red", linewidths=1.5, label="#wrong > 0", zorder=3)
    op = results[0].op
    top.set_title(f"{op} ({results[0].dtype}, busbw = algbw x {CONVENTIONS[op].factor})",
                  fontsize=10)
    top.set_ylabel("busbw (GB/s)")
    bottom.set_ylabel("time / xla time (lower is faster)")
    bottom.set_xlabel("size S (bytes, nccl-tests convention)")
    bottom.set_xticks(sorted({r.size for r in results}))


def _plot_title(meta: dict) -> str:
    """The figure title: where and with what it ran."""
    where = (f"{meta['ranks']} ranks EMULATED by vmap on one {meta['backend']} device "
             "(memory traffic, not links)" if meta["emulated"] else
             f"{meta['ranks']} {meta['backend']} devices ({meta['device_kind']})")
    return f"jaxcoll.tools.bench: {where}; jax {meta['jax']}; median of timed calls"


# ----------------------------------------------------------------------------- command line

def _parser(prog: str = "python -m jaxcoll.tools.bench") -> argparse.ArgumentParser:
    """The command line, flags named as in nccl-tests where it has them."""
    parser = Parser(
        prog=prog, description=__doc__.split("\n\n")[0],
        epilog="See the module docstring (python -c 'import jaxcoll.tools.bench; "
               "help(jaxcoll.tools.bench)') for what size, count, algbw and busbw mean.")
    parser.add_argument("-b", "--minbytes", default="1K",
                        help="smallest size S in bytes: 64, 1K, 1KiB, 16M, 16MiB, 1G (binary "
                             "units, as nccl-tests; default 1K)")
    parser.add_argument("-e", "--maxbytes", default="16M", help="largest size (default 16M)")
    parser.add_argument("-f", "--stepfactor", type=float, default=4.0,
                        help="multiply the size by this from -b to -e (default 4)")
    parser.add_argument("--op", default="allreduce",
                        help="comma-separated collectives, or 'all' (default allreduce)")
    parser.add_argument("--algorithms", default="all",
                        help="comma-separated, or 'all' (every algorithm but auto); xla always "
                             "runs as the reference")
    parser.add_argument("-d", "--dtype", default="float32",
                        help=f"one of {', '.join(DTYPES)} (default float32)")
    parser.add_argument("-r", "--root", type=int, default=0, help="root of rooted collectives")
    parser.add_argument("-n", "--iters", type=int, default=20, help="timed rounds (default 20)")
    parser.add_argument("-w", "--warmup", type=int, default=2,
                        help="warm-up calls per algorithm and size (default 2)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--devices", type=int, default=None,
                       help="ranks: fake CPU devices on CPU (default 8); elsewhere the first N "
                            "local devices (default all)")
    where.add_argument("--emulate", type=int, default=None, metavar="N",
                       help="run N ranks emulated by jax.vmap on one device (measures memory "
                            "traffic, not links)")
    parser.add_argument("--json", metavar="PATH", help="write meta and every sample as json")
    parser.add_argument("--csv", metavar="PATH", help="write one row per table line")
    parser.add_argument("--plot", metavar="PNG", help="busbw and time / xla against size "
                        "(needs matplotlib: pip install 'jaxcoll[viz]')")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--compress", choices=["bf16", "fp8", "int8"],
                        help="compressed transfers (allreduce, reduce_scatter, allgather; "
                             "float32): time, busbw on the encoded bytes, error columns")
    return parser


def _sizes(parser, args) -> list[int]:
    """The sweep from -b, -e, -f, or a parser error."""
    try:
        return sweep(parse_size(args.minbytes), parse_size(args.maxbytes), args.stepfactor)
    except ValueError as error:
        parser.error(f"argument -b/-e/-f: {error}")


def _counts(parser, args) -> None:
    """--iters, --warmup, --devices and --emulate in range, or a parser error."""
    for flag, value, low in (("--iters", args.iters, 1), ("--warmup", args.warmup, 0),
                             ("--devices", args.devices, 1), ("--emulate", args.emulate, 2)):
        if value is not None and value < low:
            parser.error(f"argument {flag}: {value} must be >= {low}")
    if args.plot:

        if importlib.util.find_spec("matplotlib") is None:
            parser.error(f"argument --plot: {args.plot} needs matplotlib, which is not "
                         "installed: pip install 'jaxcoll[viz]'")


def ops_arg(parser, text: str) -> list[str]:
    """The collectives of --op, or a parser error naming the allowed ones."""
    allowed = [op for op in COLLECTIVES if op in CONVENTIONS]
    ops = allowed if text == "all" else list(dict.fromkeys(text.split(",")))
    for op in ops:
        if op not in allowed:
            parser.error(f"argument --op: {op!r} is not a collective; allowed: "
                         f"{', '.join(allowed)}, all")
    return ops


def _algorithms(parser, ops: list[str], text: str, emulated: bool) -> dict[str, list[str]]:
    """{op: the algorithms of --algorithms it has} (xla, which always runs, left out). With
    several ops a name need only belong to one of them. Under --emulate, no two-level ones
    (they need a tuple axis, which vmap can't give)."""
    def allowed(op):
        names = [a for a in algorithms(op) if a != "xla"]
        return [a for a in names if not (emulated and two_level(op, a))]

    if text == "all":
        return {op: [a for a in allowed(op) if a != "auto"] for op in ops}
    names = [a for a in dict.fromkeys(text.split(",")) if a != "xla"]
    for name in names:
        if not any(name in allowed(op) for op in ops):
            why = (" (two-level algorithms cannot be emulated)"
                   if emulated and any(name in algorithms(op) for op in ops) else "")
            choices = sorted({a for op in ops for a in allowed(op)})
            parser.error(f"argument --algorithms: {name!r} is not an algorithm of "
                         f"{', '.join(ops)}{why}; allowed: {', '.join(choices)}, all")
    return {op: [a for a in names if a in allowed(op)] for op in ops}


def _dtype(parser, text: str, ops: list[str]) -> str:
    """--dtype, checked against the collectives that reduce."""
    if text not in DTYPES:
        parser.error(f"argument --dtype: {text!r} is not supported; allowed: "
                     f"{', '.join(DTYPES)}")

    for op in (op for op in ops if CONVENTIONS[op].reduces):
        if text == "bool":  # allreduce sums bools as int32 (as psum): not a bool buffer
            parser.error(f"argument --dtype: bool cannot be reduced by --op {op} in its own "
                         "dtype (sums of bools are int32)")
        try:
            check_op_dtype(op, op, "sum", text)
        except TypeError as error:
            parser.error(f"argument --dtype: {text} cannot be reduced by --op {op} "
                         f"({error})")
    return text


def _ranks(parser, args) -> Ranks:
    """The devices to run on, or a parser error saying why there are not enough."""
    if args.emulate:
        return Ranks(args.emulate, (jax.local_devices()[0],), emulated=True)
    backend = jax.default_backend()
    available = jax.devices() if jax.process_count() > 1 else jax.local_devices()
    if jax.process_count() > 1 and args.devices not in (None, len(available)):
        parser.error(f"argument --devices: across {jax.process_count()} processes the "
                     f"benchmark runs on all {len(available)} devices (a smaller mesh would "
                     f"leave some processes out)")
    one_process_cpu = backend == "cpu" and jax.process_count() == 1  # fake devices: 8
    wanted = args.devices or (8 if one_process_cpu else len(available))
    if min(wanted, len(available)) < 2:
        parser.error(f"collectives need at least two devices; {min(wanted, len(available))} "
                     f"{backend} device ({available[0].device_kind}) here. Pass --emulate N "
                     f"to run N ranks emulated with jax.vmap on one device ({EMULATION_NOTE})")
    if wanted > len(available):
        started = " (JAX was started before this run)" if backend == "cpu" else ""
        parser.error(f"argument --devices: {wanted} wanted but there are {len(available)} "
                     f"{backend} devices{started}; allowed: 2..{len(available)}")
    return Ranks(wanted, tuple(available[:wanted]))


def main(argv=None, prog: str = "python -m jaxcoll bench") -> int:
    """Run the sweep, print the table; exit status 1 if any algorithm gave a wrong result."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser(prog)
    args = parser.parse_args(argv)
    sizes = _sizes(parser, args)
    _counts(parser, args)
    for flag in ("json", "csv", "plot"):  # before the sweep, not after it
        writable(parser, f"--{flag}", getattr(args, flag))
    if not args.emulate:
        start_jax(args.devices or 8)
    ops = ops_arg(parser, args.op)
    algorithms = _algorithms(parser, ops, args.algorithms, bool(args.emulate))
    dtype = _dtype(parser, args.dtype, ops)
    ranks = _ranks(parser, args)
    if not 0 <= args.root < ranks.n:
        parser.error(f"argument --root: {args.root} is out of range; allowed: "
                     f"0..{ranks.n - 1}")
    compress = _compress(parser, args, ops, dtype)
    meta = environment(ranks, argv)
    # Across processes every one measures (and results are gathered); process 0 reports.
    say = print if _leader() else (lambda *_, **__: None)
    say(header(meta, ops, dtype, args.iters, args.warmup, compress), flush=True)
    results = _run(ops, sizes, algorithms, ranks, dtype, args, say, compress)
    wrong = sum(r.wrong for r in results)
    say(f"# #wrong in all: {wrong} {'OK' if wrong == 0 else 'FAILED'}", flush=True)
    if _leader():
        _write_outputs(args, meta, results)
    return 1 if wrong else 0


def _leader() -> bool:
    return jax.process_index() == 0


def _compress(parser, args, ops: list[str], dtype: str) -> Compress | None:
    """--compress, checked against the ops, the dtype and the processes."""
    if not args.compress:
        return None
    other = [op for op in ops if not RECORDS[op].compressible]
    if other or dtype != "float32" or jax.process_count() > 1:
        parser.error(f"argument --compress: takes --op allreduce, reduce_scatter or allgather "
                     f"(not {', '.join(other) or 'these'}), --dtype float32 (got {dtype}) "
                     "and one process")
    return Compress(args.compress)


def _run(ops, sizes, algorithms, ranks: Ranks, dtype: str, args, say=print,
         compress: Compress | None = None) -> list[Result]:
    """Every (op, size), ``say``ing each size's lines as soon as they are measured."""
    progress = Progress(len(ops) * len(sizes) * (args.iters + 1),
                        enabled=not args.quiet and say is print)
    results = []
    for op in ops:
        for size in sizes:
            progress.start(f"{op} {format_size(size)}")
            if compress is None:
                point = run_point(op, size, algorithms[op], ranks, dtype, args.root,
                                  args.iters, args.warmup, progress.tick)
            else:
                point = run_compressed_point(op, size, algorithms[op], ranks, compress,
                                             args.iters, args.warmup, progress.tick)
            progress.clear()
            say("\n".join(table_line(r, compress is not None) for r in point), flush=True)
            if compress is None and "auto" in algorithms[op]:
                say(auto_line(point, dtype), flush=True)
            results += point
    progress.clear()
    return results


def auto_line(point: list[Result], dtype: str) -> str:
    """'# auto ran X: ...': what auto chose at this point, and over the fastest's time (of the
    others timed in the same run, xla left out) that of X's line and of auto's own (the same
    program as X's: their difference is the run's noise)."""
    auto = next(r for r in point if r.algorithm == "auto")
    others = [r for r in point if r.algorithm not in ("auto", "xla")]
    itemsize = jnp.dtype(dtype).itemsize
    _, elements, _ = layout(auto.op, auto.size, itemsize, auto.ranks)
    chosen = choose(auto.op, auto.ranks, elements * itemsize)
    if not others:
        return f"# auto ran {chosen}"
    fastest = min(others, key=lambda r: r.median)
    picked = next((f"{r.median / fastest.median:.2f}" for r in others if r.algorithm == chosen),
                  "?")
    return (f"# auto ran {chosen}: its line x{picked} the fastest ({fastest.algorithm}, "
            f"{fastest.median * 1e6:.1f} us), auto's line x{auto.median / fastest.median:.2f}")


def _write_outputs(args, meta: dict, results: list[Result]) -> None:
    """--json, --csv and --plot, each saying where it wrote."""
    for path, write in ((args.json, write_json), (args.csv, write_csv), (args.plot, plot)):
        if path:
            write(path, meta, results)
            print(f"# wrote {path}")


if __name__ == "__main__":
    sys.exit(main(prog="python -m jaxcoll.tools.bench"))
