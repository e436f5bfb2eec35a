"""An independent reading of MSCCL XML, for the tests: it runs the file the way the runtimes'
interpreter does (threadblocks stepping through their steps, a FIFO per connection, flags for
dependencies) without jaxcoll.ir.msccl's parser or its rounds, and says what every gpu's output
holds.

Each run picks, at every point, a random runnable threadblock (seeded), so several runs try
several interleavings. Values are the contributions a chunk holds ((gpu, chunk) pairs, a
sorted tuple; a reduce concatenates them); scratch and an out-of-place output start as
garbage, and reading garbage fails. A vector clock per threadblock finds races: two accesses of
one chunk, one a write, that no step order, dependency or message orders.
"""

from __future__ import annotations

import random
import xml.etree.ElementTree as ElementTree

SENDS = {"s", "rcs", "rrs", "rrcs"}
RECEIVES = {"r", "rcs", "rrs", "rrc", "rrcs"}


class Wrong(AssertionError):
    """The file does not run, or runs to a wrong result, under the runtimes' rules."""


def _int(node, name):
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


class Machine:
    """One run of the file."""

    def __init__(self, text: str, inplace: bool, seed: int):
        algo = ElementTree.fromstring(text)
        self.coll = algo.get("coll")
        self.n, self.k = _int(algo, "ngpus"), _int(algo, "nchunksperloop")
        self.inplace, self.random = inplace, random.Random(seed)
        ins, outs, block = _blocks(self.coll, self.k, self.n)
        self.cells, self.tbs = {}, {}
        for gpu in algo.findall("gpu"):
            g = _int(gpu, "id")
            scratch = _int(gpu, "s_chunks")
            for c in range(ins):  # a gpu's input: its own data (allgather, gather: its block)
                owner_chunk = g * block + c if self.coll in ("allgather", "gather") else c
                self.cells[self.at(g, "i", c)] = ((g, owner_chunk),)
            for c in range(outs):
                self.cells.setdefault(self.at(g, "o", c), None)
            for c in range(scratch):
                self.cells[self.at(g, "s", c)] = None
            for tb in gpu.findall("tb"):
                steps = [{name: (value if name in ("type", "srcbuf", "dstbuf") else int(value))
                          for name, value in step.attrib.items()} for step in tb.findall("step")]
                self.tbs[g, _int(tb, "id")] = {"send": _int(tb, "send"), "recv": _int(tb, "recv"),
                                               "chan": _int(tb, "chan"), "steps": steps, "pc": 0,
                                               "flag": -1, "clock": {}, "published": {}}
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

    def runnable(self, key) -> bool:
        tb, gpu = self.tbs[key], key[0]
        if tb["pc"] >= len(tb["steps"]):
            return False
        pc = tb["pc"]
        while tb["steps"][pc]["type"] == "nop":  # a nop's wait is the next real step's
            step = tb["steps"][pc]
            if self.tbs[gpu, step["depid"]]["flag"] < step["deps"]:
                return False
            pc += 1
            if pc >= len(tb["steps"]):
                return True  # trailing nops: nothing to do
        step = tb["steps"][pc]
        if step["depid"] >= 0 and self.tbs[gpu, step["depid"]]["flag"] < step["deps"]:
            return False
        if step["type"] in RECEIVES:
            return bool(self.fifos.get((tb["recv"], gpu, tb["chan"])))
        return True

    def access(self, key, cell, writes: bool) -> None:
        """Record an access; fail on garbage read or a race with an unordered earlier one."""
        clock = self.tbs[key]["clock"]
        for other, moment, wrote in self.touched.get(cell, ()):
            if other != key and (wrote or writes) and clock.get(other, 0) < moment:
                raise Wrong(f"race on {cell}: threadblocks {other} and {key}")
        self.touched.setdefault(cell, []).append((key, clock.get(key, 0), writes))

    def read(self, key, gpu, buffer, offset, count) -> list:
        values = []
        for j in range(count):
            cell = self.at(gpu, buffer, offset + j)
            self.access(key, cell, False)
            if self.cells[cell] is None:
                raise Wrong(f"{key} reads garbage at {cell}")
            values.append(self.cells[cell])
        return values

    def write(self, key, gpu, buffer, offset, values) -> None:
        for j, value in enumerate(values):
            cell = self.at(gpu, buffer, offset + j)
            self.access(key, cell, True)
            self.cells[cell] = value

    def merge(self, key, clock) -> None:
        mine = self.tbs[key]["clock"]
        for other, moment in clock.items():
            mine[other] = max(mine.get(other, 0), moment)

    def step(self, key) -> None:
        tb, gpu = self.tbs[key], key[0]
        while tb["steps"][tb["pc"]]["type"] == "nop":
            nop = tb["steps"][tb["pc"]]
            self.merge(key, self.tbs[gpu, nop["depid"]]["published"][nop["deps"]])
            tb["pc"] += 1
            if tb["pc"] >= len(tb["steps"]):
                return
        step = tb["steps"][tb["pc"]]
        if step["depid"] >= 0:
            self.merge(key, self.tbs[gpu, step["depid"]]["published"][step["deps"]])
        tb["clock"][key] = tb["clock"].get(key, 0) + 1
        kind, count = step["type"], step["cnt"]
        got = None
        if kind in RECEIVES:
            got, clock = self.fifos[tb["recv"], gpu, tb["chan"]].pop(0)
            if len(got) != count:
                raise Wrong(f"{key} receives {len(got)} chunks into a step of {count}")
            self.merge(key, clock)
        x = (self.read(key, gpu, step["srcbuf"], step["srcoff"], count)
             if kind in ("s", "rrs", "rrc", "rrcs", "cpy", "re") else None)
        if kind == "re":
            y = self.read(key, gpu, step["dstbuf"], step["dstoff"], count)
            out = [tuple(sorted(a + b)) for a, b in zip(y, x)]
        elif kind in ("rrs", "rrc", "rrcs"):
            out = [tuple(sorted(a + b)) for a, b in zip(got, x)]
        else:
            out = x if kind in ("s", "cpy") else got
        if kind in ("r", "rcs", "rrc", "rrcs", "cpy", "re"):
            self.write(key, gpu, step["dstbuf"], step["dstoff"], out)
        if kind in SENDS:
            self.fifos.setdefault((gpu, tb["send"], tb["chan"]), []).append(
                (out, dict(tb["clock"])))
        position = tb["pc"]
        tb["pc"] += 1
        if step["hasdep"]:  # publish: waits for this step or one before it are over
            tb["flag"] = position
            for earlier in range(position + 1):
                tb["published"].setdefault(earlier, dict(tb["clock"]))

    def run(self) -> None:
        while True:
            ready = [key for key in self.tbs if self.runnable(key)]
            if not ready:
                stuck = [key for key, tb in self.tbs.items() if tb["pc"] < len(tb["steps"])]
                if stuck:
                    raise Wrong(f"deadlock: threadblocks {stuck[:4]} cannot go on")
                left = {key: len(q) for key, q in self.fifos.items() if q}
                if left:
                    raise Wrong(f"messages never received: {left}")
                return
            self.step(self.random.choice(ready))

    def output(self, gpu: int) -> dict[int, tuple]:
        _, outs, _ = _blocks(self.coll, self.k, self.n)
        return {c: self.cells[self.at(gpu, "o", c)] for c in range(outs)}


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
