"""A verified :class:`~jaxcoll.Schedule` as MSCCL XML that RCCL and msccl-executor-nccl run to
the same result (:func:`dump`): every chunk placed in the runtimes' buffers, each transfer a
send and a receive (or a local step), threadblocks per peer, dependencies as the data need
them, chains of ``re`` ended where the parser would fuse steps to another sum."""

from __future__ import annotations

import re as _re
from collections import Counter
from dataclasses import dataclass, field

from jaxcoll.ir.msccl.loading import BufferLayout
from jaxcoll.ir.msccl.parsing import (
    COLL_OF,
    MAX_COUNT,
    MAX_DEPID,
    MAX_PER_CHANNEL,
    MAX_STEPS,
    MscclError,
    _io_chunks,
)
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Round, Schedule, ScheduleError
from jaxcoll.ir.symbolic import verify


@dataclass(eq=False)
class _Action:
    """One step to write: ``kind`` s, r, rrc, cpy or re at ``rank`` in threadblock ``tb`` (a
    (role, peer, channel) key), on runs of (buffer, offset) locations."""
    rank: int
    tb: tuple
    kind: str
    src: tuple = ("i", -1)
    dst: tuple = ("o", -1)
    cnt: int = 0
    reads: tuple = ()
    writes: tuple = ()
    accumulates: tuple = ()  # what it reads only to reduce into (Y of Y := Y op X)
    waits: list = field(default_factory=list)  # _Actions it must follow
    position: int = -1
    signals: bool = False


def dump(schedule: Schedule, *, name: str | None = None, proto: str = "Simple",
         inplace: bool | None = None, fused: bool = False, min_bytes: int = 0,
         max_bytes: int = 0) -> str:
    """Write a verified schedule as MSCCL XML that RCCL and msccl-executor-nccl run.

    The runtimes run the file to the schedule's result under their semantics: every chunk
    placed in their buffers, each transfer a send and a receive (or a local step),
    threadblocks per peer, dependencies as the data need them, chains of ``re`` ended where
    the parser would fuse steps to another sum. A reducing receive is an ``r`` into scratch
    and an ``re`` (what RCCL runs), or with ``fused=True`` one ``rrc`` (msccl-executor-nccl
    only).

    Args:
      schedule: the :class:`~jaxcoll.Schedule` to write; it must name a collective MSCCL
        has, be rooted at 0 if rooted, and verify (:func:`jaxcoll.verify`).
      name: the ``<algo>``'s ``name``
        (default: the schedule's).
      proto: the runtimes' protocol:
        ``"Simple"`` (default), ``"LL"`` or ``"LL128"``.
      inplace: True to write a file run in place (one buffer for input and output), False
        out of place, None (default) in place where the schedule runs so.
      fused: True to write each reducing receive as one ``rrc`` step
        (msccl-executor-nccl only); default False.
      min_bytes: the ``minBytes`` from which the runtimes choose the file
        (default 0).
      max_bytes: the ``maxBytes`` up to which they choose it
        (default 0: any size).

    Returns:
      The XML text, a ``str``; :func:`load` reads it back to the same transfers.

    Raises:
      MscclError: if the schedule names no collective MSCCL has, is rooted elsewhere than
        0, does not verify, reduces inside a switch (NVLS: MSCCL's XML has no such step),
        cannot run the way ``inplace`` asks, or does not fit the runtimes' limits (steps
        per threadblock, threadblocks per channel, ...).

    >>> import jaxcoll
    >>> text = dump(jaxcoll.schedule("allreduce", "ring", 4))
    >>> print(text.splitlines()[1])
    <algo name="ring reduce_scatter + ring allgather" proto="Simple" nchannels="1"
    nchunksperloop="4" ngpus="4" coll="allreduce" inplace="1" outofplace="0" minBytes="0"
    maxBytes="0">
    >>> text.count("<gpu "), text.count("<step ")
    (4, 60)
    >>> dump(jaxcoll.schedule("broadcast", "binomial", 4, root=1))
    Traceback (most recent call last):
      ...
    jaxcoll.ir.msccl.parsing.MscclError: msccl.dump: ... is rooted at 1; an MSCCL file names
    no root (the call does), and jaxcoll reads it as 0
    """
    if schedule.in_switch:
        try:
            schedule.refuse_in_switch("msccl.dump (MSCCL's XML has no in-switch step)")
        except ScheduleError as error:
            raise MscclError(f"msccl.dump: {error}") from None
    if schedule.collective not in COLL_OF:
        raise MscclError(f"msccl.dump: {schedule!r} names no collective MSCCL has "
                         f"(collective={schedule.collective!r})")
    if RECORDS[schedule.collective].rooted and schedule.root != 0:
        raise MscclError(f"msccl.dump: {schedule!r} is rooted at {schedule.root}; an MSCCL file "
                         "names no root (the call does), and jaxcoll reads it as 0")
    try:
        verify(schedule)
    except ScheduleError as error:
        raise MscclError(f"msccl.dump: {schedule!r} does not verify: {error}") from None
    n, primitive = schedule.n_ranks, schedule.collective
    record = RECORDS[primitive]
    k = (schedule.n_chunks // 2 if record.schedule_blocks == "2n"
         else schedule.n_chunks // n if record.rooted and record.layout != "whole"
         else schedule.n_chunks)
    can_be_in_place = schedule.in_place and record.layout != "exchange"
    if inplace is None:
        inplace = can_be_in_place
    if inplace and record.layout == "exchange":
        raise MscclError(f"msccl.dump: {schedule!r} cannot run in place (an alltoall reads "
                         "its input while it writes its output; out of place it can)")
    if inplace and not schedule.in_place:
        raise MscclError(f"msccl.dump: {schedule!r} is out of place: its input (chunk "
                         f"{schedule.input_at}) and output (chunk {schedule.output_at}) are "
                         "apart, while a file run in place has one buffer for both; dump it "
                         "with inplace=False")
    places = _Places(schedule, k, inplace)
    actions = places.prologue() + [a for index, round_ in enumerate(schedule.rounds)
                                   for a in _round_actions(schedule, places, index, round_, fused)]
    actions += places.epilogue()
    _depend(actions)
    tbs = _threadblocks(actions, n)
    return _xml(schedule, name, proto, k, inplace, min_bytes, max_bytes, places, tbs)


