"""An MSCCL program as a :class:`~jaxcoll.Schedule` (:func:`load`): where its buffers lie among
a schedule's chunks (:class:`BufferLayout`), races and reads of garbage refused, each step's data
moves placed in the earliest round the data allow."""

from __future__ import annotations

from dataclasses import dataclass, field

from jaxcoll.ir.msccl.parsing import (
    READS_X,
    RECEIVES,
    SENDS,
    WRITES_Y,
    MscclError,
    Program,
    Step,
    _block,
    _io_chunks,
    parse,
)
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Round, Schedule, Transfer


@dataclass(frozen=True)
class BufferLayout:
    """Where MSCCL's buffers lie in a jaxcoll schedule's chunks (the package docstring).

    For one coll on n ranks of K chunks per loop, in place or out of place.

    Attributes:
      primitive: jaxcoll's name
        for the coll.
      n: the ranks, and ``k`` the chunks per loop
        (``nchunksperloop``).
      inplace: True where one buffer is both input and output,
        False where the input has chunks of its own (``input_at``).
      s_chunks: the scratch chunks,
        the most any gpu declares.
    """
    primitive: str
    n: int
    k: int
    inplace: bool
    s_chunks: int  # scratch chunks (the largest any gpu declares)

    @property
    def n_chunks(self) -> int:  # the primitive's chunks in a jaxcoll schedule
        record = RECORDS[self.primitive]
        if record.schedule_blocks == "2n":  # the input twice
            return 2 * self.k
        return self.n * _block(self.primitive, self.k, self.n) or self.k

    @property
    def input_at(self) -> int:
        return 0 if self.inplace else self.n_chunks

    @property
    def scratch_at(self) -> int:
        return self.n_chunks + self.input_at

    def chunk(self, rank: int, buffer: str, offset: int) -> int:
        """The jaxcoll chunk id of ``buffer[offset]`` at ``rank``."""
        if buffer == "s":
            return self.scratch_at + offset
        layout = RECORDS[self.primitive].layout
        own = rank * _block(self.primitive, self.k, self.n) + offset  # a rank's part of n
        if layout == "exchange":  # the primitive's second half receives
            at = self.k + offset if buffer == "o" or self.inplace else offset
        elif buffer == "i":
            at = own if layout == "gather" else offset  # a rank's row in, n rows out
        else:
            at = own if layout == "scatter" else offset  # n rows in, a rank's row out
        return at + (self.input_at if buffer == "i" else 0)

    def starts_with_data(self, rank: int, chunk: int) -> bool:
        """True if the chunk holds the rank's input (or a copy of it) before the first step."""
        origins = RECORDS[self.primitive].origins(rank, self.n, self.n_chunks, 0)
        at = chunk - self.input_at
        return 0 <= at < self.n_chunks and origins[at] is not None


def layout_of(program: Program, inplace: bool | None = None) -> BufferLayout:
    """The :class:`BufferLayout` to load ``program`` with.

    Args:
      program: a :class:`~jaxcoll.ir.msccl.parsing.Program`,
        from :func:`parse`.
      inplace: True in place, False out of place, None out of place where the file may run
        so, else in place.

    Returns:
      The :class:`BufferLayout`.

    Raises:
      MscclError: if the file never runs
        the way ``inplace`` asks.
    """
    if inplace is None:
        inplace = not program.outofplace
    if not (program.inplace if inplace else program.outofplace):
        raise MscclError(f"msccl: algo: {'inplace' if inplace else 'outofplace'}=0, so the "
                         f"runtimes never run it {'in place' if inplace else 'out of place'}")
    return BufferLayout(program.primitive, program.ngpus, program.nchunks, inplace,
                  max(gpu["s_chunks"] for gpu in program.gpus.values()))


def _run(layout: BufferLayout, step: Step, side: str) -> list[int]:
    """The chunk ids of a step's src or dst run."""
    buffer, offset = (step.srcbuf, step.srcoff) if side == "src" else (step.dstbuf, step.dstoff)
    return [layout.chunk(step.gpu, buffer, offset + j) for j in range(step.cnt)]


