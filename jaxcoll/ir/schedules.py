"""Schedules: a collective algorithm as plain data, with no JAX in it.

Every rank holds the same buffer layout: ``n_chunks`` chunks of equal length. A schedule is a
list of rounds; a round is a set of transfers that happen at the same time (every transfer of a
round reads the buffers as they were before the round); a transfer moves some chunks from one
rank to another and either copies them over the receiver's chunks or reduces into them. The
receiver's chunks are the same ids unless the transfer says ``into`` which (AllToAll moves a
rank's chunk j into its destination's chunk i). A transfer from a rank to itself is a *local*
copy or reduce (no link: MSCCL's ``cpy`` and ``re``), of chunks into other chunks.

After the collective's chunks a rank may hold ``n_scratch`` scratch chunks (ids ``n_chunks``
on), which start with no data and are promised nothing. The input starts at chunk
``input_at`` and the result must end at ``output_at`` (each a run of ``n_chunks``): both 0 is
in place; an *out-of-place* schedule (MSCCL's separate input and output buffers) keeps its
input in scratch, and its output chunks start with no data.

The ring reduce-scatter is then almost the seed's pseudocode::

    Schedule.build("ring reduce_scatter", n, n_chunks=n, rounds=[
        [Transfer(r, (r + 1) % n, (r - step - 1) % n, reduce=True) for r in range(n)]
        for step in range(n - 1)])

Schedules concatenate with ``+`` (ring allreduce = ring reduce_scatter + ring allgather).

Where every rank does the same thing moved by its rank, a round stores only rank 0's transfers
and a :class:`Symmetry` (one rank's program plus its symmetry), so a 4096-rank ring is 8190
one-transfer rounds, not 33 million transfers::

    ring = Symmetry("rotate", n, modulus=n)  # rank r: rank 0's transfers moved r ranks on
    Schedule.build("ring reduce_scatter", n, n_chunks=n, rounds=[
        Round([Transfer(0, 1, (-step - 1) % n, reduce=True)], ring) for step in range(n - 1)])

The registered families are written per rank and leave that form to
:func:`jaxcoll.ir.per_rank.rounds`, which derives it (the symmetry's numbers) from what every
rank sends.

``round_.transfers`` (and printing, drawing) write every rank's out; ``cost``, ``simulate``,
``verify`` and the executor's plan read the compact form (``Schedule.explicit()`` is the same
schedule written out, which they treat alike).

One job, what a schedule is; much of its length is the public classes' docstrings and examples.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from math import gcd
from typing import Iterable

import numpy as np

from jaxcoll.ir import _renamed
from jaxcoll.ir.records import RECORDS


class ScheduleError(ValueError):
    """A schedule that cannot run, or does not do what its collective promises.

    The message names the round, transfer, rank and chunk at fault. A ``ValueError``.
    """


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Transfer:
    """One move of chunks from rank ``src`` to rank ``dst``, copied or reduced on arrival.

    ``src`` sends its chunks ``chunks`` to ``dst``, which copies or reduces them into its
    chunks ``into`` (by default the same ids). A transfer from a rank to itself is a local
    copy or reduce, of chunks into other chunks.

    Attributes:
      src: the sending rank, an int >= 0
        (numpy ints are taken and made ints).
      dst: the receiving rank, an int >= 0
        (``src`` itself for a local copy or reduce).
      chunks: the sender's chunk ids, a tuple of ints >= 0
        (given as an int or any iterable of ints).
      reduce: True to add into the receiver's chunks,
        False to copy over them.
      into: the receiver's chunk ids, one per sent chunk and none twice
        (given like ``chunks``; default: ``chunks``).

    Raises:
      ScheduleError: if a rank or chunk id is not an int >= 0, ``chunks`` is empty,
        ``into`` differs from it in length or names a chunk twice, or a local transfer moves
        a chunk onto itself.

    >>> t = Transfer(0, 1, [2, 3], reduce=True)
    >>> t.chunks, t.into
    ((2, 3), (2, 3))
    >>> print(t, Transfer(2, 0, 1, reduce=False, into=3))
    0->1 [2,3]+ 2->0 [1]>[3]=
    """

    src: int
    dst: int
    chunks: tuple[int, ...]
    reduce: bool
    into: tuple[int, ...]

    def __init__(self, src: int, dst: int, chunks: int | Iterable[int], reduce: bool,
                 into: int | Iterable[int] | None = None):
        chunks = _ids(chunks)
        into = chunks if into is None else _ids(into)
        if (type(src) is int and type(dst) is int and 0 <= src and src != dst and 0 <= dst
                and (into is chunks or len(into) == len(chunks) and _largest_known(chunks)
                     is not None) and _largest_known(into) is not None):
            pass  # long ids checked before, shared by many transfers (naive's whole buffer)
        elif not (type(src) is int and type(dst) is int and 0 <= src and 0 <= dst  # the usual
                  and chunks and len(into) == len(chunks) and min(chunks) >= 0
                  and min(into) >= 0 and (len(into) == 1 or len(set(into)) == len(into))
                  and (src != dst or all(c != i for c, i in zip(chunks, into)))):
            _check_transfer(src, dst, chunks, into)  # says what is wrong, or takes numpy ints
        else:
            _remember(into)
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


def _check_transfer(src, dst, chunks: tuple, into: tuple) -> None:
    """Raise ScheduleError saying what is wrong with a transfer (nothing: it is fine)."""
    where = f"Transfer({src!r}, {dst!r}, {chunks}, into={into})"
    if not (_is_int(src) and _is_int(dst)):
        raise ScheduleError(f"{where}: src and dst must be ranks (ints)")
    if len(into) != len(chunks):
        raise ScheduleError(f"{where}: chunks and into differ in length")
    if not chunks:
        raise ScheduleError(f"{where}: moves no chunk")
    if len(set(into)) < len(into):  # one write per chunk: the executor scatters them
        raise ScheduleError(f"{where}: writes a chunk twice (into names it twice); two "
                            "transfers can each reduce into it")
    if src == dst and any(c == i for c, i in zip(chunks, into)):
        raise ScheduleError(f"{where}: a local transfer (src == dst) moves a chunk onto itself")
    if min(src, dst) < 0 or min(chunks + into) < 0:
        raise ScheduleError(f"{where}: ranks and chunk ids must be >= 0")


# Long tuples of chunk ids found to be distinct ints >= 0, by identity: (the tuple, its largest
# id). Naive's reduce_scatter and allgather share one tuple of every id between n - 1
# transfers; checked once, not n - 1 times (n² ids at 32,768 ranks). The tuple is kept, so
# its id is not reused while it is here.
_KNOWN_IDS: dict[int, tuple[tuple[int, ...], int]] = {}
_KNOWN_LONG = 64  # ids at least, to be remembered
_KNOWN_MOST = 16  # tuples remembered, the oldest forgotten first


def _largest_known(ids: tuple[int, ...]) -> int | None:
    """The largest id of ``ids`` where this very tuple was found distinct ints >= 0 before,
    else None."""
    entry = _KNOWN_IDS.get(id(ids))
    return entry[1] if entry is not None and entry[0] is ids else None


def _remember(ids: tuple[int, ...]) -> None:
    """Remember ``ids``, distinct ints >= 0 (a transfer's ``into``, checked), if long."""
    if len(ids) >= _KNOWN_LONG and type(ids) is tuple:
        if len(_KNOWN_IDS) >= _KNOWN_MOST:
            _KNOWN_IDS.pop(next(iter(_KNOWN_IDS)), None)
        _KNOWN_IDS[id(ids)] = (ids, max(ids))


def _ids(chunks: int | Iterable[int]) -> tuple[int, ...]:
    """Chunk ids as a tuple of ints (a tuple of ints itself, shared: not copied)."""
    kind = type(chunks)
    if kind is int:
        return (chunks,)
    if kind is tuple and _largest_known(chunks) is not None:
        return chunks
    if (kind is tuple or kind is list) and all(type(c) is int for c in chunks):
        return chunks if kind is tuple else tuple(chunks)
    if _is_int(chunks):
        return (int(chunks),)
    chunks = tuple(chunks) if hasattr(chunks, "__iter__") else (chunks,)
    if not all(map(_is_int, chunks)):
        raise ScheduleError(f"chunk ids must be ints, not {chunks}")
    return tuple(map(int, chunks))


@dataclass(frozen=True)
class Symmetry:
    """How every rank's part of a round follows from rank 0's.

    One rank's program plus its symmetry: rank 0's transfer 0 -> d of chunks C into I is, at
    rank r, the transfer r -> ``rank(d, r)`` of chunks ``chunk(C, r)`` into ``chunk(I, r)``.

    - "rotate" (rings, pairwise, Bruck): ``rank(x, r) = (x + r) mod n``; ``chunk(c, r)`` moves
      c by ``stride·r`` within its block of ``modulus`` chunks (a ring's ``(c + r) mod n``).
    - "xor" (recursive doubling and halving; n a power of two): ``rank(x, r) = x ^ r``;
      ``chunk(c, r) = c ^ (r & mask)`` (mask 0: every rank moves the same chunk ids).
    - "mirror" (Swing; n even): even ranks as "rotate", odd ones mirrored:
      ``rank(x, r) = (r - x) mod n`` and ``chunk(c, r)`` moves ``-c`` by ``stride·r`` (in its
      block): the even ranks' partner r + d is the odd ones' r - d.
    - "grid" (hierarchical, k levels of ``sizes``, outermost first; ranks numbered row-major as
      JAX numbers a tuple axis): a rotation per level, coordinate by coordinate:
      ``rank(x, r)`` has coordinate ``(x_l + r_l) mod s_l`` at level l, and ``chunk(c, r)``
      moves the block c % modulus (a point of the same grid: modulus = n) by ``stride·r_l``
      at each level l. A grid moves sets of blocks: :meth:`at` lists a transfer's
      (chunk, into) pairs in increasing chunk order, and :attr:`Round.transfers` lists the
      ranks line by line along the levels the transfer crosses (:meth:`order`).

    Attributes:
      kind: ``"rotate"``, ``"xor"``, ``"mirror"`` or ``"grid"``
        (above).
      n_ranks: the number of ranks, an int >= 1
        (a power of two for "xor", even for "mirror", the product of ``sizes`` for "grid").
      stride: how far chunk ids move per rank ("rotate", "mirror"; per coordinate, "grid");
        ``n_ranks`` strides must be a multiple of ``modulus`` ("rotate", "mirror").
      modulus: the size of the blocks chunk ids move within
        ("rotate", "mirror"; >= 1; "grid": ``n_ranks``).
      mask: the bits of the rank that flip chunk ids
        ("xor"; >= 0).
      sizes: the levels' sizes, outermost first, a tuple of ints >= 1
        ("grid" only; empty for the others).

    Raises:
      ScheduleError: if the kind is unknown
        or the numbers do not fit it (above).

    >>> ring = Symmetry("rotate", 4, modulus=4)
    >>> print(ring.at(Transfer(0, 1, 3, reduce=True), 2))  # rank 0's transfer, at rank 2
    2->3 [1]+
    >>> nodes = Symmetry("grid", 6, modulus=6, sizes=(3, 2))  # 3 nodes of 2 GPUs
    >>> print(nodes.at(Transfer(0, 1, [0, 2, 4], reduce=True), 3))  # rank (1, 1)
    3->2 [1,3,5]+
    """

    kind: str
    n_ranks: int
    stride: int = 1
    modulus: int = 0
    mask: int = 0
    sizes: tuple[int, ...] = ()

    def __post_init__(self):
        where = f"Symmetry({self.kind!r}, {self.n_ranks}, stride={self.stride}, " \
                f"modulus={self.modulus}, mask={self.mask}" + (
                    f", sizes={self.sizes!r})" if self.sizes else ")")
        if self.kind not in ("rotate", "xor", "mirror", "grid"):
            raise ScheduleError(f"{where}: kind must be 'rotate', 'xor', 'mirror' or 'grid'")
        if not all(_is_int(v) for v in (self.n_ranks, self.stride, self.modulus, self.mask)):
            raise ScheduleError(f"{where}: n_ranks, stride, modulus and mask must be ints")
        if self.n_ranks < 1:
            raise ScheduleError(f"{where}: n_ranks must be >= 1")
        if (self.kind == "grid") != bool(self.sizes):
            raise ScheduleError(f"{where}: sizes are given for 'grid', and only for it")
        if self.kind == "grid":
            if not (type(self.sizes) is tuple and all(_is_int(s) and s >= 1 for s in self.sizes)
                    and int(np.prod(self.sizes)) == self.n_ranks == self.modulus):
                raise ScheduleError(f"{where}: 'grid' needs sizes, a tuple of ints >= 1 whose "
                                    "product is n_ranks, and modulus=n_ranks")
            return  # each level's chunk move is a rotation of its s_l values: it closes
        if self.kind == "xor":
            if self.n_ranks & (self.n_ranks - 1):
                raise ScheduleError(f"{where}: 'xor' needs a power of two ranks")
            if self.mask < 0:
                raise ScheduleError(f"{where}: 'xor' needs a mask >= 0")
            return
        if self.kind == "mirror" and self.n_ranks % 2:
            raise ScheduleError(f"{where}: 'mirror' needs an even number of ranks")
        if self.modulus < 1:
            raise ScheduleError(f"{where}: {self.kind!r} needs a modulus >= 1")
        # Rank r's chunk move is r strides; n ranks on is rank r again, so n strides must go
        # once round the block: only then do two ranks' moves compose as the ranks do, which
        # the executor (rank 0's ids moved by the rank) and verify's one-rank view rely on.
        if self.stride * self.n_ranks % self.modulus:
            raise ScheduleError(f"{where}: the stride does not close its cycle: "
                                f"{self.n_ranks} ranks x stride {self.stride} is not a multiple "
                                f"of the modulus {self.modulus}")

    def sign(self, r):
        """-1 where rank r mirrors rank 0's program ("mirror": odd r), else 1."""
        return 1 - 2 * (r % 2) if self.kind == "mirror" else 1

    def rank(self, x, r):
        """Where rank 0's partner x is seen from rank r (ints or numpy arrays)."""
        if self.kind == "xor":
            return x ^ r
        if self.kind == "grid":
            return self._grid(x, r, 1)
        return (self.sign(r) * x + r) % self.n_ranks

    def chunk(self, c, r):
        """Rank 0's chunk id c as rank r moves it (ints or numpy arrays)."""
        if self.kind == "xor":
            return c ^ (r & self.mask)
        m = self.modulus
        if self.kind == "grid":
            return c - c % m + self._grid(c % m, r, self.stride)
        return c - c % m + (self.sign(r) * (c % m) + self.stride * r) % m

    def _grid(self, x, r, times: int):
        """The grid point whose coordinate at each level l is (x_l + times·r_l) mod s_l (ints
        or numpy arrays)."""
        moved, place = 0, 1
        for size in reversed(self.sizes):
            moved = moved + (x // place % size + times * (r // place % size)) % size * place
            place *= size
        return moved

    def sender(self, d: int) -> int:
        """The rank whose copy of rank 0's transfer to ``d`` arrives at rank 0."""
        if self.kind == "xor" or self.kind == "mirror" and d % 2:
            return d
        if self.kind == "grid":  # coordinate -d_l at every level
            return self._grid(0, d, -1)
        return (-d) % self.n_ranks

    def order(self, dst: int) -> list[int] | range:
        """The ranks in the order :attr:`Round.transfers` lists their copies of rank 0's
        transfer to ``dst``: 0, 1, ..., n - 1; for "grid", line by line along the levels
        where ``dst`` differs from rank 0 (the other levels' coordinates row-major, then
        along the line), as the hierarchical family lists a ring per line."""
        if self.kind != "grid":
            return range(self.n_ranks)
        crossed = np.array(np.unravel_index(dst, self.sizes)) != 0
        levels = np.argsort(crossed, kind="stable").tolist()  # the crossed levels last
        return np.arange(self.n_ranks).reshape(self.sizes).transpose(levels).ravel().tolist()

    def partners(self, dst: int) -> tuple[np.ndarray, np.ndarray]:
        """(n,) every rank r and (n,) where its copy of rank 0's transfer to ``dst`` goes."""
        ranks = np.arange(self.n_ranks)
        return ranks, self.rank(np.full_like(ranks, dst), ranks)

    def pairs(self, dst: int) -> tuple[tuple[int, int], ...]:
        """``partners(dst)`` as (rank, partner) pairs, a ppermute's (one shared tuple per
        symmetry and dst: equal rounds compare as the same object)."""
        return _pairs(self, dst)

    def at(self, t: Transfer, r: int) -> Transfer:
        """Rank 0's transfer ``t`` as rank r makes it ("grid": its (chunk, into) pairs in
        increasing chunk order)."""
        chunks, into = [self.chunk(c, r) for c in t.chunks], [self.chunk(c, r) for c in t.into]
        if self.kind == "grid" and len(chunks) > 1:
            chunks, into = zip(*sorted(zip(chunks, into)))
        return Transfer(self.rank(t.src, r), self.rank(t.dst, r), chunks, t.reduce, into=into)


@dataclass(frozen=True)
class ThroughSwitch:
    """Chunks reduced inside a switch and multicast back: in-switch reduction (NVLS).

    Every rank in ``senders`` sends its chunks ``chunks`` up into the switch, which adds them
    (one sender: passes them on) and writes the result over the same chunks at every rank in
    ``receivers``. NVLink SHARP's two instructions are its two halves: ``multimem.ld_reduce``
    (every rank to the one that loads: ``ThroughSwitch(all, c, [r])``) and ``multimem.st``
    (one rank to all: ``ThroughSwitch([r], c, all)``); NCCL's NVLS allreduce runs them back
    to back on each slice, the sum passing through rank r: ``ThroughSwitch(all, c, all,
    via=r)``. No XLA or Pallas lowering has it:
    :func:`~jaxcoll.verify`, :func:`~jaxcoll.cost`, :func:`~jaxcoll.simulate` and the
    pictures take it; the executors refuse it.

    Attributes:
      senders: the ranks whose chunks go up into the switch, a tuple of distinct ints >= 0.
      chunks: the chunk ids sent and written, a tuple of distinct ints >= 0
        (given as an int or any iterable of ints).
      receivers: the ranks the result is multicast to, a tuple of distinct ints >= 0.
      via: the rank the sum passes through on its way back up (down its port, then up again:
        ``multimem.ld_reduce`` into it, ``multimem.st`` from it), or None (straight back
        down); it changes what the ports carry, not what ranks hold.

    Raises:
      ScheduleError: a rank or chunk id that is not an int >= 0, none of one, or one twice;
        ``via`` not a rank (an int >= 0) or None.

    >>> print(ThroughSwitch(range(4), 2, [2]), ThroughSwitch([2], 2, range(4)))
    {0,1,2,3}->switch->{2} [2]+ {2}->switch->{0,1,2,3} [2]=
    >>> print(ThroughSwitch(range(4), 2, range(4), via=2))
    {0,1,2,3}->switch->2->switch->{0,1,2,3} [2]+
    """

    senders: tuple[int, ...]
    chunks: tuple[int, ...]
    receivers: tuple[int, ...]
    via: int | None = None

    def __init__(self, senders: int | Iterable[int], chunks: int | Iterable[int],
                 receivers: int | Iterable[int], via: int | None = None):
        if via is not None and not (_is_int(via) and via >= 0):
            raise ScheduleError(f"ThroughSwitch: via={via!r} must be a rank (an int >= 0) or "
                                "None")
        object.__setattr__(self, "via", None if via is None else int(via))
        for name, value in (("senders", senders), ("chunks", chunks), ("receivers", receivers)):
            try:
                ids = _ids(value)
            except ScheduleError:
                ids = None
            if not ids or min(ids) < 0 or len(set(ids)) < len(ids):
                raise ScheduleError(f"ThroughSwitch: {name}={value!r} must be one or more "
                                    "distinct ints >= 0")
            object.__setattr__(self, name, ids)

    @property
    def reduces(self) -> bool:
        """True where the switch adds two or more senders' chunks."""
        return len(self.senders) > 1

    def __str__(self) -> str:
        def ranks(ids):
            return "{" + ",".join(map(str, ids)) + "}"
        via = "" if self.via is None else f"{self.via}->switch->"
        return (f"{ranks(self.senders)}->switch->{via}{ranks(self.receivers)} "
                f"[{','.join(map(str, self.chunks))}]{'+' if self.reduces else '='}")


@dataclass(frozen=True)
class Round:
    """Transfers that happen at the same time; each reads the state before the round.

    With a ``symmetry``, ``base`` holds rank 0's transfers only and every rank r makes
    ``symmetry.at(t, r)`` of each (expanded only when :attr:`transfers` is asked for).

    Args:
      transfers: the round's transfers (:class:`Transfer`), rank 0's only where
        ``symmetry`` is given.
      symmetry: a :class:`Symmetry` that makes every rank's transfers from rank 0's, or
        None (``transfers`` are every rank's).
      switched: in-switch reductions and multicasts (:class:`ThroughSwitch`) at the same
        time as the transfers, written out (no symmetry moves them); default none.

    Attributes:
      base: the transfers as given, a tuple
        (rank 0's, where the round is symmetric).
      symmetry: the :class:`Symmetry`,
        or None.
      switched: the :class:`ThroughSwitch` operations,
        a tuple.

    Raises:
      ScheduleError: if a transfer is not a :class:`Transfer`, ``symmetry`` is not a
        :class:`Symmetry`, a symmetric round is given a transfer not sent by rank 0, or
        ``switched`` holds something else than :class:`ThroughSwitch`.

    >>> ring = Round([Transfer(0, 1, 3, reduce=True)], Symmetry("rotate", 4, modulus=4))
    >>> len(ring), len(ring.base)
    (4, 1)
    >>> print(ring)
    0->1 [3]+  1->2 [0]+  2->3 [1]+  3->0 [2]+
    """

    base: tuple[Transfer, ...]
    symmetry: Symmetry | None = None
    switched: tuple[ThroughSwitch, ...] = ()

    def __init__(self, transfers: Iterable[Transfer], symmetry: Symmetry | None = None, *,
                 switched: Iterable[ThroughSwitch] = ()):
        transfers, switched = tuple(transfers), tuple(switched)
        if not all(isinstance(op, ThroughSwitch) for op in switched):
            wrong = [op for op in switched if not isinstance(op, ThroughSwitch)][:1]
            raise ScheduleError(f"Round: switched must hold ThroughSwitch operations, not {wrong}")
        if not all(isinstance(t, Transfer) for t in transfers):
            raise ScheduleError("Round: every transfer must be a Transfer, not "
                                f"{[t for t in transfers if not isinstance(t, Transfer)][:1]}")
        if symmetry is not None and not isinstance(symmetry, Symmetry):
            raise ScheduleError(f"Round: symmetry={symmetry!r} must be a Symmetry or None")
        if symmetry is not None and any(t.src != 0 for t in transfers):
            raise ScheduleError("Round: a symmetric round is given by rank 0's transfers only, "
                                f"not {[str(t) for t in transfers if t.src != 0]}")
        object.__setattr__(self, "base", transfers)
        object.__setattr__(self, "symmetry", symmetry)
        object.__setattr__(self, "switched", switched)

    @property
    def transfers(self) -> tuple[Transfer, ...]:
        """Every rank's transfers: rank 0's copied to every rank, base transfer by base
        transfer, where the round is symmetric."""
        if self.symmetry is None:
            return self.base
        return tuple(self.symmetry.at(t, r) for t in self.base
                     for r in self.symmetry.order(t.dst))

    def __iter__(self):
        return iter(self.transfers)

    def __len__(self) -> int:
        return len(self.base) * (self.symmetry.n_ranks if self.symmetry else 1)

    def extent(self) -> tuple[int, int]:
        """(largest rank, largest chunk id) any rank's transfer of the round names (computed
        once per round, which the schedules made from it share; none is negative)."""
        cached = self.__dict__.get("_extent")
        if cached is None:
            cached = (max([max(t.src, t.dst) for t in self.base]
                          + [max(op.senders + op.receivers + (op.via or 0,))
                             for op in self.switched],
                          default=0),
                      max([max(_largest(self.symmetry, t.chunks),
                               _largest(self.symmetry, t.into)) for t in self.base]
                          + [max(op.chunks) for op in self.switched], default=0))
            object.__setattr__(self, "_extent", cached)
        return cached

    def out_of_range(self, n_ranks: int, n_chunks: int) -> str:
        """What is wrong with the round's first transfer outside ``n_ranks`` ranks and
        ``n_chunks`` chunks (at which rank, for a symmetric round), for an error."""
        ranks = [0] if self.symmetry is None else range(self.symmetry.n_ranks)
        for t in self.base:
            for r in ranks:
                at = t if self.symmetry is None else self.symmetry.at(t, r)
                where = f"transfer {at}" + ("" if self.symmetry is None else
                                            f" (rank 0's {t} made at rank {r})")
                bad_rank = next((x for x in (at.src, at.dst) if not 0 <= x < n_ranks), None)
                bad_id = next((c for c in at.chunks + at.into if not 0 <= c < n_chunks), None)
                if bad_rank is not None:
                    return f"{where} names rank {bad_rank}"
                if bad_id is not None:
                    return f"{where} names chunk {bad_id}"
        for op in self.switched:
            bad_rank = next((x for x in op.senders + op.receivers + (op.via or 0,)
                             if x >= n_ranks), None)
            if bad_rank is not None:
                return f"{op} names rank {bad_rank}"
            bad_id = next((c for c in op.chunks if c >= n_chunks), None)
            if bad_id is not None:
                return f"{op} names chunk {bad_id}"
        return "in range"

    def __str__(self) -> str:
        return "  ".join([str(t) for t in self.transfers] + [str(op) for op in self.switched])


@dataclass(frozen=True)
class Schedule:
    """A collective algorithm as plain data: rounds of transfers between ranks' chunks.

    An algorithm on ``n_ranks`` ranks whose buffers hold ``n_chunks`` chunks each (and
    ``n_scratch`` scratch chunks after them; the input at ``input_at``, the result at
    ``output_at``: the module docstring). Schedules concatenate with ``+``.

    ``collective`` and ``root`` say what it promises (see :func:`jaxcoll.verify`); schedules
    from :func:`jaxcoll.schedule` carry them, building blocks and hand-made ones may not.
    ``primitive``, the field's name before 0.5.0, is a deprecated alias of ``collective``
    (read, or given to the constructor or ``dataclasses.replace``; it warns).

    Attributes:
      name: what to call it
        in printing and errors.
      n_ranks: the number of ranks,
        an int >= 1.
      n_chunks: the collective's chunks on every rank,
        an int >= 1.
      rounds: the rounds, a tuple of :class:`Round` (plain sequences of transfers given
        here become rounds).
      collective: the collective it promises to compute (``"allreduce"``, ...), or ``""``
        for none.
      root: the root rank of a rooted collective
        (broadcast, reduce, gather, scatter); default 0.
      n_scratch: the scratch chunks after the collective's,
        which start with no data; default 0.
      input_at: the chunk the input starts at: 0 (default),
        or a run of ``n_chunks`` scratch chunks.
      output_at: the chunk the result must end at: 0 (default),
        or a run of ``n_chunks`` scratch chunks.

    Raises:
      ScheduleError: where a transfer names a rank or chunk outside the schedule, or the
        collective, root, chunk counts or layout are not ones it can serve
        (:meth:`check_indices`; every schedule is checked when it is made).

    >>> n = 3
    >>> reduce_scatter = Schedule.build("ring reduce_scatter", n, n_chunks=n, rounds=[
    ...     [Transfer(r, (r + 1) % n, (r - step - 1) % n, reduce=True) for r in range(n)]
    ...     for step in range(n - 1)])
    >>> print(reduce_scatter)
    ring reduce_scatter: 3 ranks, 3 chunks, 2 rounds   (src->dst [chunks], '+' reduce, '=' copy)
      round 0 | 0->1 [2]+  1->2 [0]+  2->0 [1]+
      round 1 | 0->1 [1]+  1->2 [2]+  2->0 [0]+
    >>> (reduce_scatter + reduce_scatter).n_rounds
    4
    """

    name: str
    n_ranks: int
    n_chunks: int
    rounds: tuple[Round, ...]
    collective: str = ""
    root: int = 0
    n_scratch: int = 0
    input_at: int = 0
    output_at: int = 0

    def __init__(self, name: str, n_ranks: int, n_chunks: int,
                 rounds: Iterable[Round | Iterable[Transfer]], collective: str = "",
                 root: int = 0, n_scratch: int = 0, input_at: int = 0, output_at: int = 0, *,
                 primitive: str | None = None):
        if primitive is not None:  # wins: dataclasses.replace(s, primitive=...) passes both
            _renamed.warn("Schedule(primitive=...)", "Schedule(collective=...)")
            collective = primitive
        for field_name, value in (("name", name), ("n_ranks", n_ranks), ("n_chunks", n_chunks),
                                  ("rounds", rounds), ("collective", collective),
                                  ("root", root), ("n_scratch", n_scratch),
                                  ("input_at", input_at), ("output_at", output_at)):
            object.__setattr__(self, field_name, value)
        self.__post_init__()

    @property
    def primitive(self) -> str:
        """Deprecated: :attr:`collective`, the field's name before 0.5.0."""
        _renamed.warn("Schedule.primitive", "Schedule.collective")
        return self.collective

    @property
    def buffer_chunks(self) -> int:
        """Every chunk a rank holds: the collective's and the scratch chunks."""
        return self.n_chunks + self.n_scratch

    @property
    def in_place(self) -> bool:
        """True if the input starts where the result ends, in the collective's chunks."""
        return self.input_at == self.output_at == 0

    def __post_init__(self):
        # rounds given as plain sequences of transfers become Rounds
        if not all(isinstance(r, Round) for r in self.rounds):
            object.__setattr__(self, "rounds", tuple(
                r if isinstance(r, Round) else Round(r) for r in self.rounds))
        self.check_indices()

    @classmethod
    def build(cls, name: str, n_ranks: int, *, n_chunks: int,
              rounds: Iterable[Iterable[Transfer]]) -> "Schedule":
        """Make a schedule from nested iterables of transfers (checked as every schedule is).

        Args:
          name: what to call it
            (in printing and errors).
          n_ranks: the number of ranks,
            an int >= 1.
          n_chunks: the chunks on every rank,
            an int >= 1.
          rounds: each round's transfers,
            or :class:`Round` objects.

        Returns:
          The :class:`Schedule`, in place, with no collective.
        """
        return cls(name, n_ranks, n_chunks, tuple(rounds))

    def check_indices(self) -> None:
        """Raise ScheduleError (naming the round, transfer, rank and chunk) if a transfer names
        a rank or chunk outside the schedule, sends to its own rank or moves no chunk, at any
        rank (a symmetric round's at every rank it makes), if a round's symmetry is for
        another rank count, or if the collective, root or chunk count is not one the schedule
        can serve. Every schedule is checked when it is made."""
        if not (_is_int(self.n_ranks) and _is_int(self.n_chunks)
                and self.n_ranks >= 1 and self.n_chunks >= 1):
            raise ScheduleError(f"{self.name}: n_ranks={self.n_ranks!r} and "
                                f"n_chunks={self.n_chunks!r} must both be ints >= 1")
        if self.collective:
            record = RECORDS.get(self.collective)
            if record is None:
                raise ScheduleError(f"{self.name}: unknown primitive {self.collective!r}, must "
                                    f"be one of {sorted(RECORDS)} (or '' for none)")
            blocks = record.rows("schedule_blocks", self.n_ranks)
            if self.n_chunks % blocks:
                raise ScheduleError(f"{self.name}: {self.collective} on {self.n_ranks} ranks "
                                    f"runs on {blocks} blocks, which do not divide "
                                    f"n_chunks={self.n_chunks}")
        if not (_is_int(self.root) and 0 <= self.root < self.n_ranks):
            raise ScheduleError(f"{self.name}: root={self.root!r} must be a rank, "
                                f"0..{self.n_ranks - 1}")
        if not (_is_int(self.n_scratch) and self.n_scratch >= 0):
            raise ScheduleError(f"{self.name}: n_scratch={self.n_scratch!r} must be an int >= 0")
        for arg in ("input_at", "output_at"):
            at = getattr(self, arg)
            if not (_is_int(at) and 0 <= at <= self.n_scratch and (at == 0 or at >= self.n_chunks)):
                raise ScheduleError(f"{self.name}: {arg}={at!r} must be 0 (the primitive's "
                                    f"chunks) or a run of {self.n_chunks} scratch chunks, "
                                    f"{self.n_chunks}..{self.n_scratch}")
        for index, round_ in enumerate(self.rounds):
            symmetry = round_.symmetry
            if symmetry is not None and symmetry.n_ranks != self.n_ranks:
                raise ScheduleError(f"{self.name}: round {index}'s symmetry is for "
                                    f"{symmetry.n_ranks} ranks, the schedule has {self.n_ranks}")
            top_rank, top_id = round_.extent()
            if top_rank >= self.n_ranks or top_id >= self.buffer_chunks:
                raise ScheduleError(f"{self.name}: round {index}: "
                                    f"{round_.out_of_range(self.n_ranks, self.buffer_chunks)} "
                                    f"(ranks 0..{self.n_ranks - 1}, chunks "
                                    f"0..{self.buffer_chunks - 1})")

    def explicit(self) -> "Schedule":
        """The same schedule with every round's transfers written out (no symmetry)."""
        return replace(self, rounds=tuple(Round(r.transfers, switched=r.switched)
                                          for r in self.rounds))

    @property
    def in_switch(self) -> bool:
        """True if a round reduces or multicasts inside a switch (:class:`ThroughSwitch`)."""
        return any(round_.switched for round_ in self.rounds)

    def refuse_in_switch(self, what: str) -> None:
        """Raise ScheduleError if the schedule reduces inside a switch, which ``what`` (an
        executor, an exporter) cannot do.

        Args:
          what: who refuses, for the message (e.g. "jaxcoll's XLA and Pallas executors").

        Raises:
          ScheduleError: a round has a :class:`ThroughSwitch` operation.
        """
        index = next((i for i, r in enumerate(self.rounds) if r.switched), None)
        if index is not None:
            raise ScheduleError(
                f"{self.name}: round {index} reduces inside a switch "
                f"({self.rounds[index].switched[0]}): {what} cannot run in-switch reduction "
                "(NVLS: no ppermute, XLA or Pallas lowering has it); price it with "
                "jaxcoll.cost or jaxcoll.simulate, or prove it with jaxcoll.verify")

    def __add__(self, other: "Schedule") -> "Schedule":
        layout = ("n_ranks", "n_chunks", "n_scratch")
        if any(getattr(self, f) != getattr(other, f) for f in layout) or not (
                self.in_place and other.in_place):
            raise ScheduleError(f"cannot concatenate {self!r} and {other!r}: they need the same "
                                "n_ranks, n_chunks and n_scratch, and to run in place")
        return Schedule(f"{self.name} + {other.name}", self.n_ranks, self.n_chunks,
                        self.rounds + other.rounds, n_scratch=self.n_scratch)

    def reversed(self, name: str, *, reduce: bool) -> "Schedule":
        """The schedule run backwards: rounds in reverse order, every transfer turned around.

        Data that fanned out from a root now flows into it: a broadcast reversed with
        ``reduce=True`` is a reduce, a scatter reversed with ``reduce=False`` is a gather.

        Args:
          name: what to call the reversed schedule
            (in printing and errors).
          reduce: True to make every turned transfer a reduce,
            False a copy.

        Returns:
          The reversed :class:`Schedule`, with no collective; its input is where this one's
          output was, and the other way round.
        """
        self.refuse_in_switch("Schedule.reversed")

        def back(t: Transfer) -> Transfer:
            return Transfer(t.dst, t.src, t.into, reduce, into=t.chunks)

        rounds = []
        for r in reversed(self.rounds):
            if r.symmetry is None:
                rounds.append(Round(map(back, r.base)))
            else:  # rank 0's transfer 0 -> d turned around is d's: seen from rank 0, sender(d)'s
                rounds.append(Round([r.symmetry.at(back(t), r.symmetry.sender(t.dst))
                                     for t in r.base], r.symmetry))
        return Schedule(name, self.n_ranks, self.n_chunks, tuple(rounds),
                        n_scratch=self.n_scratch, input_at=self.output_at,
                        output_at=self.input_at)

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)

    def __hash__(self) -> int:  # computed once: a primitive's parameter is hashed at every bind
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.name, self.n_ranks, self.n_chunks, self.rounds, self.collective,
                           self.root, self.n_scratch, self.input_at, self.output_at))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __str__(self) -> str:
        moves = any(t.into != t.chunks for r in self.rounds for t in r)
        into = ">[into]" if moves else ""
        scratch = f" (+{self.n_scratch} scratch)" if self.n_scratch else ""
        placed = "" if self.in_place else (f", input at chunk {self.input_at}, output at "
                                           f"{self.output_at}")
        switch = ", {senders}->switch->{receivers}" if self.in_switch else ""
        header = (f"{self.name}: {self.n_ranks} ranks, {self.n_chunks} chunks{scratch}{placed}, "
                  f"{self.n_rounds} rounds   (src->dst [chunks]{into}{switch}, '+' reduce, "
                  "'=' copy)")
        width = len(str(max(self.n_rounds - 1, 0)))
        lines = [header] + [f"  round {i:>{width}} | {r}" for i, r in enumerate(self.rounds)]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Schedule({self.name!r}, n_ranks={self.n_ranks}, n_chunks={self.n_chunks}, "
                f"n_rounds={self.n_rounds})")


