"""The nccl-tests style benchmark: conventions, inputs, sizes, the command line, a tiny sweep."""

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcoll.tools import bench, console
from jaxcoll.ir.families import COLLECTIVES

ROOT = Path(__file__).resolve().parents[1]
TINY = ["-b", "1K", "-e", "4K", "-f", "4", "--op", "allgather", "--algorithms", "ring",
        "-n", "2", "-w", "1", "-q"]  # 2 sizes x (xla, ring)


# ----------------------------------------------------------------------------- conventions

@pytest.mark.parametrize("op, factor", [
    ("allreduce", 2 * 7 / 8), ("reduce_scatter", 7 / 8), ("allgather", 7 / 8),
    ("alltoall", 7 / 8), ("gather", 7 / 8), ("scatter", 7 / 8), ("broadcast", 1.0),
    ("reduce", 1.0)])
def test_busbw_factors_are_nccl_tests(op, factor):
    assert bench.busbw_factor(op, 8) == pytest.approx(factor)


def test_every_collective_has_a_convention():
    assert set(COLLECTIVES) <= set(bench.CONVENTIONS)


def test_the_axis_is_bench_axis_and_axis_its_deprecated_alias():
    """check.py's AXIS is another axis; bench's old name reads the new one, warning."""
    with pytest.warns(DeprecationWarning, match="bench.AXIS is renamed .*bench.BENCH_AXIS"):
        assert bench.AXIS == bench.BENCH_AXIS == "i"


@pytest.mark.parametrize("op, size, expected", [
    ("allreduce", 1024, (256, 256, 1024)),  # S = the buffer
    ("reduce_scatter", 1024, (32, 256, 1024)),  # S = the input; count = one block
    ("allgather", 1024, (32, 32, 1024)),  # S = the output; input = one block
    ("gather", 1000, (31, 31, 992)),  # rounded down to whole blocks
    ("scatter", 4, (1, 8, 32)),  # at least one element per block
    ("broadcast", 2, (1, 1, 4)),
])
def test_layout_follows_nccl_tests(op, size, expected):
    assert bench.layout(op, size, 4, 8) == expected


def test_bandwidths_from_size_and_median():
    result = bench.Result("allreduce", "ring", 8_000, 2_000, "float32", -1, 8, 0,
                          (1e-6, 2e-6, 3e-6), 1e-6)
    assert result.median == 2e-6
    assert result.algbw == pytest.approx(4.0)  # 8000 B / 2 us = 4 GB/s
    assert result.busbw == pytest.approx(4.0 * 2 * 7 / 8)
    assert result.vs_xla == pytest.approx(2.0)
    assert result.redop == "sum"


# ----------------------------------------------------------------------------- inputs

