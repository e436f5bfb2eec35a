"""Chunk-id tables stored by their symmetry (``Ids``), made (``compact``) and read back
(``id_values``, many at once), for the lowering plan (plan.py) and its check (validate.py).

Plain numpy, no JAX: the executor computes one rank's row of a table in JAX from the same
stored arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from itertools import chain
from operator import attrgetter
from typing import NamedTuple

import numpy as np


class AffineIds(NamedTuple):
    """An "affine" table's arrays: ``offset + (base + per_step * step + stride * rank) mod
    modulus``; ``base``, ``stride``, ``offset`` (n_steps, n_moved) or one row each, where
    ``per_step`` (1, n_moved) moves the ids from one step to the next (else 0)."""
    base: np.ndarray
    stride: np.ndarray
    offset: np.ndarray
    per_step: np.ndarray


class XorIds(NamedTuple):
    """An "xor" table's array: ``base ^ (rank & mask)``, ``base`` (n_steps, n_moved)."""
    base: np.ndarray


class MirrorIds(NamedTuple):
    """A "mirror" table's arrays: the affine form (no ``per_step``) with ``base`` negated at
    odd ranks."""
    base: np.ndarray
    stride: np.ndarray
    offset: np.ndarray


class GridIds(NamedTuple):
    """A "grid" table's arrays: ``offset + grid(base, rank)``, where grid moves each level's
    coordinate of ``base`` by ``stride`` times the rank's (mod the level's size); ``base``,
    ``offset`` (n_steps, n_moved) or one row each."""
    base: np.ndarray
    offset: np.ndarray


class RowsIds(NamedTuple):
    """A "rows" table's arrays: ``rows`` (n_steps, n_taking, n_moved) of the taking-part
    ``ranks`` (n_taking,), ``default`` (n_steps, n_moved) for every other rank."""
    ranks: np.ndarray
    rows: np.ndarray
    default: np.ndarray


class TableIds(NamedTuple):
    """A "table" table's array: ``table`` (n_steps, n_ranks, n_moved), as it is."""
    table: np.ndarray


_ARRAYS = {"affine": AffineIds, "xor": XorIds, "mirror": MirrorIds, "grid": GridIds,
           "rows": RowsIds, "table": TableIds}


@dataclass(frozen=True, eq=False)
class Ids:
    """A (n_steps, n_ranks, n_moved) table of chunk ids, stored by its symmetry.

    ``kind``: "affine": ``offset + (base + per_step * step + stride * rank) mod modulus``
    (rotations: rings, pairwise); "xor": ``base ^ (rank & mask)`` (recursive doubling,
    halving); "mirror": the affine form with ``base`` negated at odd ranks (Swing);
    "grid": ``offset + grid(base, rank)``, each level's coordinate (of ``sizes``, row-major)
    of ``base`` moved by ``stride`` times the rank's (hierarchical rings);
    "rows": ``rows[step, j]`` for rank ``ranks[j]``, ``default[step]`` for every other rank
    (rounds that few ranks take part in); "table": as it is. ``base``, ``stride``, ``offset``:
    (n_steps, n_moved), or one row each where ``per_step`` (1, n_moved) moves the ids from
    one step to the next (a ring's loop); ``per_step`` is 0 otherwise. With ``first_only``
    only each row's first id is kept (its ids are a run c, c+1, ...).

    ``arrays`` is the kind's named tuple (:class:`AffineIds`, :class:`XorIds`,
    :class:`MirrorIds`, :class:`RowsIds`, :class:`TableIds`), read by name; a plain tuple
    given in its order becomes one.
    """

    kind: str
    n_steps: int
    n_moved: int
    arrays: AffineIds | XorIds | MirrorIds | GridIds | RowsIds | TableIds
    modulus: int = 0
    first_only: bool = False
    mask: int = -1  # xor: ``base ^ (rank & mask)``
    sizes: tuple[int, ...] = ()  # grid: the levels' sizes, outermost first
    stride: int = 0  # grid: how far each coordinate moves per unit of the rank's

    def __post_init__(self):
        named = _ARRAYS[self.kind]
        if type(self.arrays) is not named:
            object.__setattr__(self, "arrays", named(*self.arrays))

    def table(self, n_ranks: int) -> np.ndarray:
        """The full (n_steps, n_ranks, n_moved) table back (numpy; the executor computes one
        rank's row of it in JAX)."""
        return self.rows(np.arange(n_ranks))

    def rows(self, ranks) -> np.ndarray:
        """(n_steps, len(ranks), n_moved): the table's rows of ``ranks`` alone."""
        ranks = np.asarray(ranks, dtype=np.int64).ravel()
        return id_values([(self, ranks)]).reshape(self.n_steps, len(ranks), self.n_moved
                                                  ).astype(np.int32)


