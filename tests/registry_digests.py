"""Digests of every registered schedule in its compact form (rank 0's transfers and each
round's symmetry, as stored), the fixture of tests/test_per_rank.py: the per-rank rewrite of
the families (issue 48) must build the very rounds and transfers the earlier builders built.

The digests in registry_digests.json were written by the builders as they were before that
rewrite (commit dff618d); ``python tests/registry_digests.py`` writes them anew from today's
builders (do so only for a change that means to change a schedule, and say why in its commit).

A "grid" round (hierarchical, stored compact since issue 47; its digests were written when it
was stored written out) is hashed written out, as ``Round.transfers`` lists it, with no
symmetry: its digest equals the stored one only if the compact round expands to exactly the
transfers, in order and with chunk ids in order, that the written-out builder stored.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sys

FILE = pathlib.Path(__file__).with_name("registry_digests.json")
FLAT_NS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 33, 64, 1000, 1024, 4096)
LEVELS = ((2, 4), (4, 2), (3, 2), (2, 3), (2, 2, 2), (2, 3, 2), (1, 4), (4, 1), (5,), (16, 8))


def _symmetry(symmetry) -> list | None:
    if symmetry is None:
        return None
    return [symmetry.kind, symmetry.n_ranks, symmetry.stride, symmetry.modulus, symmetry.mask]


def _stored(round_) -> list:
    """A round's base transfers and symmetry; a "grid" round's every transfer and None."""
    if round_.symmetry is not None and round_.symmetry.kind == "grid":
        return [[str(t) for t in round_.transfers], None]
    return [[str(t) for t in round_.base], _symmetry(round_.symmetry)]


def digest(schedule) -> str:
    """sha256 of the schedule as stored: its name, sizes, layout and every round's base
    transfers (in order, chunk ids in order) and symmetry (a "grid" round written out)."""
    text = json.dumps([schedule.name, schedule.n_ranks, schedule.n_chunks, schedule.n_scratch,
                       schedule.input_at, schedule.output_at, schedule.root,
                       [_stored(r) for r in schedule.rounds]])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cases():
    """(key, build) for every registered algorithm at the sizes above: roots 0 and n - 1 for
    rooted ones, pieces 1 and 3 for pipelined ones (at n <= 64)."""
    from jaxcoll.ir.families import SCHEDULES

    for collective, algorithms in SCHEDULES.items():
        for name, entry in algorithms.items():
            sizes = LEVELS if entry.two_level else FLAT_NS
            for n in sizes:
                big = (n if isinstance(n, int) else n[0] * n[-1]) > 64
                if big and (entry.rooted or name in ("naive", "double_tree", "tree")):
                    continue  # one rank's loop in turn: their sizes at 1,024 say nothing new
                roots = sorted({0, n - 1}) if entry.rooted else [0]
                pieces = [1, 3] if entry.pipelined and not big else [1]
                for root in roots:
                    for k in pieces:
                        kwargs = ({"root": root} if entry.rooted else {}) | (
                            {"pieces": k} if entry.pipelined else {})
                        key = f"{collective} {name} {n} root={root} pieces={k}"
                        yield key, (lambda entry=entry, n=n, kwargs=kwargs:
                                    entry.build(n, **kwargs))


def compute() -> dict[str, str]:
    return {key: digest(build()) for key, build in cases()}


if __name__ == "__main__":
    sys.path.insert(0, str(FILE.parents[1]))
    FILE.write_text(json.dumps(compute(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {FILE}")