class _Places:
    """Where a schedule's chunks live in MSCCL's buffers, rank by rank: in place, in the one
    buffer the call passes; out of place, an input chunk nothing writes is read from ``i``, a
    promised output chunk written in ``o``, every other in scratch (a chunk that starts with
    the input copied there first, a result moved to ``o`` last)."""
    def __init__(self, schedule: Schedule, k: int, inplace: bool):
        self.schedule, self.k, self.inplace = schedule, k, inplace
        n = schedule.n_ranks
        self.layout = BufferLayout(schedule.collective, n, k, inplace, 0)
        io = _io_chunks(schedule.collective, k, n)
        self.by_id = [{self.layout.chunk(r, b, o): (b, o) for b in ("o", "i") for o in range(io[b])}
                      for r in range(n)]  # the layout's chunk id -> (buffer, offset)
        self.scratch = [0] * n  # scratch chunks used per rank
        self.where: list[dict[int, tuple]] = [{} for _ in range(n)]
        self.first_read, self.written = self._accesses()
        self.copies_in, self.copies_out = [], []  # (rank, from, to) local copies

    def _accesses(self):
        """(rank, chunk) pairs read before anything writes them; (rank, chunk) pairs written."""
        first_read, written = set(), set()
        for round_ in self.schedule.rounds:
            reads = {(t.src, c) for t in round_ for c in t.chunks} | {
                (t.dst, c) for t in round_ if t.reduce for c in t.into}
            first_read |= {key for key in reads if key not in written}
            written |= {(t.dst, c) for t in round_ for c in t.into}
        return first_read, written

    def _as_layout(self, chunk: int, region: str) -> int:
        """The schedule's chunk as the layout's chunk id of its input or output run."""
        s = self.schedule
        if region == "input":
            return chunk - s.input_at + self.layout.input_at
        return chunk - s.output_at

    def at(self, rank: int, chunk: int) -> tuple[str, int]:
        """(buffer, offset) of ``chunk`` at ``rank``."""
        placed = self.where[rank].get(chunk)
        if placed is None:
            placed = self.where[rank][chunk] = self._place(rank, chunk)
        return placed

    def _place(self, rank: int, chunk: int) -> tuple[str, int]:
        s = self.schedule
        in_input = s.input_at <= chunk < s.input_at + s.n_chunks
        in_output = s.output_at <= chunk < s.output_at + s.n_chunks
        holds = in_input and self._holds_input(rank, chunk)
        if self.inplace:
            if chunk < s.n_chunks:
                return self.by_id[rank][chunk]
            return self._new_scratch(rank)
        promised = in_output and self._promised(rank, chunk)
        written = (rank, chunk) in self.written
        if holds and not written and not promised:
            return self._input(rank, chunk)  # read where it is
        target = self.by_id[rank].get(self._as_layout(chunk, "output")) if promised else None
        place = target if target and target[0] == "o" else self._new_scratch(rank)
        if holds and ((rank, chunk) in self.first_read or not written):
            self.copies_in.append((rank, self._input(rank, chunk), place))
        if promised and place[0] == "s":
            self.copies_out.append((rank, place, target))
        return place

    def _origin(self, rank: int, chunk: int) -> int | None:
        """Which chunk of the rank's input the schedule's chunk holds at the start."""
        s = self.schedule
        return RECORDS[s.collective].origins(rank, s.n_ranks, s.n_chunks, s.root)[
            chunk - s.input_at]

    def _holds_input(self, rank: int, chunk: int) -> bool:
        return self._origin(rank, chunk) is not None

    def _input(self, rank: int, chunk: int) -> tuple[str, int]:
        """Where in ``i`` the input a chunk starts with lies (alltoall's two copies: one)."""
        return self.by_id[rank][self.layout.input_at + self._origin(rank, chunk)]

    def _promised(self, rank: int, chunk: int) -> bool:
        s = self.schedule
        promises = RECORDS[s.collective].promises(s.n_ranks, s.n_chunks, s.root)
        row = dict((r, row) for r, row in promises).get(rank, [])
        return any(c + s.output_at == chunk for c, _, _ in row)

    def _new_scratch(self, rank: int) -> tuple[str, int]:
        return self.new_scratch(rank, 1)

    def new_scratch(self, rank: int, count: int) -> tuple[str, int]:
        """The first of ``count`` fresh scratch chunks at ``rank``."""
        self.scratch[rank] += count
        return ("s", self.scratch[rank] - count)

    def settle(self) -> None:
        """Place every chunk a rank's result needs (promised ones nothing wrote included)."""
        s = self.schedule
        promises = RECORDS[s.collective].promises(s.n_ranks, s.n_chunks, s.root)
        for rank, row in promises:
            for chunk, _, _ in row:
                self.at(rank, chunk + s.output_at)

    def prologue(self) -> list[_Action]:
        self.settle()
        for round_ in self.schedule.rounds:  # every chunk's place, so the copies are known
            for t in round_:
                for c, i in zip(t.chunks, t.into):
                    self.at(t.src, c), self.at(t.dst, i)
        return [a for rank, src, dst in self.copies_in for a in _local(rank, [src], [dst], False)]

    def epilogue(self) -> list[_Action]:
        return [a for rank, src, dst in self.copies_out for a in _local(rank, [src], [dst], False)]


