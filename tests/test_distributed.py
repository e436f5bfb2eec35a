"""Several processes (jax.distributed, gloo on CPU) under ``python -m jaxcoll.tools.launch``.

Every test runs the launcher in a subprocess: the processes it starts have their own fake CPU
devices and join one mesh; this pytest process's JAX is not involved. The ones that compile
collectives are marked subprocess_jax (CI's newest-jax pass runs only the 2 x 4 main job).
"""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from jaxcoll.tools import launch
from jaxcoll.tools.check import cases

PYTHON = sys.executable
# The tests' own coordinator variables must not leak in from a surrounding launch.
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}


def run_launcher(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "jaxcoll.tools.launch", *args], capture_output=True,
                          text=True, timeout=timeout, env=CLEAN_ENV)


def script(tmp_path, text: str) -> str:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(text))
    return str(path)


def rank_lines(output: str, rank: int, native: bool = False) -> list[str]:
    """What rank ``rank``'s Python printed (``native``: what native code wrote after
    ``initialize()``), without the launcher's prefix."""
    prefix = f"[rank {rank} native] " if native else f"[rank {rank}] "
    return [line[len(prefix):] for line in output.splitlines() if line.startswith(prefix)]


def test_each_process_gets_its_rank_and_the_meeting_point(tmp_path):
    show = script(tmp_path, """
        import os, sys
        keys = ["JAX_PROCESS_ID", "JAX_NUM_PROCESSES", "JAX_NUM_CPU_DEVICES",
                "JAX_COORDINATOR_ADDRESS", "JAX_PLATFORMS", "JAX_CPU_COLLECTIVES_IMPLEMENTATION"]
        print(*[os.environ[k] for k in keys])
        print("to stderr", file=sys.stderr)
    """)
    done = run_launcher(["--nproc", "3", "--devices-per-proc", "2", "--", PYTHON, show])
    assert done.returncode == 0, done.stderr
    addresses = set()
    for rank in range(3):
        (line,) = rank_lines(done.stdout, rank)
        process_id, count, devices, address, platform, collectives = line.split()
        assert (process_id, count, devices) == (str(rank), "3", "2")
        assert (platform, collectives) == ("cpu", "gloo")
        assert re.fullmatch(r"127\.0\.0\.1:\d+", address)
        addresses.add(address)
        assert rank_lines(done.stderr, rank) == ["to stderr"]
    assert len(addresses) == 1  # one coordinator for all


def test_native_writes_cannot_split_a_line_python_prints(tmp_path):
    """gloo's C++ writes its lines a few characters per write(2), from several threads, to the
    descriptors Python's print uses too. After initialize() they are on pipes of their own."""
    pieces = script(tmp_path, """
        import logging, os, sys
        handler = logging.StreamHandler(sys.stderr)  # made before, as JAX makes its own
        import jaxcoll.tools.distributed
        jaxcoll.tools.distributed.initialize()
        os.write(1, b"native out, ")  # a native line, unfinished...
        print("python line")          # ...while Python prints one
        os.write(1, b"its end\\n")
        os.write(2, b"native err, ")
        print("python error line", file=sys.stderr)
        handler.emit(logging.makeLogRecord({"msg": "logged"}))
        os.write(2, b"its end\\n")
    """)
    done = run_launcher(["--nproc", "1", "--devices-per-proc", "1", "--", PYTHON, pieces])
    assert done.returncode == 0, done.stderr[-3000:]
    assert rank_lines(done.stdout, 0) == ["python line"]
    assert rank_lines(done.stdout, 0, native=True) == ["native out, its end"]
    python_err = {"python error line", "logged"}  # (JAX may warn there too, on other versions)
    assert [line for line in rank_lines(done.stderr, 0) if line in python_err] == [
        "python error line", "logged"]
    assert "native err, its end" in rank_lines(done.stderr, 0, native=True)


def test_first_failure_stops_the_others_and_gives_its_code(tmp_path):
    fail = script(tmp_path, """
        import os, sys, time
        if os.environ["JAX_PROCESS_ID"] == "1":
            sys.exit(3)
        time.sleep(120)  # the others would wait for rank 1 forever
    """)
    start = time.monotonic()
    done = run_launcher(["--nproc", "3", "--grace", "1", "--", PYTHON, fail])
    assert done.returncode == 3
    assert time.monotonic() - start < 30
    assert "rank 1 exited with code 3; stopping the other 2 processes" in done.stderr