def _sums_in_orders(values: np.ndarray, dtype) -> list[np.ndarray]:
    """Sums over the ranks in ``dtype``: forwards, backwards and as a pairwise tree."""
    def fold(rows):
        total = rows[0]
        for row in rows[1:]:
            total = (total + row).astype(dtype)
        return total

    def tree(rows):
        while len(rows) > 1:
            rows = [(rows[i] + rows[i + 1]).astype(dtype) if i + 1 < len(rows) else rows[i]
                    for i in range(0, len(rows), 2)]
        return rows[0]

    rows = list(values)
    return [fold(rows), fold(rows[::-1]), tree(rows)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int8", "uint8", "int32"])
@pytest.mark.parametrize("n", [2, 8, 40])
def test_verifiable_sums_are_exact_in_any_order(dtype, n):
    values = bench.verifiable_values(n, 2000, dtype)
    assert values.shape == (n, 2000) and values.dtype == jnp.dtype(dtype)
    exact = values.astype(np.int64).sum(axis=0)
    assert np.abs(values.astype(np.int64)).max() > 0
    for total in _sums_in_orders(values, jnp.dtype(dtype)):
        np.testing.assert_array_equal(total.astype(np.int64), exact)


def test_verifiable_bool_values():
    values = bench.verifiable_values(4, 100, "bool")
    assert values.dtype == np.bool_ and values.any() and not values.all()


def test_count_wrong_counts_differing_elements():
    x = jnp.arange(12.0).reshape(3, 4)
    programs = {"xla": lambda v: v * 2, "good": lambda v: v + v,
                "bad": lambda v: (v * 2).at[1, 2].add(1), "shape": lambda v: v[:1]}
    assert bench.count_wrong(programs, x) == {"xla": 0, "good": 0, "bad": 1, "shape": 12}


# ----------------------------------------------------------------------------- sizes

@pytest.mark.parametrize("text, nbytes", [
    ("64", 64), ("64B", 64), ("1K", 1024), ("1k", 1024), ("1KiB", 1024), ("1KB", 1024),
    ("16M", 16 << 20), ("16MiB", 16 << 20), ("1G", 1 << 30), ("1.5K", 1536)])
def test_parse_size(text, nbytes):
    assert console.parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["", "abc", "1iB", "-1K", "1.3", "1T", "K"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="size|whole"):
        console.parse_size(text)


def test_sweep():
    assert bench.sweep(1 << 10, 16 << 20, 4) == [1 << (10 + 2 * k) for k in range(8)]
    assert bench.sweep(64, 64, 2) == [64]
    assert bench.sweep(1024, 5000, 2) == [1024, 2048, 4096]
    sizes = bench.sweep(10, 1000, 1.5)
    assert sizes[0] == 10 and sizes[-1] <= 1000 and sizes == sorted(set(sizes))


@pytest.mark.parametrize("low, high, factor, message", [
    (2048, 1024, 2, "larger than max"), (1024, 2048, 1, "must be > 1"),
    (1024, 2048, 0.5, "must be > 1"), (0, 1024, 2, "positive"), (-8, 1024, 2, "positive"),
    (1, 1 << 30, 1.01, "more than 200 steps")])
def test_sweep_rejects(low, high, factor, message):
    with pytest.raises(ValueError, match=message):
        bench.sweep(low, high, factor)


def test_format_size():
    assert [console.format_size(s) for s in (64, 1024, 1536, 16 << 20)] == [
        "64 B", "1 KiB", "1.5 KiB", "16 MiB"]


# ----------------------------------------------------------------------------- command line

@pytest.mark.parametrize("argv, words", [
    (["-b", "16M", "-e", "1K"], ["-b/-e/-f", "16777216", "larger than max"]),
    (["-f", "1"], ["-b/-e/-f", "-f 1.0", "> 1"]),
    (["-b", "0"], ["-b/-e/-f", "positive"]),
    (["-b", "lots"], ["-b/-e/-f", "'lots'", "1KiB"]),
    (["--op", "allsum"], ["--op", "'allsum'", "allowed: allreduce", "scatter"]),
    (["--algorithms", "fancy"], ["--algorithms", "'fancy'", "allreduce", "allowed:", "ring"]),
    (["--op", "allgather", "--algorithms", "double_tree"], ["'double_tree'", "allgather"]),
    (["--dtype", "float64"], ["--dtype", "'float64'", "allowed: float32"]),
    (["--dtype", "bool"], ["--dtype", "bool", "cannot be reduced", "allreduce"]),
    (["--devices", "64"], ["--devices", "64", "8"]),
    (["--devices", "1"], ["at least two devices", "--emulate"]),
    (["--devices", "4", "--root", "4"], ["--root", "4", "0..3"]),
    (["--iters", "0"], ["--iters", ">= 1"]),
    (["--emulate", "1"], ["--emulate", ">= 2"]),
    (["--devices", "4", "--emulate", "4"], ["not allowed with"]),
    (["--emulate", "4", "--algorithms", "hierarchical"],
     ["'hierarchical'", "two-level algorithms cannot be emulated"]),
    (["--compress", "int8", "--op", "broadcast"], ["--compress", "allreduce", "broadcast"]),
    (["--compress", "int4"], ["--compress", "'int4'", "int8"]),
])
def test_bad_arguments_exit_2_with_a_clear_message(argv, words, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "Traceback" not in err and err.count("\n") == 1
    assert "(see python -m jaxcoll bench --help)" in err
    for word in words:
        assert word in err, err


def test_algorithms_apply_to_the_ops_that_have_them():
    chosen = bench._algorithms(bench._parser(), ["allreduce", "broadcast"], "ring,binomial,xla",
                               emulated=False)
    assert chosen == {"allreduce": ["ring"], "broadcast": ["binomial"]}


def test_plot_without_matplotlib_is_refused_before_running(monkeypatch, capsys):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else find_spec(name, *a))
    with pytest.raises(SystemExit) as exit_:
        bench.main([*TINY, "--plot", "sweep.png"])
    assert exit_.value.code == 2
    assert "pip install 'jaxcoll[viz]'" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["-m", "jaxcoll.tools.bench"],
                                     [str(ROOT / "bench" / "collectives.py")]])
