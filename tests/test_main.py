"""The main job (python -m jaxcoll) runs, prints its table and reports mismatches by exit code."""

import subprocess
import sys

from jaxcoll.families import SCHEDULES


def run_main(*args):
    return subprocess.run([sys.executable, "-m", "jaxcoll", *args], capture_output=True,
                          text=True, timeout=300)


def test_main_job_checks_every_algorithm():
    result = run_main("--ranks", "3", "--counts", "0,5")
    assert result.returncode == 0, result.stderr
    table = result.stdout
    pairs = [(p, a) for p, algorithms in SCHEDULES.items() for a in algorithms]
    for primitive, algorithm in pairs:
        assert f"{primitive:<16}{algorithm:<22}   3" in table
    checks = 2 * len(pairs)
    assert f"{checks} of {checks} checks match the xla reference exactly" in table


def test_main_job_rejects_bad_arguments():
    result = run_main("--ranks", "99")
    assert result.returncode == 2
    assert "--ranks 99: only 8 devices are available" in result.stderr