@pytest.mark.parametrize("argv, message", [
    ([], "no command given"),
    (["--nproc", "0", "--", "true"], "--nproc must be >= 1, got 0"),
    (["--devices-per-proc", "0", "--", "true"], "--devices-per-proc must be >= 1, got 0"),
    (["--timeout", "0", "--", "true"], "--timeout > 0"),
])
def test_bad_arguments_exit_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        launch.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_hung_run_times_out(tmp_path):
    hang = script(tmp_path, "import time; time.sleep(120)")
    done = run_launcher(["--nproc", "2", "--timeout", "2", "--grace", "1", "--", PYTHON, hang])
    assert done.returncode == 124
    assert "timed out after 2 s" in done.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has exited. (Only the launcher could reap it.)
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_killed_rank_is_named_and_nothing_is_left_behind(tmp_path):
    """The issue's fault test: rank 1 dies by SIGKILL in the middle of a run of collectives."""
    pids = tmp_path / "pids"
    pids.mkdir()
    faulty = script(tmp_path, f"""
        import os, signal, subprocess, time
        import jaxcoll.tools.distributed
        jaxcoll.tools.distributed.initialize()
        import jax, jaxcoll, numpy as np
        from jax.sharding import Mesh, PartitionSpec as P

        rank = jax.process_index()
        child = subprocess.Popen(["sleep", "300"])  # a rank's own child must go too
        with open(os.path.join({str(pids)!r}, str(rank)), "w") as f:
            f.write(f"{{os.getpid()}} {{child.pid}}")
        mesh = Mesh(np.array(jax.devices()), ("i",))
        step = jax.jit(jax.shard_map(lambda x: jaxcoll.ring_allreduce(x, "i"), mesh=mesh,
                                     in_specs=P("i"), out_specs=P("i"), check_vma=False))
        x = np.ones((jax.device_count(), 4), np.float32)
        for i in range(1000000):
            x = np.asarray(step(x).addressable_shards[0].data).repeat(jax.device_count(), 0)
            if rank == 1 and i == 20:
                with open(os.path.join({str(pids)!r}, "killed_at"), "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = run_launcher(["--nproc", "2", "--devices-per-proc", "2", "--", PYTHON, faulty],
                        timeout=120)
    ended = time.time()
    assert done.returncode == 128 + signal.SIGKILL, done.stderr[-3000:]
    assert "rank 1 was killed by SIGKILL; stopping the other 1 process" in done.stderr
    detected_in = ended - float((pids / "killed_at").read_text())
    assert detected_in < 60
    print(f"dead rank detected and every process stopped {detected_in:.2f} s after the kill")
    left = [pid for rank in "01" for pid in map(int, (pids / rank).read_text().split())
            if _alive(pid)]
    assert left == [], f"stray processes: {left}"


def _expected_rows(counts: int) -> int:
    return counts * len(cases(8))  # hierarchical on 2 x 4, its allreduce on 2 x 2 x 2 too


@pytest.mark.parametrize("nproc, devices, counts", [
    pytest.param(2, 4, "7,1000", marks=pytest.mark.subprocess_jax),
    pytest.param(4, 2, "7", marks=pytest.mark.subprocess_jax)])
def test_every_algorithm_matches_the_builtin_on_every_process(nproc, devices, counts):
    """The main job across processes: n = 8, every primitive x algorithm (hierarchical on the
    (process, local device) mesh), each process checking the ranks it holds. (Each process
    compiles every program: 4 x 2 runs one size, 2 x 4 three.)"""
    done = run_launcher(["--nproc", str(nproc), "--devices-per-proc", str(devices), "--",
                         PYTHON, "-m", "jaxcoll", "--counts", counts], timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    checks = _expected_rows(len(counts.split(",")))
    for rank in range(nproc):
        summary = rank_lines(done.stdout, rank)[-1]
        assert summary.endswith(f"process {rank} of {nproc}, 8 devices: {checks} of {checks} "
                                f"checks match the xla reference exactly"), summary
    table = rank_lines(done.stdout, 0)
    assert any(re.match(r"allreduce\s+hierarchical\s+8\s", line) for line in table)


def test_hierarchical_mesh_puts_the_inner_level_inside_a_process(tmp_path):
    show = script(tmp_path, """
        import jaxcoll.tools.distributed
        jaxcoll.tools.distributed.initialize()
        from jaxcoll.tools.check import two_level_mesh
        mesh = two_level_mesh(8)
        print(mesh.axis_names, [[d.process_index for d in row] for row in mesh.devices])
    """)
    done = run_launcher(["--nproc", "4", "--devices-per-proc", "2", "--", PYTHON, show])
    assert done.returncode == 0, done.stderr[-3000:]
    assert rank_lines(done.stdout, 0) == [
        "('outer', 'inner') [[0, 0], [1, 1], [2, 2], [3, 3]]"]


def test_gather_keeps_every_dtype_bit_for_bit(tmp_path):
    """float64 host times (which JAX without x64 would round to float32: 128 s apart near
    2026), int64 beyond int32 and bools arrive as sent, scalars as a row per process."""
    show = script(tmp_path, """
        import numpy as np
        import jaxcoll.tools.distributed as d
        d.initialize()
        import jax
        me, now = jax.process_index(), 1_764_900_000.123456  # a host time in late 2025
        sent = [[now + k * 1e-3, now + k * 1e-3 + 0.5] for k in range(2)]  # process k's
        times, big = d.gather(sent[me]), d.gather(np.int64(2**40 + me))
        flags = d.gather(np.array([True, me == 1]))
        assert times.dtype == np.float64 and times.tolist() == sent
        assert big.tolist() == [2**40, 2**40 + 1]
        assert flags.dtype == bool and flags.tolist() == [[True, False], [True, True]]
        print("gathered", times.shape, big.shape, big.dtype)
    """)
    done = run_launcher(["--nproc", "2", "--devices-per-proc", "1", "--", PYTHON, show])
    assert done.returncode == 0, done.stderr[-3000:]
    assert rank_lines(done.stdout, 1) == ["gathered (2, 2) (2,) int64"]


def test_benchmark_runs_across_processes_and_rank_0_reports(tmp_path):
    out = tmp_path / "bench.json"
    done = run_launcher(["--nproc", "2", "--devices-per-proc", "4", "--", PYTHON, "-m",
                         "jaxcoll.tools.bench", "-b", "1K", "-e", "4K", "-f", "4", "--op",
                         "allreduce,allgather", "--algorithms", "ring", "--iters", "3", "-q",
                         "--json", str(out)])
    assert done.returncode == 0, done.stderr[-3000:]
    # Rank 0 speaks for everyone: rank 1's Python prints nothing. (gloo's C++ prints its
    # connection lines on every rank, from several threads at once, in pieces: the launcher
    # streams them apart, as [rank k native], so they cannot land among these lines.)
    assert rank_lines(done.stdout, 1) == []
    report = json.loads(out.read_text())
    assert report["meta"]["processes"] == 2 and report["meta"]["devices"] == 8
    expected = {(op, name, size) for op in ("allreduce", "allgather")
                for name in ("xla", "ring") for size in (1024, 4096)}
    assert {(r["op"], r["algorithm"], r["size"]) for r in report["results"]} == expected
    assert all(r["wrong"] == 0 and len(r["times_us"]) == 3 for r in report["results"])
    # Rank 0's report, every line whole: the header, one table row per result, the verdict.
    lines = rank_lines(done.stdout, 0)
    assert "in 2 processes" in lines[0]
    assert lines[-2:] == ["# #wrong in all: 0 OK", f"# wrote {out}"]
    rows = [line.split() for line in lines if not line.startswith("#")]
    assert all(len(row) == 12 and row[2] == "float32" and row[10] == "0" for row in rows), rows
    redop = {"sum": "allreduce", "none": "allgather"}
    assert sorted((redop[row[3]], row[5], int(row[0])) for row in rows) == sorted(expected)


@pytest.mark.parametrize("command", [["jaxcoll", "--ranks", "4"],
                                     ["jaxcoll.tools.bench", "--devices", "4", "-b", "1K", "-e",
                                      "1K"]])
def test_a_mesh_that_leaves_a_process_out_is_refused(command):
    done = run_launcher(["--nproc", "2", "--devices-per-proc", "4", "--", PYTHON, "-m",
                         *command])
    assert done.returncode == 2
    assert "across 2 processes" in done.stderr


def test_alone_initialize_joins_nothing():
    code = ("import jaxcoll.tools.distributed as d; print(d.initialize()); import jax; "
            "print(jax.process_count())")
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(CLEAN_ENV, JAX_PLATFORMS="cpu"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1"]


def test_initialize_after_jax_started_says_so_under_a_launcher(tmp_path):
    late = script(tmp_path, """
        import jax
        jax.devices()
        import jaxcoll.tools.distributed
        jaxcoll.tools.distributed.initialize()
    """)
    done = run_launcher(["--nproc", "1", "--", PYTHON, late])
    assert done.returncode == 1
    assert "must run before any other JAX work" in done.stderr