def _runs(pairs: list[tuple[tuple, tuple]]) -> list[tuple[tuple, tuple, int]]:
    """(src, dst) location pairs cut into runs that are consecutive on both sides, each at
    most the runtimes' largest cnt: (first src, first dst, cnt)."""
    runs = []
    for src, dst in pairs:
        if runs:
            (s0, d0, count) = runs[-1]
            if (count < MAX_COUNT - 1 and src == (s0[0], s0[1] + count)
                    and dst == (d0[0], d0[1] + count)):
                runs[-1] = (s0, d0, count + 1)
                continue
        runs.append((src, dst, 1))
    return runs


def _span(start: tuple, count: int) -> tuple:
    return tuple((start[0], start[1] + j) for j in range(count))


def _local(rank: int, srcs: list, dsts: list, reduce: bool) -> list[_Action]:
    kind = "re" if reduce else "cpy"
    return [_Action(rank, ("local", -1), kind, src, dst, count,
                    reads=_span(src, count) + (_span(dst, count) if reduce else ()),
                    writes=_span(dst, count), accumulates=_span(dst, count) if reduce else ())
            for src, dst, count in _runs(list(zip(srcs, dsts)))]


def _round_actions(schedule: Schedule, places: _Places, index: int, round_: Round,
                   fused: bool) -> list[_Action]:
    """The steps of one round's transfers: a local transfer's cpy or re; a remote one's send
    at its source and receive at its destination (an r, an r into scratch and an re right
    after it, or an rrc), each run of consecutive chunks one step."""
    actions = []
    for t in round_:
        srcs = [places.at(t.src, c) for c in t.chunks]
        dsts = [places.at(t.dst, c) for c in t.into]
        if t.src == t.dst:
            actions += _local(t.src, srcs, dsts, t.reduce)
            continue
        for src, dst, count in _runs(list(zip(srcs, dsts))):
            actions.append(_Action(t.src, ("send", t.dst), "s", src, dst, count,
                                   reads=_span(src, count)))
            if t.reduce and not fused:  # r into scratch, then re: what RCCL runs
                temp = places.new_scratch(t.dst, count)
                arrive = _Action(t.dst, ("recv", t.src), "r", src, temp, count,
                                 writes=_span(temp, count))
                add = _Action(t.dst, ("recv", t.src), "re", temp, dst, count,
                              reads=_span(temp, count) + _span(dst, count),
                              writes=_span(dst, count), accumulates=_span(dst, count))
                add.follows = arrive  # kept next to each other: RCCL's way to run an rrc
                actions += [arrive, add]
            else:
                actions.append(_Action(t.dst, ("recv", t.src), "rrc" if t.reduce else "r",
                                       dst if t.reduce else src, dst, count,
                                       reads=_span(dst, count) if t.reduce else (),
                                       writes=_span(dst, count),
                                       accumulates=_span(dst, count) if t.reduce else ()))
    return _reads_first(actions, index)