def _accesses(layout: BufferLayout, step: Step) -> list[tuple[int, bool]]:
    """(chunk, writes) for every chunk the step reads or writes at its gpu."""
    reads = _run(layout, step, "src") if step.type in READS_X else []
    writes = _run(layout, step, "dst") if step.type in WRITES_Y else []
    if step.type == "re":  # Y := Y op X reads Y too
        reads = reads + writes
    return [(c, False) for c in reads] + [(c, True) for c in writes]


def _real_steps(program: Program) -> list[Step]:
    return [step for gpu in program.gpus.values() for tb in gpu["tbs"].values()
            for step in tb.steps if step.type != "nop"]


def _predecessors(program: Program) -> dict[int, list[Step]]:
    """id(step) -> the steps that happen before it directly: the one before it in its
    threadblock, those its waits name, and the send it receives."""
    before = {}
    for gpu in program.gpus.values():
        for tb in gpu["tbs"].values():
            previous = None
            for step in tb.steps:
                if step.type == "nop":
                    continue
                before[id(step)] = ([previous] if previous else []) + list(step.waits) + (
                    [step.receives_from] if step.type in RECEIVES else [])
                previous = step
    return before


def _in_order(steps: list[Step], before: dict) -> list[Step]:
    """The steps in an order that happens-before respects; an MscclError names a step of a
    cycle (the program would wait for ever)."""
    order, state = [], {}
    for first in steps:
        stack = [(first, iter(before[id(first)]))]
        if id(first) in state:
            continue
        state[id(first)] = "open"
        while stack:
            step, preds = stack[-1]
            pred = next(preds, None)
            if pred is None:
                stack.pop()
                state[id(step)] = "done"
                order.append(step)
            elif state.get(id(pred)) == "open":
                raise MscclError(f"msccl: {pred.where()}: waits, through its dependencies, "
                                 "sends and receives, for itself: the program cannot finish")
            elif id(pred) not in state:
                state[id(pred)] = "open"
                stack.append((pred, iter(before[id(pred)])))
    return order


def _touches(layout: BufferLayout, order: list[Step]) -> dict[tuple[int, int], list]:
    """(gpu, chunk) -> [(step, writes)] of every step that reads or writes it, in order."""
    touched: dict[tuple[int, int], list] = {}
    for step in order:
        for chunk, writes in _accesses(layout, step):
            touched.setdefault((step.gpu, chunk), []).append((step, writes))
    return touched


def _check_overlaps(layout: BufferLayout, steps: list[Step]) -> None:
    """A step's X and Y runs (every chained X, for an re) are one run or apart: the kernel's
    threads read and write them element by element in no order, so where they overlap at
    different offsets (in place, i and o are one buffer) what it computes is a race."""
    for step in steps:
        if step.type not in READS_X or step.type not in WRITES_Y or step.continues_chain:
            continue
        y = _run(layout, step, "dst")
        for source in step.chain or [step]:
            x = _run(layout, source, "src")
            if x != y and set(x) & set(y):
                raise MscclError(f"msccl: {source.where()} ({source.type}): its src "
                                 f"{source.srcbuf}[{source.srcoff}..] and dst {step.dstbuf}"
                                 f"[{step.dstoff}..] overlap at different offsets (cnt="
                                 f"{step.cnt}): the kernel's threads read and write them in no "
                                 "order")


