"""What each collective *is*, written once: its buffer layouts, what it types like, its dual.

Plain data, no JAX: the primitives, the verifier, the cost model, the main job (check.py), the
benchmark's conventions and the tests read it.

The public functions pack a pytree into a (rows, width) buffer; a primitive takes ``rows_in``
rows and gives ``rows_out`` ("1" or "n", n = ranks). Its schedule runs on a buffer of
``schedule_blocks`` blocks ("1", "n", or "2n" for alltoall: the input twice, rows n.. receive;
see symbolic.py). ``dual`` names the primitive whose schedule is this one's run backwards
(rounds reversed, src and dst swapped, copy and reduce exchanged): the transpose. allreduce and
alltoall are their own transposes and run their own schedule for it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Record:
    name: str
    rows_in: str
    rows_out: str
    schedule_blocks: str
    rooted: bool = False
    reduces: bool = False
    invariant: bool = False  # typed invariant over the axis, as lax's built-in (psum) is
    replicated: bool = False  # the same result on every rank: unmapped under vmap, as lax's
    dual: str = ""  # "" : its own transpose, with its own schedule
    reference: str = ""  # the lax built-in it matches (or is built from)
    busbw: str = "(n-1)/n"  # nccl-tests' busbw / algbw (doc/PERFORMANCE.md)

    @property
    def layout(self) -> str:
        """How nccl-tests sizes it: "whole" (S is the buffer), "scatter" (S is the input, n
        blocks) or "gather" (S is the output, n blocks)."""
        if self.rows_in == "n":
            return "scatter"
        return "gather" if self.rows_out == "n" else "whole"

    def busbw_factor(self, n: int) -> float:
        """nccl-tests' busbw / algbw on n ranks: 2(n-1)/n, (n-1)/n or 1."""
        return {"2(n-1)/n": 2 * (n - 1) / n, "(n-1)/n": (n - 1) / n, "1": 1.0}[self.busbw]

    def rows(self, which: str, n: int) -> int:
        """``rows_in``/``rows_out``/``schedule_blocks`` as a number for n ranks."""
        return {"1": 1, "n": n, "2n": 2 * n}[getattr(self, which)]


RECORDS: dict[str, Record] = {r.name: r for r in (
    Record("allreduce", "1", "1", "1", reduces=True, invariant=True, replicated=True,
           reference="lax.psum / pmax / pmin", busbw="2(n-1)/n"),
    Record("reduce_scatter", "n", "1", "n", reduces=True, dual="allgather",
           reference="lax.psum_scatter"),
    Record("allgather", "1", "n", "n", dual="reduce_scatter", replicated=True,
           reference="lax.all_gather"),
    Record("alltoall", "n", "n", "2n", reference="lax.all_to_all"),
    Record("broadcast", "1", "1", "1", rooted=True, dual="reduce", replicated=True,
           reference="lax.all_gather, root's block", busbw="1"),
    Record("reduce", "1", "1", "1", rooted=True, reduces=True, dual="broadcast",
           reference="lax.psum, zeros off the root", busbw="1"),
    Record("gather", "1", "n", "n", rooted=True, dual="scatter",
           reference="lax.all_gather, zeros off the root"),
    Record("scatter", "n", "1", "n", rooted=True, dual="gather",
           reference="lax.all_gather of root's x, this rank's block"),
)}