def test_entry_points_reject_a_bad_op(command):
    done = subprocess.run([sys.executable, *command, "--op", "nope"], capture_output=True,
                          text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=120)
    assert done.returncode == 2 and "'nope' is not a collective" in done.stderr
    assert "Traceback" not in done.stderr


# ----------------------------------------------------------------------------- sweeps

def _table_rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line and not line.startswith("#")]


def test_tiny_sweep_end_to_end(tmp_path, capsys):
    json_path, csv_path = tmp_path / "r.json", tmp_path / "r.csv"
    assert bench.main([*TINY, "--devices", "4", "--json", str(json_path),
                       "--csv", str(csv_path)]) == 0
    out = capsys.readouterr().out
    assert "jax " in out and "XLA_FLAGS=" in out and "4 cpu devices" in out
    rows = _table_rows(out)
    assert [(r[0], r[1], r[5], r[10]) for r in rows] == [
        ("1024", "64", "xla", "0"), ("1024", "64", "ring", "0"),
        ("4096", "256", "xla", "0"), ("4096", "256", "ring", "0")]
    assert all(r[2] == "float32" and r[3] == "none" and r[4] == "-1" for r in rows)
    assert "#wrong in all: 0 OK" in out

    saved = json.loads(json_path.read_text())
    meta = saved["meta"]
    assert meta["backend"] == "cpu" and meta["ranks"] == 4 and meta["emulated"] is False
    assert {"jax", "jaxlib", "device_kind", "xla_flags", "command"} <= set(meta)
    assert [(r["algorithm"], r["size"], r["wrong"]) for r in saved["results"]] == [
        ("xla", 1024, 0), ("ring", 1024, 0), ("xla", 4096, 0), ("ring", 4096, 0)]
    first = saved["results"][0]
    assert len(first["times_us"]) == 2 and first["vs_xla"] == 1.0
    assert first["time_us_min"] <= first["time_us_median"] <= first["time_us_max"]

    table = list(csv.DictReader(csv_path.open()))
    assert len(table) == 4 and table[1]["algorithm"] == "ring"
    assert table[0]["emulated"] == "False" and table[0]["backend"] == "cpu"


def test_compressed_sweep_reports_errors_within_the_bound(capsys):
    """--compress int8: each algorithm compressed beside the uncompressed xla; no value outside
    the error bound; busbw on the encoded bytes; the RMS error column, two_shot's below the
    ring's."""
    assert bench.main(["-b", "4K", "-e", "4K", "--op", "allreduce", "--algorithms",
                       "ring,two_shot", "-n", "2", "-w", "1", "-q", "--devices", "8",
                       "--compress", "int8"]) == 0
    out = capsys.readouterr().out
    assert "compressed (int8, blocks of 128)" in out and "#wrong in all: 0 OK" in out
    rows = {r[5]: r for r in _table_rows(out)}
    assert set(rows) == {"xla", "ring/int8", "two_shot/int8"}
    for name in ("ring/int8", "two_shot/int8"):  # 1024 values: 8 blocks, 1056 bytes encoded
        algbw, time_us = float(rows[name][8]), float(rows[name][6])
        assert abs(algbw - 1056 / time_us / 1e3) / algbw < 0.02
    assert 0 < float(rows["two_shot/int8"][12]) < float(rows["ring/int8"][12]) < 0.05


