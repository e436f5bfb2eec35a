"""Symbolic execution: prove that a schedule does what its primitive promises, without devices.

Each chunk on each rank holds a set of contributions, (rank, chunk) pairs: whose data has been
summed into it. A reduce transfer adds the sender's set to the receiver's (a contribution
already there would be counted twice: an error); a copy replaces it. At the end, every rank
must hold exactly what the primitive promises: each contribution once, none missing.
"""

from __future__ import annotations

from .execute import lower
from .schedules import Schedule

Contributions = frozenset  # of (rank, chunk)

# Primitives whose buffer is n blocks, block i belonging to rank i; the others have one block,
# except alltoall: 2n blocks, block c < n the one for rank c, block n + i the one from rank i
# (the input twice: rank r's own block is in place from the start).
BLOCKED = ("reduce_scatter", "allgather", "gather", "scatter")


class ScheduleError(ValueError):
    """A schedule that does not do what its primitive promises."""


def _block_of(schedule: Schedule):
    n_blocks = {**dict.fromkeys(BLOCKED, schedule.n_ranks),
                "alltoall": 2 * schedule.n_ranks}.get(schedule.primitive, 1)
    per_block = schedule.n_chunks // n_blocks
    return lambda chunk: chunk // per_block


def initial_state(schedule: Schedule) -> list[list[Contributions | None]]:
    """What each rank holds before the first round (None: nothing meaningful yet)."""
    n, p, root = schedule.n_ranks, schedule.primitive, schedule.root
    block_of = _block_of(schedule)

    def holds(rank, chunk):
        if p in ("allreduce", "reduce", "reduce_scatter"):
            return frozenset({(rank, chunk)})
        if p in ("broadcast", "scatter"):
            return frozenset({(rank, chunk)}) if rank == root else None
        if p == "alltoall":  # the same data in both halves: (rank, chunk of the first half)
            return frozenset({(rank, chunk % (schedule.n_chunks // 2))})
        # allgather, gather: each rank holds its own block
        return frozenset({(rank, chunk)}) if block_of(chunk) == rank else None

    return [[holds(r, c) for c in range(schedule.n_chunks)] for r in range(n)]


def promised_state(schedule: Schedule) -> dict[tuple[int, int], Contributions]:
    """What the primitive promises: {(rank, chunk): contributions} for the chunks it defines."""
    n, p, root = schedule.n_ranks, schedule.primitive, schedule.root
    block_of = _block_of(schedule)
    everyone = lambda c: frozenset((r, c) for r in range(n))  # noqa: E731
    out = {}
    for c in range(schedule.n_chunks):
        if p == "allreduce":
            out.update({(r, c): everyone(c) for r in range(n)})
        elif p == "reduce":
            out[(root, c)] = everyone(c)
        elif p == "reduce_scatter":
            out[(block_of(c), c)] = everyone(c)
        elif p == "broadcast":
            out.update({(r, c): frozenset({(root, c)}) for r in range(n)})
        elif p == "allgather":
            out.update({(r, c): frozenset({(block_of(c), c)}) for r in range(n)})
        elif p == "gather":
            out[(root, c)] = frozenset({(block_of(c), c)})
        elif p == "scatter":
            out[(block_of(c), c)] = frozenset({(root, c)})
        elif p == "alltoall":  # rank r's chunk n + i: rank i's chunk r (c < n is the input)
            half = schedule.n_chunks // 2
            out.update({(r, half + c): frozenset({(c, r)}) for r in range(n) if c < half})
        else:
            raise ValueError(f"{schedule.name}: unknown primitive {p!r}")
    return out


def _check_writes(index: int, round_) -> None:
    """A chunk copied into may be written by nothing else in the same round."""
    writes = {}
    for t in round_:
        for c in t.into:
            writes.setdefault((t.dst, c), []).append(t)
    for (dst, c), ts in writes.items():
        if len(ts) > 1 and not all(t.reduce for t in ts):
            raise ScheduleError(f"round {index}: rank {dst} chunk {c} is written by "
                                f"{len(ts)} transfers, at least one a copy: "
                                f"{', '.join(map(str, ts))}")


def check_matchings(schedule: Schedule) -> None:
    """Each ppermute the executor makes sends from and to every rank at most once."""
    for segment in lower(schedule):
        for matching in segment.matchings:
            for side, ranks in (("sends", [s for s, _ in matching.perm]),
                                ("receives", [d for _, d in matching.perm])):
                twice = sorted({r for r in ranks if ranks.count(r) > 1})
                if twice:
                    raise ScheduleError(f"{schedule.name}: rank {twice[0]} {side} twice in one "
                                        f"ppermute {matching.perm}")


def states(schedule: Schedule) -> list[list[list[Contributions | None]]]:
    """What every rank holds before the first round and after each round, as [rank][chunk]
    contribution sets; raises ScheduleError at the first transfer that is not possible."""
    if not schedule.primitive:
        raise ValueError(f"{schedule.name}: the schedule names no primitive to verify against; "
                         "build it with jaxcoll.schedule(primitive, algorithm, n)")
    state = initial_state(schedule)
    history = [[row[:] for row in state]]
    for index, round_ in enumerate(schedule.rounds):
        _check_writes(index, round_)
        before = [row[:] for row in state]
        for t in round_:
            for c, d in zip(t.chunks, t.into):
                sent = before[t.src][c]
                if sent is None:
                    raise ScheduleError(f"round {index}: rank {t.src} sends chunk {c} to rank "
                                        f"{t.dst} before it holds any data for it")
                if not t.reduce:
                    state[t.dst][d] = sent
                    continue
                held = state[t.dst][d]
                if held is None:
                    raise ScheduleError(f"round {index}: rank {t.dst} reduces into chunk {d}, "
                                        "which holds no data yet")
                if held & sent:
                    raise ScheduleError(f"round {index}: {t} counts contributions twice into "
                                        f"rank {t.dst} chunk {d}: {sorted(held & sent)}")
                state[t.dst][d] = held | sent
        history.append([row[:] for row in state])
    return history


def verify(schedule: Schedule) -> None:
    """Raise ScheduleError (naming the round, rank and chunk) unless the schedule keeps its
    primitive's promise; return None if it does."""
    final = states(schedule)[-1]
    last = f"after round {len(schedule.rounds) - 1}" if schedule.rounds else "with no rounds"
    for (rank, chunk), promised in sorted(promised_state(schedule).items()):
        held = final[rank][chunk] or frozenset()
        if held != promised:
            raise ScheduleError(
                f"{schedule.name}: {last}, rank {rank} chunk {chunk} holds {sorted(held)}; "
                f"missing {sorted(promised - held)}, unexpected {sorted(held - promised)}")
    check_matchings(schedule)