def kept_shapes(items) -> np.ndarray:
    """(items, 3): each (ids, ranks) item's steps, ranks and stored columns (1 where only
    first ids are kept)."""
    return np.fromiter(chain.from_iterable(
        (ids.n_steps, len(ranks), 1 if ids.first_only else ids.n_moved) for ids, ranks in items),
        np.int64, 3 * len(items)).reshape(-1, 3)


def id_values(items, runs: bool = True, shapes: np.ndarray | None = None) -> np.ndarray:
    """``Ids.rows`` of many (ids, ranks) at once: each item's (n_steps, len(ranks), n_moved)
    values in C order, one item after the other (int64); ``ranks``: a 1-D sequence of ints.
    numpy's work is done once per kind of Ids, not once per item, so checking a plan of
    thousands of rounds stays cheap. With ``runs=False``, an Ids that keeps only first ids
    gives only those: (n_steps, len(ranks), 1), its run c, c+1, ... left for the caller to
    write out. ``shapes``: the items' ``kept_shapes``, where the caller has them."""
    shapes = kept_shapes(items) if shapes is None else shapes
    counts = shapes.prod(axis=1)
    out = np.zeros(int(counts.sum()), dtype=np.int64)
    starts = np.cumsum(counts) - counts
    kinds = [ids.kind for ids, _ in items]
    for kind in set(kinds):
        which = [i for i, k in enumerate(kinds) if k == kind]
        batch = _Batch(items, which, shapes, counts)
        out[starts[batch.which][batch.item] + batch.local] = _VALUES[kind](batch)
    if not runs or not any(ids.first_only and ids.n_moved > 1 for ids, _ in items):
        return out
    return _written_out(out, items, shapes, starts)


