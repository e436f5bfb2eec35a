"""An independent reading of MSCCL XML, for the tests, written from the runtimes' own source and
not from jaxcoll.ir.msccl (it imports nothing of jaxcoll): the parser
(``src/misc/msccl/msccl_parser.cc`` in ROCm/rccl, the same code in Azure/msccl-executor-nccl)
turns each threadblock's steps into *transmissions*, and the interpreter kernel
(``src/device/msccl_kernel_impl.h``) runs them. What it models, each rule named in ``RULES``
and counted in ``EXERCISED`` when a run uses it (a test holds that every rule is exercised):

- the parser: a ``nop`` makes no transmission; its dependency joins the list of the next
  transmission that is not a chained ``re`` (a real step with nops before it must carry a
  dependency itself, or the file is refused); consecutive ``re`` steps with the same
  ``dstbuf``, ``dstoff`` and ``srcbuf``, the later one without ``depid`` and the earlier one
  without ``hasdep``, are ONE transmission whose count, buffers and ``hasdep`` are the last
  step's, reducing every chained step's ``srcoff`` (nops between them do not end the chain; the
  threadblock's 16th ``re`` in all does); ``cnt`` in 0..71; a send or receive in a threadblock
  without that peer is refused;
- the kernel: a threadblock runs its transmissions in order; one with dependencies waits until
  each named threadblock's flag has reached the named step; its step counter advances by the
  dependencies (one per nop) and by a chain's extra ``re`` steps, and a transmission with
  ``hasdep`` publishes the counter as the threadblock's flag when it is done; a fused ``re``
  reads ``Y`` and every chained source before it writes ``Y``; a send puts its data in the
  connection's FIFO (per sender, receiver and channel), a receive takes the oldest.

Each run picks, at every point, a random runnable threadblock (seeded), so several runs try
several interleavings. Values are the contributions a chunk holds ((gpu, chunk) pairs, a sorted
tuple, repeats kept; a reduce concatenates them); scratch and an out-of-place output start as
garbage, and reading garbage fails. A vector clock per threadblock finds races: two accesses of
one chunk, one a write, that no step order, dependency or message orders.
"""

from __future__ import annotations

import random
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import dataclass, field

MAX_STEPS, MAX_COUNT, MAX_REDUCE_FUSION, MAX_PER_CHANNEL = 64, 72, 16, 32
SENDS = {"s", "rcs", "rrs", "rrcs"}  # the parser's hasSend
RECEIVES = {"r", "rcs", "rrs", "rrc", "rrcs"}  # its hasRecv
TYPES = SENDS | RECEIVES | {"cpy", "re", "nop"}

RULES = {
    "nop dependency": "a nop's dependency is waited for by the next unchained transmission",
    "refused: nops before a step without depid": "the parser refuses the file",
    "trailing nops": "dependencies after the last transmission are never waited for",
    "chain": "consecutive re of one dst and srcbuf, no depid: one transmission",
    "chain across nops": "a nop between two re does not end their chain",
    "chain count": "a chain runs with its last step's count",
    "chain ended by hasdep": "an re with hasdep=1 ends its chain",
    "chain ended at 16": "the threadblock's 16th re ends its chain",
    "step counter": "the published flag counts nops and chained re as steps",
    "flag at or past": "a wait ends at the first publish at or after the named step",
    "fifo": "a receive takes the oldest message of its connection",
    "in place": "in place, i and o are one buffer",
    "garbage": "scratch and an out-of-place o start as garbage",
    "race": "unordered accesses of one chunk, one writing",
    "overlap": "a step whose X and Y overlap at different offsets races among its threads",
    "deadlock": "no threadblock can go on",
}
EXERCISED: Counter = Counter()


class Wrong(AssertionError):
    """The file does not run, or runs to a wrong result, under the runtimes' rules."""


class Refused(Wrong):
    """The runtimes' parser refuses the file."""


def _int(node, name: str) -> int:
    return int(node.get(name))  # the files these tests read write plain decimals


