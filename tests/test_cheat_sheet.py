"""The cheat-sheet of tutorials/README.md: each collective x algorithm's messages, bytes sent
and bytes reduced (per N) as the cost model reads them off the schedules, for n = 2 ... 32;
every registered one-level algorithm has its row. Plain arithmetic, no JAX compile."""

import math
import re
from pathlib import Path

import pytest

import jaxcoll
from jaxcoll.ir.families import SCHEDULES, two_level

pytestmark = pytest.mark.jax_free  # runs no JAX (schedules, models, pages): the same on every jax

SHEET = (Path(__file__).resolve().parents[1] / "tutorials" / "README.md").read_text()
ROWS = [row.strip("|").split("|") for row in
        SHEET[SHEET.index("| collective | algorithm |"):].split("\n\n")[0].splitlines()[2:]]
NS = (2, 4, 8, 16, 32)
N = 1 << 20


def value(entry: str, n: int) -> float | None:
    """An entry at n ranks: ``2(n-1)/n``, ``lg + n - 1``, ``4 lg - 4 (n ≥ 4)`` (None below 4),
    ``8 at n = 8`` (None at any other n)."""
    entry = entry.strip()
    if (at := re.fullmatch(r"(.*) at n = (\d+)", entry)):
        return value(at[1], n) if n == int(at[2]) else None
    if (least := re.fullmatch(r"(.*) \(n ≥ (\d+)\)", entry)):
        return value(least[1], n) if n >= int(least[2]) else None
    assert re.fullmatch(r"[\dnlg+\-/() ]+", entry), entry
    python = re.sub(r"(\d|\))\s*(\(|lg|n)", r"\1*\2", entry)  # 2(n-1) -> 2*(n-1), 2 lg -> 2*lg
    return eval(python, {"__builtins__": {}}, {"n": n, "lg": math.log2(n)})  # noqa: S307


def test_every_one_level_algorithm_has_a_row():
    listed = {(p.strip(), a.strip()) for p, a, *_ in ROWS}
    registered = {(p, a) for p, names in SCHEDULES.items() for a in names if not two_level(p, a)}
    assert listed == registered and len(listed) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0].strip()}-{r[1].strip()}" for r in ROWS])
def test_the_entries_are_what_the_schedules_cost(row):
    primitive, algorithm, messages, sent, reduced = (cell.strip() for cell in row)
    checked = 0
    for n in NS:
        cost = jaxcoll.cost(jaxcoll.schedule(primitive, algorithm, n), N, alpha=1.0, beta=0.0)
        for entry, got in ((messages, cost.messages), (sent, cost.bytes_sent / N),
                           (reduced, cost.bytes_reduced / N)):
            want = value(entry, n)
            if want is not None:
                assert got == pytest.approx(want, abs=1e-9), (n, entry)
                checked += 1
    assert checked >= 3