def _written_out(kept: np.ndarray, items, shapes: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The values of ``kept`` (``id_values(..., runs=False)``) with each first id c of an Ids
    that keeps only those written out as c, c + 1, ..., its run."""
    n_moved = np.array([ids.n_moved for ids, _ in items], dtype=np.int64)
    first_only = np.array([ids.first_only for ids, _ in items], dtype=bool)
    counts = shapes[:, 0] * shapes[:, 1] * n_moved
    item = np.repeat(np.arange(len(items)), counts)
    local = np.arange(len(item)) - (np.cumsum(counts) - counts)[item]
    moved, run = np.maximum(n_moved, 1)[item], first_only[item]
    column, row = local % moved, local // moved  # row: step x rank
    return kept[starts[item] + np.where(run, row, local)] + np.where(run, column, 0)


def flattened(arrays: list) -> tuple[np.ndarray, np.ndarray]:
    """Integer arrays flattened one after the other (int64; none: empty), and each one's
    size. Where they share one dtype (Ids store int32s), their bytes joined are read a few
    times faster than numpy concatenates ten thousand small arrays."""
    try:
        dtypes = set(map(attrgetter("dtype"), arrays))
    except AttributeError:  # some are sequences
        dtypes = set()
    if len(dtypes) == 1 and (dtype := dtypes.pop()).kind in "iu":
        data = list(map(np.ndarray.tobytes, arrays))
        return (np.frombuffer(b"".join(data), dtype).astype(np.int64),
                np.fromiter(map(len, data), np.int64, len(data)) // dtype.itemsize)
    arrays = [np.asarray(a) for a in arrays]
    return (np.concatenate(arrays + [np.zeros(0, np.int64)], axis=None, dtype=np.int64),
            np.fromiter(map(attrgetter("size"), arrays), np.int64, len(arrays)))


class _Batch:
    """The entries (step s, rank, stored column k) of some items of one kind of Ids,
    flattened: per entry its item (``item``, into ``which``), place in the item (``local``),
    s, rank and k (0 alone where only first ids are kept)."""

    def __init__(self, items, which: list[int], shapes: np.ndarray, counts: np.ndarray):
        self.ids = [items[i][0] for i in which]
        self.which = np.array(which)
        _, n_ranks, self.kept = shapes[self.which].T  # kept: stored columns per item
        count = counts[self.which]
        self.item = np.repeat(np.arange(len(which)), count)
        self.local = np.arange(len(self.item)) - (np.cumsum(count) - count)[self.item]
        kept, n_ranks_e = np.maximum(self.kept, 1)[self.item], np.maximum(n_ranks, 1)[self.item]
        self.k = self.local % kept
        self.s = self.local // kept // n_ranks_e
        ranks = flattened([items[i][1] for i in which])[0]
        self.rank = ranks[(np.cumsum(n_ranks) - n_ranks)[self.item] + self.local // kept
                          % n_ranks_e] if len(self.item) else np.zeros(0, np.int64)
        self._pack()

    def _pack(self) -> None:
        """Every item's arrays flattened into one (int64), with each (item, position)'s size
        and first dimension: a few numpy calls for all of them, not a few per position."""
        n_arrays = len(self.ids[0].arrays)
        if {n_arrays} != set(map(len, map(attrgetter("arrays"), self.ids))):
            raise ValueError(f"{self.ids[0].kind!r} ids stored as different numbers of arrays")
        arrays = list(chain.from_iterable(map(attrgetter("arrays"), self.ids)))
        n = len(arrays)  # C-level maps: a plan of thousands of rounds has tens of thousands
        self._flat, sizes = flattened(arrays)
        self._sizes = sizes.reshape(-1, n_arrays)
        self._first = np.fromiter(map(len, arrays), np.int64, n).reshape(-1, n_arrays)
        self._position = np.repeat(np.tile(np.arange(n_arrays), len(self.ids)),
                                   self._sizes.ravel())  # each value's position
        self._check_sizes()

    def _check_sizes(self) -> None:
        """Every stored array holds a row (of ``kept`` ids) per step, or one for every step
        where its reader allows, as the executor reads it: no entry is read from outside its
        own array."""
        kind, first, sizes = self.ids[0].kind, self._first, self._sizes
        n_steps = np.array([ids.n_steps for ids in self.ids], dtype=np.int64)[:, None]
        kept = self.kept[:, None]
        rows_ok = (first == 1) | (first == n_steps)
        expected = first * kept  # rows of kept ids
        if kind == "rows":  # ranks (n_taking,), rows (n_steps, n_taking, kept), default
            ranks, rows, default = map(self._index_of, RowsIds._fields)
            n_taking = sizes[:, ranks]
            expected = np.column_stack([first[:, ranks], first[:, rows] * n_taking * kept[:, 0],
                                        first[:, default] * kept[:, 0]])
            rows_ok[:, ranks], rows_ok[:, rows] = True, first[:, rows] == n_steps[:, 0]
        elif kind == "table":  # (n_steps, n_ranks, kept)
            n_ranks = np.array([(ids.arrays.table.shape + (0, 0))[1] for ids in self.ids])
            expected, rows_ok = first * n_ranks[:, None] * kept, first == n_steps
        if not (rows_ok & (sizes == expected)).all():
            raise ValueError(f"{kind!r} ids whose arrays are not the rows of their steps")

    def per_item(self, name: str) -> np.ndarray:
        """An attribute of each item (modulus, mask) at every entry."""
        return np.fromiter((getattr(ids, name) for ids in self.ids), np.int64,
                           len(self.ids))[self.item]

    def _index_of(self, name: str) -> int:
        """Where the items' array ``name`` is among their arrays (their kind's field)."""
        return type(self.ids[0].arrays)._fields.index(name)

    def packed(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The items' array ``name`` (``base``, ...) flattened one after the other (int64),
        where each starts, and each one's first dimension."""
        position = self._index_of(name)
        sizes = self._sizes[:, position]
        flat = self._flat if self._sizes.shape[1] == 1 else self._flat[self._position == position]
        return flat, np.cumsum(sizes) - sizes, self._first[:, position]

    def stored(self, name: str) -> np.ndarray:
        """Each entry's value of the items' array ``name``, stored (rows, kept): one row per
        step, or one row for every step."""
        flat, at, n_rows = self.packed(name)
        row = np.where(n_rows[self.item] > 1, self.s, 0)
        return flat[at[self.item] + row * self.kept[self.item] + self.k]


def _affine_values(b: _Batch) -> np.ndarray:
    base, stride, offset, per_step = map(b.stored, ("base", "stride", "offset", "per_step"))
    return offset + (base + per_step * b.s + stride * b.rank) % b.per_item("modulus")


def _xor_values(b: _Batch) -> np.ndarray:
    return b.stored("base") ^ (b.rank & b.per_item("mask"))


def _mirror_values(b: _Batch) -> np.ndarray:
    base, stride, offset = map(b.stored, ("base", "stride", "offset"))
    return offset + ((1 - 2 * (b.rank % 2)) * base + stride * b.rank) % b.per_item("modulus")


