"""What each collective *is*, written once: one object per collective with all its rules.

The one module that knows the collectives by name. Everything else asks these objects:
the verifier (what each rank starts with and must end with), the lowering
(jaxcoll/lowering/layout.py: how a buffer enters the schedule and the result leaves it, how a
leaf's blocks are laid out), the cost model and the bounds, compression, streams, the
benchmark (nccl-tests' conventions) and the main job.

A collective runs on a (rows, width) buffer per rank: ``rows_in`` rows in and ``rows_out``
out ("1" or "n", n = ranks). Its schedule runs on a buffer of ``schedule_blocks`` blocks ("1",
"n", or "2n" for alltoall: the input twice, rows n.. receive). What the schedule moves is said
by two words:

- ``source``: whose data a chunk holds before the first round: ``"every"`` rank's own (to be
  reduced), the ``"root"``'s, or its ``"owner"``'s (block i is rank i's; the others hold none);
- ``destination``: who must end with the result of a chunk: ``"every"`` rank, the ``"root"``,
  or its block's ``"owner"``.

``dual`` names the primitive whose schedule is this one's run backwards (rounds reversed, src
and dst swapped, copy and reduce exchanged): the transpose. allreduce and alltoall are their own
transposes and run their own schedule for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import cycle, islice
from typing import Callable

from jaxcoll.ir import _renamed

Row = list[tuple[int, int, int]]  # [(chunk, origin, ranks), ...]: what one rank must end with


class Promises(Sequence):
    """What the ranks must end with, as (rank, row) pairs in rank order; a row is built when
    asked for (alltoall's n rows of n entries take gigabytes at thousands of ranks), and ranks
    promised alike get one shared row object."""

    def __init__(self, ranks: Sequence[int], row: Callable[[int], Row]):
        self.ranks, self.row = ranks, row

    def __len__(self) -> int:
        return len(self.ranks)

    def __getitem__(self, index: int) -> tuple[int, Row]:
        rank = self.ranks[index]
        return rank, self.row(rank)


@dataclass(frozen=True)
class CollectiveRecord:
    """What one collective is, in data: its layouts, typing, dual and busbw, psum's rules.

    ``RECORDS`` holds one per collective, by name (the module docstring says what each field
    means). ``Record``, its name before 0.5.0, is a deprecated alias.
    """

    name: str
    rows_in: str
    rows_out: str
    schedule_blocks: str
    source: str  # "every" | "root" | "owner": whose data a chunk holds before the first round
    destination: str  # "every" | "root" | "owner": who ends with it
    rooted: bool = False
    reduces: bool = False
    invariant: bool = False  # typed invariant over the axis, as lax's built-in (psum) is
    replicated: bool = False  # the same result on every rank: unmapped under vmap, as lax's
    compressible: bool = False  # takes compress= (sums and gathers of float blocks)
    streams: bool = False  # a ring of it can hand each block to the caller as it arrives
    dual: str = ""  # "" : its own transpose, with its own schedule
    reference: str = ""  # the lax built-in it matches (or is built from)
    busbw: str = "(n-1)/n"  # nccl-tests' busbw / algbw (doc/PERFORMANCE.md)
    composed_of: tuple[str, ...] = ()  # the collectives it is the concatenation of, in order
    sums_bools: bool = False  # bools summed as int32, as lax.psum does (pmax/pmin keep bool)
    uneven_groups: bool = False  # lax's axis_index_groups may differ in size (psum's rule)

    @property
    def spreads(self) -> bool:
        """Every rank's block goes to every rank and nothing is reduced (allgather): each chunk
        spreads from its owner along a tree, what jaxcoll.synthesize searches for."""
        return self.source == "owner" and self.destination == "every"

    @property
    def layout(self) -> str:
        """How a leaf is laid out and how nccl-tests sizes it: "whole" (S is the buffer),
        "scatter" (S is the input, n blocks along ``dim``), "gather" (S is the output, n
        blocks) or "exchange" (alltoall: n blocks in, n out)."""
        if self.rows_in == "n":
            return "exchange" if self.rows_out == "n" else "scatter"
        return "gather" if self.rows_out == "n" else "whole"

    def busbw_factor(self, n: int) -> float:
        """nccl-tests' busbw / algbw on n ranks: 2(n-1)/n, (n-1)/n or 1."""
        return {"2(n-1)/n": 2 * (n - 1) / n, "(n-1)/n": (n - 1) / n, "1": 1.0}[self.busbw]

    def rows(self, which: str, n: int) -> int:
        """``rows_in``/``rows_out``/``schedule_blocks`` as a number for n ranks."""
        return {"1": 1, "n": n, "2n": 2 * n}[getattr(self, which)]

    def must_send(self, n: int, nbytes: float) -> float:
        """Bytes some rank must send or receive, whatever the schedule: (n-1)/n·N, 2(n-1)/n·N
        for allreduce (Patarasuk and Yuan, 2009), N for broadcast and reduce: busbw's bytes."""
        return self.busbw_factor(n) * nbytes

    # -------------------------------------------------------------- the schedule's buffer

    def origins(self, rank: int, n: int, n_chunks: int, root: int) -> list[int | None]:
        """For each of ``rank``'s chunks, the chunk id of its own data it holds before the
        first round (None: nothing meaningful yet)."""
        chunks = list(range(n_chunks))
        if self.source == "every":
            return chunks
        if self.source == "root":
            return chunks if rank == root else [None] * n_chunks
        per_block = n_chunks // n  # "owner": each rank holds its own block
        return [c if c // per_block == rank else None for c in chunks]

    def promises(self, n: int, n_chunks: int, root: int) -> Promises:
        """What every rank must end with: (rank, [(chunk, origin, ranks), ...]) for the chunks
        it defines, in (rank, chunk) order; each must hold the contributions (r, origin) for
        the r in the bitmask ``ranks``, and no others."""
        per_block = n_chunks // self.rows("schedule_blocks", n)
        whose = {"every": lambda c: (1 << n) - 1, "root": lambda c: 1 << root,
                 "owner": lambda c: 1 << c // per_block}[self.source]
        every_chunk = [(c, c, whose(c)) for c in range(n_chunks)]
        if self.destination == "every":
            return Promises(range(n), lambda r: every_chunk)
        if self.destination == "root":
            return Promises([root], lambda r: every_chunk)
        return Promises(range(-(-n_chunks // per_block)),  # the owner of each block
                        lambda r: every_chunk[r * per_block:(r + 1) * per_block])


@dataclass(frozen=True)
class _AllToAll(CollectiveRecord):
    """Rank r's block i goes to rank i's block r: the schedule's buffer is the input twice,
    chunks of the first half the ones to send, block n + i the one received from rank i."""

    def origins(self, rank: int, n: int, n_chunks: int, root: int) -> list[int | None]:
        half = n_chunks // 2  # the same data in both halves: (rank, chunk of the first half)
        return list(islice(cycle(range(half)), n_chunks))  # c % half

    def promises(self, n: int, n_chunks: int, root: int) -> Promises:
        # k chunks per block: rank r's chunk half + c·k + j holds rank c's chunk r·k + j
        half = n_chunks // 2
        k = half // n
        owners = [1 << c for c in range(n) for _ in range(k)]  # shared by every row
        return Promises(range(n), lambda r: list(zip(
            range(half, 2 * half), [r * k + j for _ in range(n) for j in range(k)], owners)))


RECORDS: dict[str, CollectiveRecord] = {r.name: r for r in (
    CollectiveRecord("allreduce", "1", "1", "1", "every", "every", reduces=True,
                     invariant=True, replicated=True, compressible=True,
                     reference="lax.psum / pmax / pmin", busbw="2(n-1)/n",
                     composed_of=("reduce_scatter", "allgather"), sums_bools=True,
                     uneven_groups=True),
    CollectiveRecord("reduce_scatter", "n", "1", "n", "every", "owner", reduces=True,
                     compressible=True, streams=True, dual="allgather",
                     reference="lax.psum_scatter"),
    CollectiveRecord("allgather", "1", "n", "n", "owner", "every", replicated=True,
                     compressible=True, streams=True, dual="reduce_scatter",
                     reference="lax.all_gather"),
    _AllToAll("alltoall", "n", "n", "2n", "owner", "owner", reference="lax.all_to_all"),
    CollectiveRecord("broadcast", "1", "1", "1", "root", "every", rooted=True, replicated=True,
                     dual="reduce", reference="lax.all_gather, root's block", busbw="1",
                     composed_of=("scatter", "allgather")),
    CollectiveRecord("reduce", "1", "1", "1", "every", "root", rooted=True, reduces=True,
                     dual="broadcast", reference="lax.psum, zeros off the root", busbw="1",
                     composed_of=("reduce_scatter", "gather")),
    CollectiveRecord("gather", "1", "n", "n", "owner", "root", rooted=True, dual="scatter",
                     reference="lax.all_gather, zeros off the root"),
    CollectiveRecord("scatter", "n", "1", "n", "root", "owner", rooted=True, dual="gather",
                     reference="lax.all_gather of root's x, this rank's block"),
)}
# Record, CollectiveRecord's name before 0.5.0, reads it with a DeprecationWarning
__getattr__ = _renamed.module_getattr(__name__, {"Record": "CollectiveRecord"}, globals())