def _check_races(layout: BufferLayout, order: list[Step], before: dict, touched: dict) -> None:
    """Two steps of one gpu that touch a chunk, one writing, must be ordered; a step may read
    a chunk that held nothing at the start (scratch, an out-of-place output) only after
    something wrote it."""
    bit = {id(step): 1 << k for k, step in enumerate(order)}
    ancestors = {}
    for step in order:  # every step that happens before it, as a bitmask
        mask = 0
        for pred in before[id(step)]:
            mask |= ancestors[id(pred)] | bit[id(pred)]
        ancestors[id(step)] = mask
    for (gpu, chunk), uses in touched.items():
        for a, (first, writes_first) in enumerate(uses):
            for second, writes_second in uses[a + 1:]:
                if first is second or not (writes_first or writes_second):
                    continue
                if not (ancestors[id(second)] & bit[id(first)]
                        or ancestors[id(first)] & bit[id(second)]):
                    raise MscclError(
                        f"msccl: a race on gpu {gpu}'s {_name(layout, gpu, chunk)}: "
                        f"{first.where()} ({first.type}) and {second.where()} ({second.type}) "
                        "touch it, one writing, in no order (no dependency, threadblock order "
                        "or send between them)")
        written = 0
        for step, writes in uses:
            if writes:
                written |= bit[id(step)]
            elif not layout.starts_with_data(gpu, chunk) and not ancestors[id(step)] & written:
                raise MscclError(f"msccl: {step.where()} ({step.type}) reads gpu {gpu}'s "
                                 f"{_name(layout, gpu, chunk)}, which nothing wrote before it "
                                 "(scratch, and an out-of-place output, start as garbage)")


def _name(layout: BufferLayout, gpu: int, chunk: int) -> str:
    """A jaxcoll chunk id as the file names it (for errors)."""
    for buffer in ("i", "o", "s"):
        size = layout.s_chunks if buffer == "s" else _io_chunks(layout.primitive, layout.k,
                                                              layout.n)[buffer]
        for offset in range(size):
            if layout.chunk(gpu, buffer, offset) == chunk:
                return f"{buffer}[{offset}]"
    return f"chunk {chunk}"


class _Temporary:
    """Chunks an ``rrs`` step forms R op X in (or a send's data, kept aside), placed in scratch
    once the rounds are known; until then a negative id names each chunk apart."""
    count = 0

    def __init__(self, rank: int, count: int):
        self.rank, self.first, self.last = rank, None, None
        self.ids = [-1 - _Temporary.count - j for j in range(count)]
        _Temporary.count += count


@dataclass(eq=False)
class _Op:
    """Data moves that happen in one round: a transfer (a send and the receive it pairs with),
    a local copy, or the local reduces of a fused run of ``re``; moves are (src, dst, chunks,
    reduce, into), their chunks lists or _Temporary. ``after``: (op, gap) pairs, this op's
    round at least that op's plus the gap (1 where it reads or overwrites what that op wrote,
    0 where it overwrites what that op reads: a round reads the state before it)."""
    moves: list
    after: list = field(default_factory=list)
    source: tuple = ()  # a transfer's (rank, chunks) until its receive says where they go
    round: int = -1


