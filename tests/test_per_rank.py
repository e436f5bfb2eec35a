"""The families in the per-rank form (jaxcoll/ir/per_rank.py): every registered schedule is
the very schedule the earlier builders stored (rounds, transfers in order, symmetries), held
against digests written before the rewrite (tests/registry_digests.py); and a family whose
ranks do not do what its declared symmetry says is refused."""

import json
import random

import pytest

from jaxcoll.ir import per_rank
from jaxcoll.ir.per_rank import as_soon_as_held
from jaxcoll.ir.schedules import ScheduleError, Transfer
from registry_digests import FILE, cases, digest

pytestmark = pytest.mark.jax_free  # schedules only: the same on every jax
EXPECTED = json.loads(FILE.read_text())


def test_every_registered_schedule_is_the_one_stored_before_the_rewrite():
    got = {key: digest(build()) for key, build in cases()}
    assert got.keys() == EXPECTED.keys()
    changed = sorted(key for key in got if got[key] != EXPECTED[key])
    assert not changed, f"{len(changed)} schedules changed, e.g. {changed[:8]}"


def _ring(n, chunk_of=lambda r, s, n: (r - s - 1) % n):
    return lambda r, s: [Transfer(r, (r + 1) % n, chunk_of(r, s, n), reduce=True)]


@pytest.mark.parametrize("n", [2, 5, 16, 17, 100])
def test_a_rotating_family_is_stored_as_rank_0s_sends_and_the_derived_symmetry(n):
    made = per_rank.rounds(n, range(n - 1), _ring(n), symmetry="rotate")
    assert all(len(r.base) == 1 and r.symmetry.kind == "rotate" for r in made)
    assert {(r.symmetry.stride, r.symmetry.modulus) for r in made} == {(1, n)}
    written_out = per_rank.rounds(n, range(n - 1), _ring(n))
    assert [sorted(map(str, a.transfers)) for a in made] == [
        sorted(map(str, b.transfers)) for b in written_out]


def test_the_xor_mask_is_derived_bit_by_bit():
    n = 16

    def halving(r, d):  # recursive halving's blocks: the partner's half of r's group of 2d
        group = r - r % (2 * d)
        half = [u for u in range(group, group + 2 * d) if u & d != r & d]
        return [Transfer(r, r ^ d, half, reduce=True)]

    made = per_rank.rounds(n, [8, 4, 2, 1], halving, symmetry="xor")
    assert [r.symmetry.mask for r in made] == [0b1000, 0b1100, 0b1110, 0b1111]
    whole = per_rank.rounds(n, [1, 2], lambda r, d: [Transfer(r, r ^ d, 0, True)],
                            symmetry="xor")
    assert [r.symmetry.mask for r in whole] == [0, 0]


@pytest.mark.parametrize("n", [6, 40])
def test_a_family_whose_ranks_do_not_agree_with_its_symmetry_is_refused(n):
    odd = _ring(n, lambda r, s, n: (r - s - 1) % n if r != n - 1 else (r - s) % n)
    with pytest.raises(ScheduleError, match=f"rank {n - 1} sends .* declared symmetry"):
        per_rank.rounds(n, range(n - 1), odd, symmetry="rotate", name="odd ring")
    skewed = lambda r, s: [Transfer(r, (r + 1 + r % 2) % n, 0, reduce=True)]  # noqa: E731
    with pytest.raises(ScheduleError, match="declared symmetry"):
        per_rank.rounds(n, [0], skewed, symmetry="rotate")


def test_mistakes_in_a_family_are_named():
    with pytest.raises(ScheduleError, match="rank 1's sends .* are not from rank 1"):
        per_rank.rounds(4, [0], lambda r, s: [Transfer(0, 1, 0, reduce=True)])
    with pytest.raises(ScheduleError, match="'xor' needs a power of two ranks, not 6"):
        per_rank.rounds(6, [1], lambda r, d: [Transfer(r, r ^ d, 0, True)], symmetry="xor")
    with pytest.raises(ScheduleError, match="rank 0 must send in every step"):
        per_rank.rounds(4, [0], lambda r, s: [], symmetry="rotate")
    with pytest.raises(ScheduleError, match="symmetry must be"):
        per_rank.rounds(4, [0], _ring(4), symmetry="spin")


def _scanning_every_rank(n, program, real, held):
    """as_soon_as_held as it was written first: every rank looked at in every round."""
    holds = {v: set() for v in range(n)}
    holds[0] = set(held)
    queue = {v: list(program(v)) for v in range(n)}
    made = []
    while any(queue.values()):
        ready = [(v, *queue[v][0]) for v in range(n) if queue[v] and queue[v][0][0] in holds[v]]
        assert ready
        for v, chunk, to in ready:
            queue[v].pop(0)
            holds[to].add(chunk)
        made.append([Transfer(real(v), real(to), chunk, reduce=False) for v, chunk, to in ready])
    return made


def test_as_soon_as_held_looks_only_at_the_ranks_a_round_changed():
    """Random trees and piece orders: the rounds of every rank scanned in every round, from
    looking again only at the last round's senders and receivers (a chain of 32,768 ranks)."""
    rng = random.Random(47)
    for _ in range(200):
        n, pieces = rng.randint(1, 24), rng.randint(1, 4)
        parent = {v: rng.randrange(v) for v in range(1, n)}
        children = {v: [c for c in range(n) if parent.get(c) == v] for v in range(n)}
        order = {v: rng.sample(range(pieces), pieces) for v in range(n)}

        def program(v):
            return [(p, c) for p in order[v] for c in children[v]]

        def real(v):
            return (v + 3) % n

        assert (as_soon_as_held(n, program, real, range(pieces))
                == _scanning_every_rank(n, program, real, range(pieces)))
    with pytest.raises(ValueError, match="not connected"):
        as_soon_as_held(3, lambda v: [(0, 2)] if v == 1 else [], lambda v: v, [0])