def _blocks(coll: str, k: int, n: int) -> tuple[int, int, int]:
    """(i chunks, o chunks, a gpu's block) of a coll with K chunks per loop on n gpus."""
    return {"allreduce": (k, k, 0), "broadcast": (k, k, 0), "reduce": (k, k, 0),
            "alltoall": (k, k, k // n), "allgather": (k // n, k, k // n),
            "reducescatter": (k, k // n, k // n), "gather": (k, n * k, k),
            "scatter": (n * k, k, k)}[coll]


def expected(coll: str, k: int, n: int, gpu: int) -> dict[int, tuple] | None:
    """What the gpu's o must hold, chunk by chunk (None: nothing is promised there)."""
    _, outs, block = _blocks(coll, k, n)
    every = lambda c: tuple(sorted((g, c) for g in range(n)))  # noqa: E731
    if coll == "allreduce":
        return {c: every(c) for c in range(outs)}
    if coll == "broadcast":
        return {c: ((0, c),) for c in range(outs)}
    if coll == "reduce":
        return {c: every(c) for c in range(outs)} if gpu == 0 else None
    if coll == "reducescatter":
        return {j: every(gpu * block + j) for j in range(outs)}
    if coll == "allgather":
        return {c: ((c // block, c),) for c in range(outs)}
    if coll == "gather":
        return {c: ((c // block, c),) for c in range(outs)} if gpu == 0 else None
    if coll == "scatter":
        return {j: ((0, gpu * block + j),) for j in range(outs)}
    if coll == "alltoall":  # block p of o came from gpu p: its block for this gpu
        return {p * block + j: ((p, gpu * block + j),) for p in range(n) for j in range(block)}
    raise ValueError(coll)


# ----------------------------------------------------------------------------- the parser

@dataclass
class Transmission:
    """What the parser makes of one step, or of a chain of ``re`` steps."""
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    count: int
    has_dependence: int
    dependencies: list  # (bid, step) pairs to wait for
    reduction_srcoffs: list = field(default_factory=list)  # a chain's sources


@dataclass
class Block:
    """A threadblock as the kernel sees it, and its state during a run."""
    send: int
    recv: int
    chan: int
    transmissions: list
    pc: int = 0
    counter: int = 0  # the kernel's ``step``
    flag: int = -1
    clock: dict = field(default_factory=dict)
    published: list = field(default_factory=list)  # (flag, clock) in order


def parse_threadblock(node, gpu: int) -> Block:
    """One ``<tb>`` as ``mscclGetAlgoFromXmlFile`` reads it."""
    send, recv, chan = _int(node, "send"), _int(node, "recv"), _int(node, "chan")
    transmissions, dependencies, pointer = [], [], 0  # all of the tb's, where the open list starts
    chain_key, reductions, since_chain = None, 0, False
    for step in node.findall("step"):
        kind = step.get("type")
        if kind not in TYPES:
            raise Refused(f"gpu {gpu}: type {kind!r}")
        if _int(step, "s") >= MAX_STEPS:
            raise Refused(f"gpu {gpu}: s >= {MAX_STEPS}")
        depid, deps = _int(step, "depid"), _int(step, "deps")
        if depid >= 0:
            dependencies.append((depid, deps))
        if kind == "nop":
            since_chain = since_chain or chain_key is not None
            continue
        key = (step.get("dstbuf"), _int(step, "dstoff"), step.get("srcbuf"))
        count = _int(step, "cnt")
        if not 0 <= count < MAX_COUNT:
            raise Refused(f"gpu {gpu}: count {count}")
        if kind in SENDS and send < 0 or kind in RECEIVES and recv < 0:
            raise Refused(f"gpu {gpu}: a {kind} without its peer")
        has_dependence = _int(step, "hasdep")
        if has_dependence not in (0, 1):
            raise Refused(f"gpu {gpu}: hasdep {has_dependence}")
        continues = kind == "re" and chain_key == key and depid == -1
        if continues:  # numTransfers--: the same transmission, its fields the last step's
            EXERCISED["chain"] += 1
            EXERCISED["chain across nops"] += since_chain
            t = transmissions[-1]
            EXERCISED["chain count"] += t.count != count
            t.srcoff, t.count, t.has_dependence = _int(step, "srcoff"), count, has_dependence
        else:
            waits = dependencies[pointer:]
            if waits and depid < 0:
                EXERCISED["refused: nops before a step without depid"] += 1
                raise Refused(f"gpu {gpu}: a chain of dependencies whose last step has none")
            EXERCISED["nop dependency"] += len(waits) > 1
            pointer = len(dependencies)
            t = Transmission(kind, step.get("srcbuf"), _int(step, "srcoff"),
                             step.get("dstbuf"), _int(step, "dstoff"), count, has_dependence,
                             waits)
            transmissions.append(t)
        since_chain = False
        if kind != "re":
            chain_key = None
            continue
        t.reduction_srcoffs.append(_int(step, "srcoff"))
        reductions += 1
        chain_key = key
        if has_dependence or reductions == MAX_REDUCE_FUSION:
            EXERCISED["chain ended by hasdep"] += bool(has_dependence)
            EXERCISED["chain ended at 16"] += reductions == MAX_REDUCE_FUSION
            chain_key = None
    EXERCISED["trailing nops"] += len(dependencies) > pointer
    return Block(send, recv, chan, transmissions)


def parse(text: str) -> tuple[dict, dict]:
    """(the ``<algo>`` attributes, {(gpu, bid): Block}) as the parser reads them."""
    algo = ElementTree.fromstring(text)
    blocks, per_channel = {}, Counter()
    for gpu_node in algo.findall("gpu"):
        gpu = _int(gpu_node, "id")
        ids = sorted(_int(tb, "id") for tb in gpu_node.findall("tb"))
        if ids != list(range(len(ids))):
            raise Refused(f"gpu {gpu}: threadblock ids {ids}")
        for node in gpu_node.findall("tb"):
            block = parse_threadblock(node, gpu)
            for side, peer in (("send", block.send), ("recv", block.recv)):
                if peer >= 0:
                    per_channel[gpu, side, block.chan] += 1
                    if per_channel[gpu, side, block.chan] > MAX_PER_CHANNEL:
                        raise Refused(f"gpu {gpu}: too many {side}s on channel {block.chan}")
            blocks[gpu, _int(node, "id")] = block
    return algo.attrib, blocks


# ----------------------------------------------------------------------------- the kernel

class Machine:
    """One run of the file."""

    def __init__(self, text: str, inplace: bool, seed: int):
        head, self.blocks = parse(text)
        self.coll = head["coll"]
        self.n, self.k = int(head["ngpus"]), int(head["nchunksperloop"])
        self.inplace, self.random = inplace, random.Random(seed)
        EXERCISED["in place"] += inplace
        ins, outs, block = _blocks(self.coll, self.k, self.n)
        algo = ElementTree.fromstring(text)
        self.cells = {}
        for gpu in algo.findall("gpu"):
            g = _int(gpu, "id")
            for c in range(ins):  # a gpu's input: its own data (allgather, gather: its block)
                owner_chunk = g * block + c if self.coll in ("allgather", "gather") else c
                self.cells[self.at(g, "i", c)] = ((g, owner_chunk),)
            for c in range(outs):
                self.cells.setdefault(self.at(g, "o", c), None)
            for c in range(_int(gpu, "s_chunks")):
                self.cells[self.at(g, "s", c)] = None
        self.fifos, self.touched = {}, {}

    def at(self, gpu: int, buffer: str, offset: int):
        """The memory a (buffer, offset) names: in place, allgather's i is o's block, ..."""
        _, _, block = _blocks(self.coll, self.k, self.n)
        if not self.inplace or buffer == "s":
            return (gpu, buffer, offset)
        if self.coll in ("allgather", "gather"):  # the call's input is its block of o
            return (gpu, "o", gpu * block + offset if buffer == "i" else offset)
        if self.coll in ("reducescatter", "scatter"):  # its output its block of i
            return (gpu, "i", gpu * block + offset if buffer == "o" else offset)
        return (gpu, "i", offset)  # one buffer

    def _released(self, gpu: int, bid: int, step: int) -> dict | None:
        """The clock of the first publish of (gpu, bid) at or after ``step``, if any yet."""
        for flag, clock in self.blocks[gpu, bid].published:
            if flag >= step:
                return clock
        return None

    def runnable(self, key) -> bool:
        block, gpu = self.blocks[key], key[0]
        if block.pc >= len(block.transmissions):
            return False
        t = block.transmissions[block.pc]
        if any(self.blocks[gpu, bid].flag < step for bid, step in t.dependencies):
            return False
        if t.type in RECEIVES and t.count:  # the kernel's loop over the count: none for 0
            return bool(self.fifos.get((block.recv, gpu, block.chan)))
        return True

    def access(self, key, cell, writes: bool) -> None:
        """Record an access; fail on a race with an unordered earlier one."""
        clock = self.blocks[key].clock
        for other, moment, wrote in self.touched.get(cell, ()):
            if other != key and (wrote or writes) and clock.get(other, 0) < moment:
                EXERCISED["race"] += 1
                raise Wrong(f"race on {cell}: threadblocks {other} and {key}")
        self.touched.setdefault(cell, []).append((key, clock.get(key, 0), writes))

    def read(self, key, gpu, buffer, offset, count) -> list:
        values = []
        for j in range(count):
            cell = self.at(gpu, buffer, offset + j)
            if cell not in self.cells:
                raise Wrong(f"{key} reads {cell}, outside the buffers")
            self.access(key, cell, False)
            if self.cells[cell] is None:
                EXERCISED["garbage"] += 1
                raise Wrong(f"{key} reads garbage at {cell}")
            values.append(self.cells[cell])
        return values

    def write(self, key, gpu, buffer, offset, values) -> None:
        for j, value in enumerate(values):
            cell = self.at(gpu, buffer, offset + j)
            if cell not in self.cells:
                raise Wrong(f"{key} writes {cell}, outside the buffers")
            self.access(key, cell, True)
            self.cells[cell] = value

    def merge(self, key, clock) -> None:
        mine = self.blocks[key].clock
        for other, moment in clock.items():
            mine[other] = max(mine.get(other, 0), moment)

    def step(self, key) -> None:
        block, gpu = self.blocks[key], key[0]
        t = block.transmissions[block.pc]
        if t.dependencies:
            for bid, step in t.dependencies:
                EXERCISED["flag at or past"] += self.blocks[gpu, bid].flag > step
                self.merge(key, self._released(gpu, bid, step))
            block.counter += len(t.dependencies) - 1
        block.clock[key] = block.clock.get(key, 0) + 1
        if t.count:
            self._move(key, t)
        if t.has_dependence:
            EXERCISED["step counter"] += block.counter != block.pc
            block.flag = block.counter
            block.published.append((block.counter, dict(block.clock)))
        block.counter += 1
        block.pc += 1

    def _move(self, key, t: Transmission) -> None:
        """A transmission's data: what it receives, reads, writes and sends."""
        block, gpu = self.blocks[key], key[0]
        if t.type in ("cpy", "re", "rrc", "rrcs"):  # the kernel's threads: element by element
            y = [self.at(gpu, t.dstbuf, t.dstoff + j) for j in range(t.count)]
            for off in t.reduction_srcoffs or [t.srcoff]:
                x = [self.at(gpu, t.srcbuf, off + j) for j in range(t.count)]
                if x != y and set(x) & set(y):
                    EXERCISED["overlap"] += 1
                    raise Wrong(f"{key}: {t.type} reads {x} and writes {y}: its threads race")
        got = None
        if t.type in RECEIVES:
            EXERCISED["fifo"] += 1
            got, clock = self.fifos[block.recv, gpu, block.chan].pop(0)
            if len(got) != t.count:
                raise Wrong(f"{key} receives {len(got)} chunks into a step of {t.count}")
            self.merge(key, clock)
        count = t.count
        if t.type == "re":  # Y and every chained X read, then Y written
            y = self.read(key, gpu, t.dstbuf, t.dstoff, count)
            xs = [self.read(key, gpu, t.srcbuf, off, count) for off in t.reduction_srcoffs]
            out = [tuple(sorted(sum((x[j] for x in xs), y[j]))) for j in range(count)]
            block.counter += len(t.reduction_srcoffs) - 1
        else:
            x = (self.read(key, gpu, t.srcbuf, t.srcoff, count)
                 if t.type in ("s", "rrs", "rrcs", "cpy", "rrc") else None)
            if t.type in ("rrs", "rrc", "rrcs"):
                out = [tuple(sorted(a + b)) for a, b in zip(got, x)]
            else:
                out = x if t.type in ("s", "cpy") else got
        if t.type in ("r", "rcs", "rrc", "rrcs", "cpy", "re"):
            self.write(key, gpu, t.dstbuf, t.dstoff, out)
        if t.type in SENDS:
            self.fifos.setdefault((gpu, block.send, block.chan), []).append(
                (out, dict(block.clock)))

    def run(self) -> None:
        while True:
            ready = [key for key in self.blocks if self.runnable(key)]
            if not ready:
                stuck = [key for key, b in self.blocks.items() if b.pc < len(b.transmissions)]
                if stuck:
                    EXERCISED["deadlock"] += 1
                    raise Wrong(f"deadlock: threadblocks {stuck[:4]} cannot go on")
                left = {key: len(q) for key, q in self.fifos.items() if q}
                if left:
                    raise Wrong(f"messages never received: {left}")
                return
            self.step(self.random.choice(ready))

    def output(self, gpu: int) -> dict[int, tuple]:
        _, outs, _ = _blocks(self.coll, self.k, self.n)
        return {c: self.cells[self.at(gpu, "o", c)] for c in range(outs)}


def run(text: str, *, inplace: bool, seed: int = 0) -> dict[int, dict[int, tuple | None]]:
    """Every gpu's ``o`` after one run (an interleaving drawn with ``seed``): per chunk the
    sorted tuple of the (gpu, input chunk) contributions it holds, or None (garbage). Raises
    Wrong for a race, a read of garbage, a deadlock; Refused where the parser refuses."""
    machine = Machine(text, inplace, seed)
    machine.run()
    return {gpu: machine.output(gpu) for gpu in range(machine.n)}


def check(text: str, *, inplace: bool, seeds=(0, 1, 2)) -> None:
    """Run the file (in place or out of place) under several interleavings: raise Wrong unless
    every gpu's o ends with exactly what the collective promises, every time."""
    for seed in seeds:
        machine = Machine(text, inplace, seed)
        machine.run()
        for gpu in range(machine.n):
            want = expected(machine.coll, machine.k, machine.n, gpu)
            if want is None:
                continue
            got = machine.output(gpu)
            wrong = {c: (got[c], v) for c, v in want.items() if got[c] != v}
            if wrong:
                c, (had, should) = next(iter(wrong.items()))
                raise Wrong(f"seed {seed}: gpu {gpu} o[{c}] holds {had}, should hold {should}")