def test_wrong_results_are_reported_and_fail(monkeypatch, capsys):
    monkeypatch.setattr(bench, "count_wrong",
                        lambda programs, x: {name: 3 * (name == "ring") for name in programs})
    assert bench.main([*TINY, "--devices", "2"]) == 1
    out = capsys.readouterr().out
    assert [r[10] for r in _table_rows(out) if r[5] == "ring"] == ["3", "3"]
    assert "#wrong in all: 6 FAILED" in out


def test_emulated_sweep_is_labelled(tmp_path, capsys):
    json_path, csv_path = tmp_path / "e.json", tmp_path / "e.csv"
    assert bench.main([*TINY, "--emulate", "4", "--json", str(json_path),
                       "--csv", str(csv_path)]) == 0
    out = capsys.readouterr().out
    assert "EMULATED" in out and "not links" in out
    assert [r[10] for r in _table_rows(out)] == ["0"] * 4
    assert json.loads(json_path.read_text())["meta"]["emulated"] is True
    assert all(row["emulated"] == "True" for row in csv.DictReader(csv_path.open()))


# ----------------------------------------------------------------------------- plot, progress

def _result(algorithm, size, seconds, wrong=0):
    return bench.Result("allreduce", algorithm, size, size // 4, "float32", -1, 8, wrong,
                        (seconds,), 1e-3 * size / 1024)


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    results = [_result(a, size, t * size / 1024, wrong=int(a == "ring" and size > 1024))
               for size in (1024, 4096, 16384) for a, t in (("xla", 1e-3), ("ring", 3e-3))]
    meta = dict(ranks=8, backend="cpu", device_kind="cpu", emulated=True, jax="0")
    path = tmp_path / "sweep.png"
    bench.plot(str(path), meta, results)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_progress_prints_labels_when_not_a_terminal():
    stream = io.StringIO()
    progress = console.Progress(4, stream=stream)
    progress.start("allreduce 1 KiB")
    progress.tick()
    progress.tick()
    progress.start("allreduce 4 KiB")
    assert stream.getvalue().splitlines() == ["[0/4] allreduce 1 KiB", "[2/4] allreduce 4 KiB"]


def test_progress_bar_redraws_in_place_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    progress = console.Progress(2, stream=stream, width=4)
    progress.start("allgather 1 KiB")
    progress.tick()
    progress.tick()
    progress.clear()
    shown = stream.getvalue()
    assert "\r[....] 0/2 allgather 1 KiB" in shown and "\r[####] 2/2" in shown
    assert shown.endswith("\r\033[K") and "\n" not in shown


# ----------------------------------------------------------------------------- memory

@pytest.mark.parametrize("algorithm", ["ring", "bidirectional_ring", "halving_doubling",
                                       "recursive_doubling"])
def test_allreduce_temporary_memory_is_at_most_twice_the_input(algorithm):
    """XLA's memory analysis of the compiled program (per device): the executor updates its
    buffer in place, so temporaries stay small (ring: a quarter of the input at n = 8)."""
    n, count = 8, 1 << 16
    ranks = bench.Ranks(n, tuple(jax.devices()[:n]))
    x = ranks.place(np.zeros((n, count), np.float32))
    memory = ranks.program("allreduce", algorithm, 0).lower(x).compile().memory_analysis()
    assert memory.argument_size_in_bytes == count * 4  # per device
    assert memory.temp_size_in_bytes <= 2 * count * 4
