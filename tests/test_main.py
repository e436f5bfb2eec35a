"""The main job (python -m jaxcoll) runs, prints its table and reports mismatches by exit code."""

import subprocess
import sys


def run_main(*args):
    return subprocess.run([sys.executable, "-m", "jaxcoll", *args], capture_output=True,
                          text=True, timeout=300)


def test_main_job_checks_every_algorithm():
    result = run_main("--ranks", "3", "--counts", "0,5")
    assert result.returncode == 0, result.stderr
    table = result.stdout
    for primitive in ("allreduce", "reduce_scatter", "allgather"):
        for algorithm in ("ring", "naive"):
            assert f"{primitive:<16}{algorithm:<12}   3" in table
    assert "12 of 12 checks match the xla reference exactly" in table


def test_main_job_rejects_bad_arguments():
    result = run_main("--ranks", "99")
    assert result.returncode == 2
    assert "--ranks 99: only 8 devices are available" in result.stderr