def _reads_first(actions: list[_Action], index: int) -> list[_Action]:
    """The round's actions in an order where whatever reads a location comes before whatever
    else writes it (every transfer of a round reads the state before the round), except that
    reductions into one location commute; an re that completes an r right after it."""
    units = [[a] for a in actions if getattr(a, "follows", None) is None]
    for a in actions:
        if getattr(a, "follows", None) is not None:
            next(unit for unit in units if unit[0] is a.follows).append(a)

    def overwrites(u, v) -> bool:  # u writes what v reads, other than a sum both add into
        sums = {w for a in u for w in a.accumulates} & {w for b in v for w in b.accumulates}
        reads = set()
        for b in v:  # a location v reads as X too stays a read
            reads |= set(Counter(b.reads) - Counter(b.accumulates)) | (
                set(b.accumulates) - sums)
        return bool({w for a in u for w in a.writes} & reads)
    order = []
    while units:
        ready = [u for u in units if not any(
            v is not u and v[0].rank == u[0].rank and overwrites(u, v) for v in units)]
        if not ready:
            raise MscclError(f"msccl.dump: round {index} moves chunks of rank "
                             f"{units[0][0].rank} in a cycle (one writes what another reads "
                             "and the other what the first reads): MSCCL's steps need a "
                             "scratch chunk for that")
        order += [a for u in ready for a in u]
        units = [u for u in units if not any(u is v for v in ready)]
    return order


def _depend(actions: list[_Action]) -> None:
    """Each action's waits: the last writer of what it reads and writes, and the readers since
    of what it writes. An re that completes a receive waits on its r alone (the r waits for
    the rest), so the two stay one rrc."""
    last_writer, readers = {}, {}
    for a in actions:
        waits = [last_writer[(a.rank, loc)] for loc in a.reads + a.writes
                 if (a.rank, loc) in last_writer]
        waits += [r for loc in a.writes for r in readers.get((a.rank, loc), ())]
        a.waits = [w for w in dict.fromkeys(waits) if w is not a]
        arrive = getattr(a, "follows", None)
        if arrive is not None:
            arrive.waits = list(dict.fromkeys(arrive.waits + [w for w in a.waits
                                                              if w is not arrive]))
            a.waits = [arrive]
        for loc in a.reads:
            readers.setdefault((a.rank, loc), []).append(a)
        for loc in a.writes:
            last_writer[(a.rank, loc)] = a
            readers[(a.rank, loc)] = []


def _threadblocks(actions: list[_Action], n: int) -> list[dict]:
    """Per rank, its threadblocks by key (("send", peer), ("recv", peer), ("local",)):
    [id, send, recv, chan, actions]; a connection's channel is its pair's group of 32 (at
    most 32 sending and 32 receiving threadblocks per channel), both ends alike."""
    per_rank = [dict() for _ in range(n)]
    for a in actions:
        role, peer = a.tb
        if role == "local":
            key, send, recv, chan = ("local",), -1, -1, 0
        else:
            offset = (peer - a.rank) % n if role == "send" else (a.rank - peer) % n
            key, chan = (role, peer), (offset - 1) // MAX_PER_CHANNEL
            send, recv = (peer, -1) if role == "send" else (-1, peer)
        tbs = per_rank[a.rank]
        if key not in tbs:
            tbs[key] = [len(tbs), send, recv, chan, []]
        a.tb_id = tbs[key][0]
        tbs[key][4].append(a)
    return per_rank


