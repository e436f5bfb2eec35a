"""Schedules: a collective algorithm as plain data, with no JAX in it.

Every rank holds the same buffer layout: ``n_chunks`` chunks of equal length. A schedule is a
list of rounds; a round is a set of transfers that happen at the same time (every transfer of a
round reads the buffers as they were before the round); a transfer moves some chunks from one
rank to another and either copies them over the receiver's chunks or reduces into them. The
receiver's chunks are the same ids unless the transfer says ``into`` which (AllToAll moves a
rank's chunk j into its destination's chunk i).

The ring reduce-scatter is then almost the seed's pseudocode::

    Schedule.build("ring reduce_scatter", n, n_chunks=n, rounds=[
        [Transfer(r, (r + 1) % n, (r - step - 1) % n, reduce=True) for r in range(n)]
        for step in range(n - 1)])

Schedules concatenate with ``+`` (ring allreduce = ring reduce_scatter + ring allgather).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np


@dataclass(frozen=True)
class Transfer:
    """``src`` sends its chunks ``chunks`` to ``dst``, which copies or reduces them into its
    chunks ``into`` (by default the same ids)."""

    src: int
    dst: int
    chunks: tuple[int, ...]
    reduce: bool
    into: tuple[int, ...]

    def __init__(self, src: int, dst: int, chunks: int | Iterable[int], reduce: bool,
                 into: int | Iterable[int] | None = None):
        chunks = _ids(chunks)
        into = chunks if into is None else _ids(into)
        if len(into) != len(chunks):
            raise ValueError(f"Transfer {src}->{dst}: chunks {chunks} and into {into} differ "
                             "in length")
        object.__setattr__(self, "src", int(src))
        object.__setattr__(self, "dst", int(dst))
        object.__setattr__(self, "chunks", chunks)
        object.__setattr__(self, "reduce", bool(reduce))
        object.__setattr__(self, "into", into)

    def __str__(self) -> str:
        moved = f"[{','.join(map(str, self.chunks))}]"
        if self.into != self.chunks:
            moved += f">[{','.join(map(str, self.into))}]"
        return f"{self.src}->{self.dst} {moved}{'+' if self.reduce else '='}"


def _ids(chunks: int | Iterable[int]) -> tuple[int, ...]:
    """Chunk ids as a tuple of ints."""
    return (int(chunks),) if isinstance(chunks, (int, np.integer)) else tuple(int(c) for c in chunks)


@dataclass(frozen=True)
class Round:
    """Transfers that happen at the same time; each reads the state before the round."""

    transfers: tuple[Transfer, ...]

    def __init__(self, transfers: Iterable[Transfer]):
        object.__setattr__(self, "transfers", tuple(transfers))

    def __iter__(self):
        return iter(self.transfers)

    def __len__(self) -> int:
        return len(self.transfers)

    def __str__(self) -> str:
        return "  ".join(str(t) for t in self.transfers)


@dataclass(frozen=True)
class Schedule:
    """An algorithm on ``n_ranks`` ranks whose buffers hold ``n_chunks`` chunks each.

    ``primitive`` and ``root`` say what it promises (see :func:`jaxcoll.verify`); schedules
    from :func:`jaxcoll.schedule` carry them, building blocks and hand-made ones may not.
    """

    name: str
    n_ranks: int
    n_chunks: int
    rounds: tuple[Round, ...]
    primitive: str = ""
    root: int = 0

    @classmethod
    def build(cls, name: str, n_ranks: int, *, n_chunks: int,
              rounds: Iterable[Iterable[Transfer]]) -> "Schedule":
        """Make a schedule from nested iterables of transfers, checking every index."""
        schedule = cls(name, n_ranks, n_chunks, tuple(Round(r) for r in rounds))
        schedule.check_indices()
        return schedule

    def check_indices(self) -> None:
        """Raise ValueError if a transfer names a rank or chunk outside the schedule."""
        if self.n_ranks < 1 or self.n_chunks < 1:
            raise ValueError(f"{self.name}: n_ranks={self.n_ranks} and n_chunks={self.n_chunks} "
                             "must both be >= 1")
        for index, round_ in enumerate(self.rounds):
            for t in round_:
                bad_rank = not (0 <= t.src < self.n_ranks and 0 <= t.dst < self.n_ranks)
                ids = t.chunks + t.into
                bad_chunk = not t.chunks or any(not 0 <= c < self.n_chunks for c in ids)
                if bad_rank or bad_chunk or t.src == t.dst:
                    raise ValueError(f"{self.name}: round {index} has an invalid transfer {t} "
                                     f"(ranks 0..{self.n_ranks - 1}, chunks "
                                     f"0..{self.n_chunks - 1}, src != dst)")

    def __add__(self, other: "Schedule") -> "Schedule":
        if (self.n_ranks, self.n_chunks) != (other.n_ranks, other.n_chunks):
            raise ValueError(f"cannot concatenate {self.name!r} (n_ranks={self.n_ranks}, "
                             f"n_chunks={self.n_chunks}) and {other.name!r} "
                             f"(n_ranks={other.n_ranks}, n_chunks={other.n_chunks})")
        return Schedule(f"{self.name} + {other.name}", self.n_ranks, self.n_chunks,
                        self.rounds + other.rounds)

    def reversed(self, name: str, *, reduce: bool) -> "Schedule":
        """The schedule run backwards: rounds in reverse order, every transfer turned around.

        Data that fanned out from a root now flows into it: a broadcast reversed with
        ``reduce=True`` is a reduce, a scatter reversed with ``reduce=False`` is a gather.
        """
        rounds = [[Transfer(t.dst, t.src, t.into, reduce, into=t.chunks) for t in r]
                  for r in reversed(self.rounds)]
        return Schedule.build(name, self.n_ranks, n_chunks=self.n_chunks, rounds=rounds)

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)

    def __hash__(self) -> int:  # computed once: a primitive's parameter is hashed at every bind
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.name, self.n_ranks, self.n_chunks, self.rounds, self.primitive,
                           self.root))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __str__(self) -> str:
        moves = any(t.into != t.chunks for r in self.rounds for t in r)
        into = ">[into]" if moves else ""
        header = (f"{self.name}: {self.n_ranks} ranks, {self.n_chunks} chunks, "
                  f"{self.n_rounds} rounds   (src->dst [chunks]{into}, '+' reduce, '=' copy)")
        width = len(str(max(self.n_rounds - 1, 0)))
        lines = [header] + [f"  round {i:>{width}} | {r}" for i, r in enumerate(self.rounds)]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Schedule({self.name!r}, n_ranks={self.n_ranks}, n_chunks={self.n_chunks}, "
                f"n_rounds={self.n_rounds})")


def split_round(round_: Round) -> list[list[Transfer]]:
    """Split a round into matchings (greedy, in transfer order): each transfer joins the first
    group of its kind (chunk count, copy or reduce) whose ranks it doesn't meet."""
    groups: list[tuple[list[Transfer], set, set]] = []  # transfers, senders, receivers
    for t in round_:
        for group, senders, receivers in groups:
            same_kind = (len(group[0].chunks), group[0].reduce) == (len(t.chunks), t.reduce)
            if same_kind and t.src not in senders and t.dst not in receivers:
                break
        else:
            group, senders, receivers = [], set(), set()
            groups.append((group, senders, receivers))
        group.append(t)
        senders.add(t.src)
        receivers.add(t.dst)
    return [group for group, _, _ in groups]