def grid_moved(base, rank, sizes: tuple[int, ...], stride: int):
    """``base`` (within a block of prod(sizes) ids) with each level's coordinate moved by
    ``stride`` times ``rank``'s, mod the level's size (numpy arrays, or JAX's: traced)."""
    moved, place = 0, 1
    for size in reversed(sizes):
        moved = moved + (base // place % size + stride * (rank // place % size)) % size * place
        place *= size
    return moved


def _grid_values(b: _Batch) -> np.ndarray:
    base, offset = b.stored("base"), b.stored("offset")
    values = np.empty_like(base)
    for i, ids in enumerate(b.ids):
        at = b.item == i
        values[at] = offset[at] + grid_moved(base[at], b.rank[at], ids.sizes, ids.stride)
    return values


def _rows_values(b: _Batch) -> np.ndarray:
    """A taking-part rank's own row, the default row elsewhere."""
    taking_part, starts, n_taking = b.packed("ranks")
    if not len(taking_part):
        return b.stored("default")
    key = np.repeat(np.arange(len(b.ids)), n_taking) * (1 << 32) + taking_part  # item, rank
    order = np.argsort(key, kind="stable")
    wanted = b.item * (1 << 32) + b.rank
    at = np.minimum(np.searchsorted(key[order], wanted), len(key) - 1)
    mine = key[order[at]] == wanted
    position = order[at] - starts[b.item]  # among the item's taking-part ranks
    rows, row_at, _ = b.packed("rows")  # each (n_steps, n_taking, kept)
    own = rows[np.where(mine, row_at[b.item] + (b.s * n_taking[b.item] + position)
                        * b.kept[b.item] + b.k, 0)]
    return np.where(mine, own, b.stored("default"))


def _table_values(b: _Batch) -> np.ndarray:
    flat, at, _ = b.packed("table")  # each (n_steps, n_ranks, kept)
    n_ranks = np.fromiter((ids.arrays.table.shape[1] for ids in b.ids), np.int64,
                          len(b.ids))[b.item]
    if ((b.rank < 0) | (b.rank >= n_ranks)).any():
        raise IndexError("a rank outside the table's ranks")
    return flat[at[b.item] + (b.s * n_ranks + b.rank) * b.kept[b.item] + b.k]


_VALUES = {"affine": _affine_values, "xor": _xor_values, "mirror": _mirror_values,
           "grid": _grid_values, "rows": _rows_values, "table": _table_values}


def compact(table: np.ndarray, first_only: bool = False, n_chunks: int = 0) -> Ids:
    """``table`` (n_steps, n_ranks, n_moved) in the most compact form that reproduces it
    (``n_chunks``: the schedule's, a modulus worth trying)."""
    n_steps, n_ranks, n_moved = table.shape
    form = partial(Ids, n_steps=n_steps, n_moved=n_moved, first_only=first_only)
    if first_only:
        table = table[..., :1]
    ranks = np.arange(n_ranks)[None, :, None]
    first = table[:, 0, :]  # (n_steps, n_moved)
    if n_ranks > 1:
        for modulus in sorted({int(table.max()) + 1, n_ranks, n_chunks} - {0}):
            offset = first // modulus * modulus
            base, stride = first - offset, (table[:, 1, :] - first) % modulus
            values = offset[:, None] + (base[:, None] + stride[:, None] * ranks) % modulus
            if np.array_equal(values, table):
                return form(kind="affine", arrays=int32s(*over_steps(base, stride, offset,
                                                                      modulus)),
                            modulus=modulus)
        if np.array_equal(first[:, None] ^ ranks, table):
            return form(kind="xor", arrays=int32s(first))
    per_rank = table.transpose(1, 0, 2).reshape(n_ranks, -1)  # (n_ranks, n_steps·n_moved)
    rows, counts = np.unique(per_rank, axis=0, return_counts=True)
    default = rows[np.argmax(counts)]  # what most ranks hold: the idle ones'
    taking_part = np.flatnonzero((per_rank != default).any(axis=1))
    if 0 < len(taking_part) <= n_ranks // 2:
        return form(kind="rows", arrays=int32s(taking_part, table[:, taking_part],
                                               default.reshape(n_steps, -1)))
    return form(kind="table", arrays=int32s(table))


def over_steps(base, stride, offset, modulus: int) -> tuple:
    """(base, stride, offset, per_step) of an affine table: where the rounds of a loop move
    its ids by a constant (a ring's (r - step) mod n), one row each and ``per_step``;
    otherwise a row per step and ``per_step`` 0."""
    per_step = (base[1:2] - base[:1]) % modulus  # (1, n_moved)
    steps = np.arange(base.shape[0])[:, None]
    if (base.shape[0] > 1 and (stride == stride[0]).all() and (offset == offset[0]).all()
            and np.array_equal((base[0] + per_step * steps) % modulus, base)):
        return base[:1], stride[:1], offset[:1], per_step
    return base, stride, offset, np.zeros_like(base[:1])


def int32s(*arrays) -> tuple:
    """The arrays as int32 numpy arrays (the form Ids stores)."""
    return tuple(np.asarray(a, dtype=np.int32) for a in arrays)
