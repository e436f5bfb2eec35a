"""Translation validation: the executor's plan checked against the schedule it came from.

``verify`` proves what a schedule's rounds do; the executor runs a *plan* derived from them
(plan.py): ppermute pairs, chunk ids each rank computes from its rank by their compact form,
receiver masks and a write mode. Before anything is traced, :func:`check` proves that the plan
makes every rank do exactly what the rounds say, read as ``verify`` reads them
(``Symmetry.at`` at every rank), so a lowering that reads a schedule another way is an error,
never a wrong answer. Plain numpy, no JAX; ``plan.lower`` runs it once per schedule and caches
the checked plan.

- **An explicit round**: the plan's transfers (each pair of a ppermute, with the ids its table
  gives the sender and the receiver) are the round's transfers, no more and no fewer.
- **A symmetric round**: rank 0's transfers, and what reaches rank 0, are checked the same way;
  every other rank is rank 0 moved by the round's symmetry, which the plan does where
  (1) the symmetry is a group action (``Symmetry`` refuses a stride that does not close its
  cycle), (2) each ppermute's pairs are every rank's copy of rank 0's transfer, and (3) each
  table of ids is, at every rank r, its rank 0 row moved by r: its compact form is the
  symmetry's own (kind, modulus, stride, mask), and a run of ids the executor slices stays a
  run at every rank. Rank r then sends ``chunk(C, r)`` to ``rank(d, r)``, which receives it into
  ``chunk(chunk(I, q0), r)``: ``chunk(I, r)`` by (1), as ``Symmetry.at`` says.
- **Every round**: each ppermute is a (partial) permutation of the ranks (a pair (r, r) is a
  local transfer); a matching's receiver mask is its receivers; where the round is one scatter,
  no rank writes a chunk twice in it.

Which NaN a reduce keeps when both operands are NaN (``lower_sender_first``) is the executor's
tie-break, not data movement; tests/test_reliability.py checks it.
"""

from __future__ import annotations

from math import gcd

import numpy as np

from .schedules import Round, Schedule, ScheduleError, Symmetry


class _Disagrees(Exception):
    """The plan does something the round does not (the message says what)."""


def check(schedule: Schedule, segments) -> None:
    """Raise ScheduleError unless ``segments`` (``plan.lower``'s) run exactly ``schedule``'s
    rounds at every rank."""
    taking_place = [i for i, r in enumerate(schedule.rounds) if r.base]  # empty rounds: no op
    at = 0
    for segment in segments:
        indices = taking_place[at:at + segment.n_steps]
        try:
            if len(indices) < segment.n_steps:
                raise _Disagrees(f"the plan runs {at + segment.n_steps} rounds, the schedule "
                                 f"{len(taking_place)}")
            rounds = [schedule.rounds[i] for i in indices]
            symmetric = rounds[0].symmetry is not None
            _check_matchings(segment, schedule.n_ranks, symmetric)
            if all(r.symmetry is not None for r in rounds):
                _check_symmetric(segment, rounds, schedule.n_ranks)
            elif all(r.symmetry is None for r in rounds):
                _check_explicit(segment, rounds, schedule.n_ranks, schedule.buffer_chunks)
            else:
                raise _Disagrees("one loop runs symmetric and explicit rounds")
        except _Disagrees as error:
            first = indices[0] if indices else len(schedule.rounds)
            last = indices[-1] if indices else first
            where = f"round {first}" if first == last else f"rounds {first}..{last}"
            raise ScheduleError(f"{schedule.name}: {where}: the lowered program disagrees with "
                                f"the schedule: {error} (a bug in jaxcoll's lowering; nothing "
                                "was run)") from None
        at += segment.n_steps
    if at != len(taking_place):
        raise ScheduleError(f"{schedule.name}: the lowered program runs {at} rounds, the "
                            f"schedule {len(taking_place)} (a bug in jaxcoll's lowering; "
                            "nothing was run)")