def load(source, *, inplace: bool | None = None, name: str | None = None,
         assume: dict | None = None) -> Schedule:
    """Read an MSCCL XML algorithm as a :class:`~jaxcoll.Schedule`, as the runtimes run it.

    The file is read and checked by :func:`parse`; races (two threadblocks touching a chunk,
    one writing, in no order) and reads of a chunk nothing wrote are refused; each step's
    data moves go to the earliest round its dependencies, its threadblock's order and its
    pairing allow. The schedule names the file's collective (root 0 where it has one), so
    :func:`jaxcoll.verify` checks it and the collectives run it (``algorithm=`` the
    schedule).

    Args:
      source: the file's path (a :class:`pathlib.Path`, or a string with no ``<``), or its
        text.
      inplace: True to read the file as run in place (one buffer for input and output),
        False out of place, None (default) out of place where the file may run so.
      name: the schedule's name
        (default: the file's ``name``, else ``"msccl COLL"``).
      assume: values for ``<algo>`` attributes the file lacks
        (:func:`parse`).

    Returns:
      The :class:`~jaxcoll.Schedule`, not yet verified.

    Raises:
      MscclError: if :func:`parse` refuses the file, the file does not run the way
        ``inplace`` asks, or it races or reads a chunk nothing wrote.

    Warns:
      MscclWarning: for a chain of ``re`` steps whose counts differ (read as the runtimes
        run it).

    A ring allreduce written out and read back makes the same transfers:

    >>> import jaxcoll
    >>> ring = jaxcoll.schedule("allreduce", "ring", 4)
    >>> back = load(jaxcoll.msccl.dump(ring))
    >>> back
    Schedule('ring reduce_scatter + ring allgather', n_ranks=4, n_chunks=4, n_rounds=6)
    >>> [set(r.transfers) for r in back.rounds] == [set(r.transfers) for r in ring.rounds]
    True
    >>> jaxcoll.verify(back)
    """
    program = parse(source, assume, _stacklevel=3)
    layout = layout_of(program, inplace)
    before = _predecessors(program)
    order = _in_order(_real_steps(program), before)
    touched = _touches(layout, order)
    _check_overlaps(layout, order)
    _check_races(layout, order, before, touched)
    ops, events = _ops(layout, order, _completed_receives(layout, program, touched))
    _rounds(ops, events)
    _place_temporaries(ops, layout.scratch_at + layout.s_chunks)
    moves = sorted(((op.round, src, dst, _ids(chunks), reduce, _ids(into))
                    for op in ops for src, dst, chunks, reduce, into in op.moves),
                   key=lambda move: move[0])
    used = {}  # scratch chunk ids renumbered from scratch_at by first use: unused ones go
    for move in moves:
        for c in move[3] + move[5]:
            if c >= layout.scratch_at:
                used.setdefault(c, layout.scratch_at + len(used))
    rounds: dict[int, list] = {}  # round -> [(src, dst, reduce), chunks, into]: transfers
    for k, src, dst, chunks, reduce, into in moves:
        chunks, into = [used.get(c, c) for c in chunks], [used.get(c, c) for c in into]
        same = next((t for t in rounds.setdefault(k, []) if t[0] == (src, dst, reduce)
                     and not set(t[2]) & set(into)), None)  # one transfer, each chunk once
        if same is None:
            rounds[k].append([(src, dst, reduce), chunks, into])
        else:
            same[1] += chunks
            same[2] += into
    return Schedule(name or program.name or f"msccl {program.coll}", program.ngpus,
                    layout.n_chunks, tuple(Round(Transfer(src, dst, chunks, reduce, into=into)
                                                 for (src, dst, reduce), chunks, into
                                                 in rounds[k]) for k in sorted(rounds)),
                    program.primitive, 0, n_scratch=layout.scratch_at + len(used)
                    - layout.n_chunks, input_at=layout.input_at)


def _completed_receives(layout: BufferLayout, program: Program, touched: dict) -> dict:
    """id(r) -> the re right after it that adds what it received into its own dst (RCCL's way
    to run an rrc, as dump writes it): an ``r`` into a scratch run nothing else touches, whose
    threadblock's next step, waiting for nothing else, is an ``re`` of that run. The pair is
    one reducing receive (nothing can come between them but a race)."""
    pairs = {}
    for gpu in program.gpus.values():
        for tb in gpu["tbs"].values():
            real = [step for step in tb.steps if step.type != "nop"]
            for arrive, add in zip(real, real[1:]):
                if (arrive.type == "r" and add.type == "re" and len(add.chain) == 1
                        and arrive.dstbuf == "s"
                        and (add.srcbuf, add.srcoff, add.cnt) == ("s", arrive.dstoff,
                                                                   arrive.cnt)
                        and not add.waits and all(
                            {id(step) for step, _ in touched[(arrive.gpu, chunk)]}
                            == {id(arrive), id(add)} for chunk in _run(layout, arrive, "dst"))):
                    pairs[id(arrive)] = add
    return pairs