@lru_cache(maxsize=4096)
def _pairs(symmetry: Symmetry, dst: int) -> tuple[tuple[int, int], ...]:
    return tuple(zip(*(side.tolist() for side in symmetry.partners(dst))))


def _largest(symmetry: Symmetry | None, ids: tuple[int, ...]) -> int:
    """The largest chunk id any rank moves where rank 0 moves ``ids`` (exactly, without
    moving them to every rank)."""
    if symmetry is None or symmetry.n_ranks == 1:
        known = _largest_known(ids)
        return max(ids) if known is None else known
    if symmetry.kind == "xor":  # c ^ x over every x under the mask: at most c | mask
        return max(c | (symmetry.mask & (symmetry.n_ranks - 1)) for c in ids)
    if len(ids) > 8:  # many ids (Swing's halves, a grid's blocks): all at once in numpy
        return int(_top(symmetry, np.array(ids, dtype=np.int64)).max())
    return int(max(_top(symmetry, c) for c in ids))


def _top(symmetry: Symmetry, c):
    """The largest id that chunk id c (an int or a numpy array of them) moves to at any rank
    under a "rotate", "mirror" or "grid" symmetry."""
    m = symmetry.modulus
    block, a = c - c % m, c % m
    if symmetry.kind == "grid":  # each level's coordinate moves by stride·r_l, r_l = 0..s_l-1:
        top, place = block, 1  # by every multiple of gcd(stride, s_l): the top of each level's
        for size in reversed(symmetry.sizes):  # residue class, level by level (independent)
            g = gcd(symmetry.stride % size, size) or size
            top = top + (size - g + a // place % size % g) * place
            place *= size
        return top
    # rank r moves c % m by stride·r: as r goes round, by every multiple of g = gcd(stride, m)
    # (n strides close the cycle), so the largest is the top of c's block with c's residue
    # mod g. Mirror: even r = 2j move a = c % m by 2j·stride, odd r = 2j + 1 move -a by
    # (2j + 1)·stride, i.e. (stride - a) mod m by 2j·stride: j goes round (n/2 · 2·stride is
    # n strides), so every multiple of g = gcd(2·stride, m) from a and from (stride - a) mod m.
    if symmetry.kind != "mirror":
        g = gcd(symmetry.stride % m, m) or m
        return block + m - g + a % g
    g = gcd(2 * symmetry.stride % m, m) or m
    return block + m - g + np.maximum(a % g, (symmetry.stride - a) % m % g)


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
