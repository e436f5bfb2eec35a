"""How a collective's operands become the schedule's per-rank buffer and its result leaves it.

The lowering's half of each record (jaxcoll/ir/records.py says *what* enters and leaves, in
words): :func:`enter` and :func:`leave` turn a rank's (rows_in, width) input into the
schedule's (blocks, width) buffer and back; :class:`Layout` lays one leaf out as rows (the
public functions' ``dim``, ``split_dim``/``concat_dim`` and ``tiled``).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
from jax import lax

from jaxcoll.ir.records import CollectiveRecord


def enter(record: CollectiveRecord, buf, me, n: int):
    """This rank's (rows_in, width) input as the schedule's (blocks, width) buffer: an
    owner's input is its row of n; a buffer of 2n blocks (alltoall) is the input twice, the
    second half to receive into."""
    if record.schedule_blocks == "2n":
        return jnp.concatenate([buf, buf])  # (n, width) -> (2n, width)
    if record.source != "owner":
        return buf
    blocks = jnp.zeros((n, buf.shape[1]), buf.dtype)  # (n, width), row me is ours
    return lax.dynamic_update_slice_in_dim(blocks, buf, me, axis=0)


def leave(record: CollectiveRecord, out, me, n: int, root: int):
    """The schedule's buffer as this rank's (rows_out, width) result: an owner's row, zeros
    off the root, or the received half of a buffer of 2n blocks."""
    if record.schedule_blocks == "2n":
        return out[n:]  # (2n, width) -> (n, width): the received half
    if record.destination == "owner":  # (n, width) -> (1, width)
        return lax.dynamic_slice_in_dim(out, me, 1, axis=0)
    if record.destination == "root":
        return jnp.where(me == root, out, jnp.zeros_like(out))
    return out


@dataclass(frozen=True)
class Layout:
    """How one leaf enters a collective as a (rows, width) matrix and its result leaves it
    (the public functions' ``dim``, ``split_dim``/``concat_dim`` and ``tiled``).

    ``kind`` is the collective's :attr:`CollectiveRecord.layout`: "whole" (one row, the leaf flat),
    "scatter" (block i along ``dim`` in row i; the result is this rank's block), "gather"
    (one row; the n result rows stacked at ``dim``, or concatenated there if ``tiled``) or
    "exchange" (blocks along ``dim`` in rows as "scatter"; the n received blocks stacked or
    concatenated at ``concat``). ``dim`` and ``concat`` are checked, non-negative.
    """

    kind: str
    n: int
    dim: int = 0
    concat: int = 0
    tiled: bool = False

    def to_rows(self, leaf):
        """The leaf as (rows_in, width)."""
        if self.kind in ("whole", "gather"):
            return leaf.reshape(1, -1)  # (1, size)
        return jnp.moveaxis(leaf, self.dim, 0).reshape(self.n, -1)  # (n, size // n)

    def from_rows(self, rows, shape):
        """The (rows_out, width) result as the result leaf, for an input leaf of ``shape``."""
        n, d, tiled = self.n, self.dim, self.tiled
        if self.kind == "whole":
            return rows.reshape(shape)
        if self.kind == "scatter":  # this rank's row, shaped as its block of the leaf
            moved = [shape[d], *shape[:d], *shape[d + 1:]]  # dim d first: (n·b, *other)
            block = rows.reshape((moved[0] // n, *moved[1:]) if tiled else moved[1:])
            return jnp.moveaxis(block, 0, d) if tiled else block
        if self.kind == "gather":  # (n, size) rows stacked or concatenated along dim
            return _stack_blocks(rows.reshape(n, *shape), d, tiled)
        block = _exchanged_block(shape, d, tiled, n)  # exchange: row i is rank i's block
        if tiled:  # rows hold blocks with the split dimension first, as to_rows cut them
            moved = [block[d]] + block[:d] + block[d + 1:]
            blocks = jnp.moveaxis(rows.reshape(n, *moved), 1, d + 1)  # (n, *block)
        else:
            blocks = rows.reshape(n, *block)  # (n, *block)
        return _stack_blocks(blocks, self.concat, tiled)

    def out_shape(self, shape) -> tuple:
        """The result leaf's shape for an input leaf of ``shape``."""
        shape, n, d = list(shape), self.n, self.dim
        if self.kind == "whole":
            return tuple(shape)
        if self.kind == "scatter":
            return tuple(shape[:d] + [shape[d] // n] + shape[d + 1:] if self.tiled
                         else shape[:d] + shape[d + 1:])
        if self.kind == "gather":
            return tuple(shape[:d] + [shape[d] * n] + shape[d + 1:] if self.tiled
                         else shape[:d] + [n] + shape[d:])
        block, c = _exchanged_block(shape, d, self.tiled, n), self.concat
        return tuple(block[:c] + [block[c] * n] + block[c + 1:] if self.tiled
                     else block[:c] + [n] + block[c:])

    def dual(self) -> "Layout":
        """The layout of the transpose: scatter and gather exchange places at the same
        ``dim``; an exchange swaps its two dimensions."""
        if self.kind == "exchange":
            return Layout("exchange", self.n, self.concat, self.dim, self.tiled)
        kind = {"scatter": "gather", "gather": "scatter"}.get(self.kind, self.kind)
        return Layout(kind, self.n, self.dim, self.concat, self.tiled)


def _exchanged_block(shape, split: int, tiled: bool, n: int) -> list[int]:
    """The shape of one of the n blocks a leaf of ``shape`` is split into along ``split``."""
    block = list(shape)
    if tiled:
        block[split] //= n
    else:
        del block[split]
    return block


def _stack_blocks(blocks, d: int, tiled: bool):
    """(n, *block) blocks stacked as a new dimension d, or (tiled) concatenated along d."""
    stacked = jnp.moveaxis(blocks, 0, d)  # n inserted at d
    if not tiled:
        return stacked
    shape = list(blocks.shape[1:])
    shape[d] *= blocks.shape[0]
    return stacked.reshape(shape)  # dims d, d+1 merged: (..., n * block[d], ...)