def _ops(layout: BufferLayout, order: list[Step], completed: dict) -> tuple[list[_Op], list]:
    """Every step's data moves as ops, and the events of their reads and writes in an order
    happens-before respects (steps in ``order``; a send's read when its step runs, the
    receive's write when its step does): [op, rank, chunk, writes]. A send and the receive it
    pairs with are one op; a forwarding step sends in an op of its own."""
    ops, events, sends, folded = [], [], {}, {}  # id(step) -> its transfer; id(re) -> r's

    def op(moves) -> _Op:
        ops.append(_Op(list(moves)))
        for src, dst, chunks, reduce, into in moves:  # a local op's reads, then its writes
            reads = [(src, c) for c in _ids(chunks)] + (
                [(dst, c) for c in _ids(into)] if reduce else [])
            events.extend([ops[-1], rank, c, False] for rank, c in reads)
            events.extend([ops[-1], dst, c, True] for c in _ids(into))
        return ops[-1]

    chains, aside = {}, {}  # id(first re of a chain) -> its op; id(re) -> its copy of Y
    for step in order:
        x = _run(layout, step, "src") if step.type in READS_X else []
        y = _run(layout, step, "dst") if step.type in WRITES_Y else []
        rank = step.gpu
        if id(step) in folded:  # the re that completes an r: the r's transfer reduced
            continue
        if step.type == "cpy" and x == y:  # in place, i[c] -> o[c] is onto itself: nothing
            continue
        if step.type in ("cpy", "re"):
            for member in step.chain if not step.continues_chain else ():
                if _run(layout, member, "src") == y:  # Y op= Y: Y read aside first
                    aside[id(member)] = _Temporary(rank, len(y))
                    op([(rank, rank, y, False, aside[id(member)])])
            move = (rank, rank, aside.get(id(step), x), step.type == "re", y)
            if step.continues_chain:  # the parser's chain of re: one op, Y += X_1 + X_2 ...
                fused = chains[id(step.chain[0])]
                fused.moves.append(move)
                events.extend([fused, rank, c, False] for c in _ids(move[2]) + y)
                events.extend([fused, rank, c, True] for c in y)
            else:
                chains[id(step)] = op([move])
            continue
        lands, add = y, completed.get(id(step))
        if step.type in RECEIVES:
            reduce = add is not None or step.type in ("rrs", "rrc", "rrcs")
            if add is not None:  # r + re: the transfer reduces into the re's dst
                lands = _run(layout, add, "dst")
                folded[id(add)] = True
            if step.type == "rrs":  # R op X is formed where R lands: a copy of X first
                lands = _Temporary(rank, step.cnt)
            if step.type in ("rrs", "rrc", "rrcs") and _ids(lands) != x:
                op([(rank, rank, x, False, lands)])  # R op X, X elsewhere: X copied first
            transfer = sends[id(step.receives_from)]
            src, chunks = transfer.source
            transfer.moves.append((src, rank, chunks, reduce, lands))
            if reduce:
                events.extend([transfer, rank, c, False] for c in _ids(lands))
            events.extend([transfer, rank, c, True] for c in _ids(lands))
        if step.type in SENDS:  # s sends X; a forwarding step what it received (and formed)
            sends[id(step)] = transfer = _Op([])
            ops.append(transfer)
            transfer.source = (rank, x if step.type == "s" else lands)
            events.extend([transfer, rank, c, False] for c in _ids(transfer.source[1]))
    return ops, events


def _rounds(ops: list[_Op], events: list) -> None:
    """Each op's round: as early as the data allow (a read after the write it reads, a write
    after the writes and, in the same round or later, the reads before it). Where a send's
    receiver is ready only after its sender overwrote what it sent (the runtime's FIFO held
    it), the send moves a copy the sender made when it sent."""
    while True:
        for op in ops:
            op.after, op.round = [], -1
        last_writer, readers = {}, {}
        for op, rank, chunk, writes in events:
            key = (rank, chunk)
            if key in last_writer and last_writer[key] is not op:
                op.after.append((last_writer[key], 1))
            if writes:
                op.after += [(reader, 0) for reader in readers.get(key, ()) if reader is not op]
                last_writer[key], readers[key] = op, []
            else:
                readers.setdefault(key, []).append(op)
        cycle = _longest_paths(ops)
        if cycle is None:
            return
        _keep_aside(ops, events, cycle)