def _check_matchings(segment, n_ranks: int, symmetric: bool) -> None:
    """Each ppermute a partial permutation of the ranks, its tables the segment's shape, its
    receiver mask its receivers (a symmetric round's pairs are checked in _check_symmetric)."""
    for j, matching in enumerate(segment.matchings):
        for ids in (segment.send_ids[j], segment.recv_ids[j]):
            if (ids.n_steps, ids.n_moved) != (segment.n_steps, matching.n_moved):
                raise _Disagrees(f"ppermute {j}'s ids are for {ids.n_steps} steps of "
                                 f"{ids.n_moved} chunks, not {segment.n_steps} of "
                                 f"{matching.n_moved}")
        if symmetric:  # every rank sends and receives once: no mask
            if segment.receivers[j] is not None:
                raise _Disagrees(f"ppermute {j} masks receivers, but every rank receives")
            continue
        senders, receivers = (set(side) for side in zip(*matching.perm))
        if not (len(senders) == len(receivers) == len(matching.perm)):
            raise _Disagrees(f"a rank sends or receives twice in ppermute {j}")
        if not senders | receivers <= set(range(n_ranks)):
            raise _Disagrees(f"ppermute {j} has pairs outside ranks 0..{n_ranks - 1}")
        mask = segment.receivers[j]
        flags = None if mask is None else mask.rows(np.arange(n_ranks))[0, :, 0] != 0
        if (len(receivers) < n_ranks if flags is None else
                np.count_nonzero(flags) != len(receivers) or not flags[list(receivers)].all()):
            masked = range(n_ranks) if flags is None else np.flatnonzero(flags).tolist()
            raise _Disagrees(f"ppermute {j}'s receiver mask is ranks {list(masked)}, its "
                             f"receivers {sorted(receivers)}")