def _xml(schedule, name, proto, k, inplace, min_bytes, max_bytes, places, per_rank) -> str:
    """The file: nops before a step for its waits on other threadblocks but one, which the
    step carries; ``hasdep`` where another threadblock waits; each step's ``s`` its place."""
    if proto not in ("Simple", "LL", "LL128"):
        raise MscclError(f"msccl.dump: proto={proto!r}, the runtimes take Simple, LL or LL128")
    for rank, tbs in enumerate(per_rank):  # every step's place, nops included
        if len(tbs) > MAX_DEPID + 1:
            raise MscclError(f"msccl.dump: rank {rank} needs {len(tbs)} threadblocks, more "
                             f"than a depid can name ({MAX_DEPID + 1})")
        for key, (_, _, _, _, actions) in tbs.items():
            count = 0
            for a in actions:
                a.others = sorted({w.tb_id for w in a.waits if w.tb_id != a.tb_id})
                count += max(len(a.others) - 1, 0)
                a.position = count
                count += 1
            if count > MAX_STEPS:
                raise MscclError(f"msccl.dump: rank {rank}'s {' '.join(map(str, key))} "
                                 f"threadblock needs {count} steps, more than the runtimes' "
                                 f"{MAX_STEPS} (fewer rounds, or fewer ranks, fit)")
    for tbs in per_rank:  # each wait as the latest step of that threadblock it needs
        for _, _, _, _, actions in tbs.values():
            for a in actions:
                latest = {}
                for w in a.waits:
                    if w.tb_id != a.tb_id and w.position > latest.get(w.tb_id, (-1, None))[0]:
                        latest[w.tb_id] = (w.position, w)
                a.deps = [(tb, position) for tb, (position, _) in sorted(latest.items())]
                for _, w in latest.values():
                    w.signals = True
    for tbs in per_rank:
        for _, _, _, _, actions in tbs.values():
            _break_chains(actions)
    n, coll = schedule.n_ranks, COLL_OF[schedule.collective]
    io = _io_chunks(schedule.collective, k, n)
    channels = 1 + max((tb[3] for tbs in per_rank for tb in tbs.values()), default=0)
    head = (f'<algo name="{_quoted(name or schedule.name)}" proto="{proto}" '
            f'nchannels="{channels}" nchunksperloop="{k}" ngpus="{n}" coll="{coll}" '
            f'inplace="{int(inplace)}" outofplace="{int(not inplace)}" minBytes="{min_bytes}" '
            f'maxBytes="{max_bytes}">')
    lines = [f"<!-- {_quoted(repr(schedule))}, written by jaxcoll.ir.msccl.dump -->", head]
    for rank, tbs in enumerate(per_rank):
        lines.append(f'  <gpu id="{rank}" i_chunks="{io["i"]}" o_chunks="{io["o"]}" '
                     f's_chunks="{places.scratch[rank]}">')
        for tb_id, send, recv, chan, actions in sorted(tbs.values()):
            lines.append(f'    <tb id="{tb_id}" send="{send}" recv="{recv}" chan="{chan}">')
            position = 0
            for a in actions:
                for tb, at in a.deps[:-1]:
                    lines.append("      " + _step(position, "nop", ("i", -1), ("o", -1), 0,
                                                  tb, at, 0))
                    position += 1
                depid, deps = a.deps[-1] if a.deps else (-1, -1)
                lines.append("      " + _step(position, a.kind, a.src, a.dst, a.cnt, depid,
                                              deps, int(a.signals)))
                position += 1
            lines.append("    </tb>")
        lines.append("  </gpu>")
    return "\n".join(lines + ["</algo>"]) + "\n"


def _break_chains(actions: list[_Action]) -> None:
    """Where the parser would chain an re into the re before it (:func:`_chain_reductions`)
    to another result than the two one after the other, set ``hasdep`` on the one before,
    which ends a chain: where the counts differ (the chain would run with the last one's), or
    where a chained re reads what the chain writes (the chain reads every X before it writes
    Y). An equal-count chain that reads apart from what it writes adds the same sum."""
    chain = []
    for a in actions:
        if a.kind != "re":
            chain = []
            continue
        if chain and (a.dst, a.src[0]) == (chain[0].dst, chain[0].src[0]) and not a.deps:
            written = set(_span(a.dst, a.cnt))
            if a.cnt != chain[0].cnt or any(written & set(_span(b.src, b.cnt))
                                            for b in chain + [a]):
                chain[-1].signals = True
                chain = []
        chain = [] if a.signals else chain + [a]


def _step(s, kind, src, dst, cnt, depid, deps, hasdep) -> str:
    return (f'<step s="{s}" type="{kind}" srcbuf="{src[0]}" srcoff="{src[1]}" '
            f'dstbuf="{dst[0]}" dstoff="{dst[1]}" cnt="{cnt}" depid="{depid}" deps="{deps}" '
            f'hasdep="{hasdep}"/>')


def _quoted(text: str) -> str:
    """Text safe inside the runtimes' double-quoted attribute (and a comment)."""
    return _re.sub(r'["<>&-]', "_", text)
