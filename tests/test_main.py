"""The main job (python -m jaxcoll) runs, prints its table and reports mismatches by exit code;
on 8 ranks it checks the hierarchical allreduce on three levels too. The draw command takes
levels."""

import subprocess
import sys

import pytest

from jaxcoll.tools import check
from jaxcoll.tools.cli import draw_main
from jaxcoll.ir.families import SCHEDULES, two_level


def run_main(*args):
    return subprocess.run([sys.executable, "-m", "jaxcoll", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.subprocess_jax  # compiles every algorithm again (CI's main job runs it too)
def test_main_job_checks_every_algorithm():
    result = run_main("--ranks", "3", "--counts", "0,5")
    assert result.returncode == 0, result.stderr
    table = result.stdout
    pairs = [(p, a) for p, algorithms in SCHEDULES.items() for a in algorithms]
    for primitive, algorithm in pairs:
        assert f"{primitive:<16}{algorithm:<22}   3" in table
    checks = 2 * len(pairs)  # 3 ranks: no three levels
    assert len(check.cases(3)) == len(pairs)
    assert f"{checks} of {checks} checks match the xla reference exactly" in table


def test_main_job_rejects_bad_arguments():
    result = run_main("--ranks", "99")
    assert result.returncode == 2
    assert "argument --ranks: 99: only 8 devices are available" in result.stderr


def test_cases_add_three_levels_where_n_has_three_factors():
    """Every registered algorithm once, the hierarchical allreduce once more on 3 levels for
    8, 12 and 64 ranks (2 x 2 x 2, 2 x 2 x 3, 2 x 2 x 16), not for 5, 6 or 9; the table names
    those levels. (CI's main job and tests/test_distributed.py run them.)"""
    pairs = [(p, a) for p, algorithms in SCHEDULES.items() for a in sorted(algorithms)]
    for n in (5, 6, 9, 8, 12, 64):
        three = [(p, a) for p, a, levels in check.cases(n) if levels == 3]
        assert three == ([("allreduce", "hierarchical")] if n in (8, 12, 64) else []), n
        assert [(p, a) for p, a, levels in check.cases(n) if levels < 3] == pairs
        assert all(levels == 1 + two_level(p, a) for p, a, levels in check.cases(n) if levels < 3)
    assert [check.level_shape(n, 3) for n in (8, 12, 64, 5)] == [(2, 2, 2), (2, 2, 3),
                                                                 (2, 2, 16), (5, 1, 1)]
    assert check.level_shape(8) == (2, 4) and check.level_shape(1) == (1, 1)
    rows = [check.Row("allreduce", "hierarchical", 8, 4, 0.0),
            check.Row("allreduce", "hierarchical", 8, 4, 0.0, (2, 2, 2))]
    table = check.format_table(rows).splitlines()[2:]
    assert [line[16:42] for line in table] == [f"{'hierarchical':<22}   8",
                                               f"{'hierarchical 2x2x2':<22}   8"]


def test_draw_takes_the_levels_of_hierarchical(tmp_path, capsys):
    """--n 2,2,2: a three-level hierarchical schedule; not a number: the argument is named."""
    page = tmp_path / "levels.html"
    assert draw_main(["allreduce", "hierarchical", "--n", "2,2,2", "-o", str(page)]) == 0
    assert page.stat().st_size > 0 and "2x2x2" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        draw_main(["allreduce", "hierarchical", "--n", "2,x", "-o", str(page)])
    assert exited.value.code == 2
    assert "argument --n: must be an int or comma-separated ints, got '2,x'" in \
        capsys.readouterr().err