def _longest_paths(ops: list[_Op]) -> list | None:
    """Set every op's round: the longest path over ``after``. Ops that wait for each other with
    gaps of 0 (each overwrites what another reads: a swap) share a round; where such a group
    holds a gap of 1, there is no round for it: return its ops."""
    groups = _strongly_connected(ops)
    group_of = {id(op): k for k, group in enumerate(groups) for op in group}
    rounds = []
    for k, group in enumerate(groups):  # in an order where every group's preds come first
        inside = [gap for op in group for pred, gap in op.after if group_of[id(pred)] == k]
        if any(inside):
            return group
        rounds.append(max([0] + [rounds[group_of[id(pred)]] + gap for op in group
                                 for pred, gap in op.after if group_of[id(pred)] != k]))
        for op in group:
            op.round = rounds[k]
    return None


def _strongly_connected(ops: list[_Op]) -> list[list[_Op]]:
    """The ops' strongly connected components over ``after`` (Tarjan's, without recursion),
    each after the components its ops follow."""
    index, low, on_stack, stack, groups = {}, {}, set(), [], []
    for first in ops:
        if id(first) in index:
            continue
        work = [(first, iter(first.after))]
        index[id(first)] = low[id(first)] = len(index)
        stack.append(first)
        on_stack.add(id(first))
        while work:
            op, preds = work[-1]
            pred = next(preds, None)
            if pred is not None:
                pred = pred[0]
                if id(pred) not in index:
                    index[id(pred)] = low[id(pred)] = len(index)
                    stack.append(pred)
                    on_stack.add(id(pred))
                    work.append((pred, iter(pred.after)))
                elif id(pred) in on_stack:
                    low[id(op)] = min(low[id(op)], index[id(pred)])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[id(parent)] = min(low[id(parent)], low[id(op)])
            if low[id(op)] == index[id(op)]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(id(member))
                    group.append(member)
                    if member is op:
                        break
                groups.append(group)
    return groups


def _keep_aside(ops: list[_Op], events: list, cycle: list) -> None:
    """Break a cycle of rounds: one of its transfers takes a copy its sender makes of what it
    sends, when it sends it (so its sender may overwrite the chunks before it is received)."""
    transfer = next((op for op in cycle if op.source and op.moves
                     and not isinstance(op.source[1], _Temporary)), None)
    if transfer is None:  # cannot happen where happens-before has no cycle
        raise MscclError("msccl: the program's data moves wait for each other in a cycle")
    rank, chunks = transfer.source
    aside = _Temporary(rank, len(chunks))
    copy = _Op([(rank, rank, chunks, False, aside)])
    ops.insert(ops.index(transfer), copy)
    for event in events:  # the sender's reads are the copy's now; the transfer reads the copy
        if event[0] is transfer and event[1] == rank and not event[3] and event[2] in chunks:
            event[0] = copy
    events.extend([copy, rank, c, True] for c in aside.ids)
    events.extend([transfer, rank, c, False] for c in aside.ids)
    transfer.source = (rank, aside)
    transfer.moves = [(rank, dst, aside, reduce, into)
                      for _, dst, _, reduce, into in transfer.moves]


def _place_temporaries(ops: list[_Op], first_free: int) -> None:
    """Give every _Temporary chunk ids from ``first_free`` on, a rank's reused once the one
    before is no longer read."""
    temporaries = {}
    for op in ops:
        for move in op.moves:
            for chunks in (move[2], move[4]):
                if isinstance(chunks, _Temporary):
                    temporaries[id(chunks)] = chunks
                    chunks.first = op.round if chunks.first is None else min(chunks.first,
                                                                             op.round)
                    chunks.last = op.round if chunks.last is None else max(chunks.last, op.round)
    placed_at: dict[int, list] = {}  # rank -> [(last round, start id, count)] of placed ones
    for temp in sorted(temporaries.values(), key=lambda t: (t.rank, t.first)):
        placed = placed_at.setdefault(temp.rank, [])
        count = len(temp.ids)
        reuse = next((k for k, (done, _, size) in enumerate(placed)
                      if done < temp.first and size == count), None)
        if reuse is None:
            start = first_free + sum(size for _, _, size in placed)
            placed.append((temp.last, start, count))
        else:
            _, start, _ = placed[reuse]
            placed[reuse] = (temp.last, start, count)
        temp.ids = list(range(start, start + count))


def _ids(chunks) -> list[int]:
    return chunks.ids if isinstance(chunks, _Temporary) else chunks