def _check_explicit(segment, rounds: list[Round], n_ranks: int, n_chunks: int) -> None:
    """The plan's transfers, step by step, are the rounds' transfers (as multisets)."""
    planned = []  # per matching: (n_steps, n_pairs, 3 + 2 n_moved) rows src, dst, reduce, ids
    for j, matching in enumerate(segment.matchings):
        pairs = np.array(matching.perm, dtype=np.int64)  # (n_pairs, 2)
        sends = segment.send_ids[j].rows(pairs[:, 0])  # (n_steps, n_pairs, n_moved)
        recvs = segment.recv_ids[j].rows(pairs[:, 1])
        fixed = np.broadcast_to(np.column_stack([pairs, np.full(len(pairs), matching.reduce)]),
                                (segment.n_steps, len(pairs), 3))
        planned.append(np.concatenate([fixed, sends, recvs], axis=2))
    for step, round_ in enumerate(rounds):
        want = _by_width([_row(t) for t in round_.base])
        got = {}
        for rows in planned:
            got.setdefault(rows.shape[2], []).append(rows[step])
        got = {width: np.concatenate(parts) for width, parts in got.items()}
        if want.keys() != got.keys() or any(
                not np.array_equal(_sorted(got[k]), _sorted(want[k])) for k in want):
            extra, missing = _difference(got, want), _difference(want, got)
            raise _Disagrees(f"round {step} of the loop: the plan moves {extra}, the schedule "
                             f"{missing}")
    if segment.one_write:  # one scatter: no rank may write a chunk twice in a round
        n_moved = [(rows.shape[2] - 3) // 2 for rows in planned]
        _distinct(np.concatenate([
            (rows[..., 1:2] * n_chunks + rows[..., 3 + k:]).reshape(segment.n_steps, -1)
            for rows, k in zip(planned, n_moved)], axis=1))


def _row(t) -> tuple:
    return (t.src, t.dst, int(t.reduce), *t.chunks, *t.into)


def _by_width(rows: list[tuple]) -> dict[int, np.ndarray]:
    """Transfers' rows (src, dst, reduce, chunks..., into...) grouped by length, as arrays."""
    groups: dict[int, list] = {}
    for row in rows:
        groups.setdefault(len(row), []).append(row)
    return {k: np.array(v, dtype=np.int64) for k, v in groups.items()}


def _sorted(rows: np.ndarray) -> np.ndarray:
    """Transfers' rows in order: of (src, dst, reduce) where no two share them, else of all."""
    if len(rows) < 2:
        return rows
    key = (rows[:, 0] * (rows[:, 1].max() + 1) + rows[:, 1]) * 2 + rows[:, 2]
    order = np.argsort(key, kind="stable")
    if (np.diff(key[order]) == 0).any():
        order = np.lexsort(rows.T[::-1])
    return rows[order]


def _difference(these: dict, those: dict) -> list[str]:
    """The transfers of ``these`` that ``those`` lacks, written as transfers (for errors)."""
    lacking = []
    for width, rows in these.items():
        known = {tuple(r) for r in those.get(width, np.zeros((0, width), np.int64)).tolist()}
        for src, dst, reduce, *ids in rows.tolist():
            if (src, dst, reduce, *ids) not in known:
                half = len(ids) // 2
                lacking.append(f"{src}->{dst} {ids[:half]}>{ids[half:]}{'+' if reduce else '='}")
    return lacking[:3]


def _distinct(keys: np.ndarray) -> None:
    """(n_steps, n_writes) keys of (rank, chunk) written: none twice in a step."""
    ordered = np.sort(keys, axis=1)
    twice = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
    if twice.any():
        raise _Disagrees(f"round {int(np.argmax(twice))} of the loop is one scatter, but a rank "
                         "writes a chunk twice in it")


def _check_symmetric(segment, rounds: list[Round], n_ranks: int) -> None:
    """Rank 0's transfers and receipts checked; the rest follows by the symmetry (above)."""
    symmetry = rounds[0].symmetry
    if symmetry.n_ranks != n_ranks or (symmetry.kind == "xor" and n_ranks & (n_ranks - 1)) or (
            symmetry.kind != "xor" and symmetry.stride * n_ranks % symmetry.modulus):
        raise _Disagrees(f"{symmetry} is not a group action on the {n_ranks} ranks (its moves "
                         "do not compose as the ranks' do), which running rank 0's program "
                         "moved by the rank needs")
    shapes = [(t.dst, len(t.chunks), t.reduce) for t in rounds[0].base]
    for round_ in rounds:
        if round_.symmetry != symmetry or [(t.dst, len(t.chunks), t.reduce)
                                           for t in round_.base] != shapes:
            raise _Disagrees("one loop runs rounds of different symmetries or partners")
    if len(shapes) != len(segment.matchings):
        raise _Disagrees(f"{len(segment.matchings)} ppermutes for {len(shapes)} transfers of "
                         "rank 0")
    received = []
    for j, (matching, (dst, n_moved, reduce)) in enumerate(zip(segment.matchings, shapes)):
        # the pairs verify expands the round to (Symmetry.partners), the same tuple or equal
        pairs = symmetry.pairs(dst)
        if (n_moved, reduce) != (matching.n_moved, matching.reduce) or (
                matching.perm is not pairs and matching.perm != pairs):
            raise _Disagrees(f"ppermute {j} is not every rank's copy of rank 0's transfer to "
                             f"rank {dst}")
        q0 = symmetry.sender(dst)  # who sends to rank 0: its pair is (q0, 0)
        if pairs[q0] != (q0, 0):
            raise _Disagrees(f"rank {q0}'s copy of rank 0's transfer to {dst} is not to rank 0")
        sends = np.array([round_.base[j].chunks for round_ in rounds])  # (n_steps, n_moved)
        recvs = symmetry.chunk(np.array([round_.base[j].into for round_ in rounds]), q0)
        for what, ids, want in (("sends", segment.send_ids[j], sends),
                                ("receives into", segment.recv_ids[j], recvs)):
            got = ids.rows([0])[:, 0]
            if not np.array_equal(got, want):
                step = int(np.argmax((got != want).any(axis=1)))
                raise _Disagrees(f"round {step} of the loop: rank 0 {what} chunks "
                                 f"{got[step].tolist()} in ppermute {j}, the schedule "
                                 f"{want[step].tolist()}")
            _moves_as_symmetry(ids, symmetry, want[:, 0], f"ppermute {j}'s ids")
        received.append(recvs)
    if segment.one_write:  # every rank's writes are rank 0's moved by one bijection
        _distinct(np.concatenate(received, axis=1))


def _moves_as_symmetry(ids, symmetry: Symmetry, first: np.ndarray, what: str) -> None:
    """The ids at every rank r are their rank 0 row moved by r (``first``: rank 0's first id
    per step): the compact form is the symmetry's own, and a run stays a run."""
    n, kind = symmetry.n_ranks, symmetry.kind
    if n == 1:
        return
    form = {"rotate": "affine", "xor": "xor", "mirror": "mirror"}[kind]
    if ids.kind != form:
        raise _Disagrees(f"{what} are {ids.kind!r}, not the {kind!r} symmetry's {form!r}")
    run = ids.first_only and ids.n_moved > 1
    if kind == "xor":
        low = symmetry.mask & (n - 1)
        if ids.mask & (n - 1) != low:
            raise _Disagrees(f"{what} move under mask {ids.mask}, the symmetry's is {low}")
        # c ^ x stays a run c', c' + 1, ... where x has no bit that changes within the run
        varying = first ^ (first + ids.n_moved - 1)
        if run and low and (varying >= (low & -low)).any():
            raise _Disagrees(f"{what} are sliced as runs that the mask breaks")
        return
    m = symmetry.modulus
    stride, offset = ids.arrays[1], ids.arrays[2]
    if ids.modulus != m or (offset % m).any() or ((stride - symmetry.stride) % m).any():
        raise _Disagrees(f"{what} move by stride {stride.ravel()[:1].tolist()} modulo "
                         f"{ids.modulus}, the symmetry by {symmetry.stride} modulo {m}")
    if run:  # every rank's run must not wrap round its block (mirror: it runs backwards)
        g = gcd(symmetry.stride % m, m) or m
        if kind == "mirror" or (first % m % g + ids.n_moved > g).any():
            raise _Disagrees(f"{what} are sliced as runs that some rank's move wraps")
