"""Seeded random MSCCL XML allreduce programs, for a differential fuzzer of jaxcoll's loader
(jaxcoll/ir/msccl/) against the independent checker (tests/msccl_checker.py).

``program(seed)`` writes one file in the runtimes' format, as tests/msccl_fixtures.py writes
them (one element a line, every attribute on every element). Its first line is a comment that
names the seed and what the generator meant the file to be (``intent``):

- ``valid``: it runs to completion with no race and no read of garbage, by construction;
- ``race``: one dependency the program needs is dropped (two threadblocks of one gpu may then
  touch a chunk, one writing, in no order; the dropped wait is sometimes implied by another);
- ``garbage``: a step reads a scratch (or out-of-place output) chunk nothing wrote before it;
- ``cycle``: two threadblocks of one gpu wait for each other (a deadlock).

How a valid program is built: a random sequence of data moves in one global order, tracking
which (gpu, buffer, chunk) cells hold data and reading only those. A move is

- a transfer along a path of connections on one channel: an ``s`` (or, where it goes on, a
  forwarding ``rcs``/``rrs``/``rrcs`` at each gpu in between) ending in an ``r`` or ``rrc``;
  each step goes to the connection's threadblocks (one per (gpu, channel, send peer) and per
  (gpu, channel, recv peer), some threadblocks both sending and receiving);
- a local ``cpy`` or ``re`` in a local threadblock (send=-1 recv=-1) or any threadblock of
  the gpu;
- a chain of ``re`` into one dst run from one src buffer in one threadblock (what the parser
  fuses into one transmission): equal counts or differing ones, sometimes broken by
  ``hasdep=1``, by a ``depid`` on a later link or by another src buffer; now and then longer
  than the parser's 16 reductions of a threadblock.

Then every step waits for whatever earlier step (in the global order) of another threadblock of
its gpu touches a cell it touches, one of them writing, unless that order is already implied
(a vector clock per threadblock follows threadblock order, waits and messages). More than one
wait: nops before the step, the step carrying the last. All waits point backwards in the global
order, so nothing deadlocks; a chain's later links inherit their first link's waits and carry
none of their own (so the chain stays fused). The multi-chunk reads of a chain are tracked
conservatively: every link reads and writes its runs up to the chain's largest count, so the
program is valid whether the runtime adds each link's own count or the last one's.

Scratch and (out of place) the output start as garbage; in place, ``i`` and ``o`` are one
buffer and the generator names its chunks both ways.

Edges on purpose, in valid programs: a ``deps`` now and then lower than the step waited for
(no signalling step between: the same wait); in place, a ``cpy``/``re`` now and then from
``i[c..]`` to ``o[c..]``, the same chunks (a copy onto itself; Y := Y + Y); now and then a nop
inside a chain, carrying a wait nothing needs (the parser hands it to the next step it does not
chain, and refuses the file if that step carries no depid).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

INTENTS = ("valid", "race", "garbage", "cycle")
FORWARDS = ("rcs", "rrs", "rrcs")
ENDS = ("r", "rrc")


@dataclass(eq=False)
class _Step:
    type: str
    srcbuf: str = "i"
    srcoff: int = 0
    dstbuf: str = "o"
    dstoff: int = 0
    cnt: int = 1
    hasdep: int = 0
    tb: "_Tb" = None
    time: int = 0
    seq: int = 0  # its place among its threadblock's steps (nops aside)
    reads: frozenset = frozenset()  # (gpu, cell) pairs, cells in place aliased
    writes: frozenset = frozenset()
    waits: list = field(default_factory=list)  # _Steps of other threadblocks of its gpu
    forced: list = field(default_factory=list)  # waits made on purpose (to break a chain)
    nop_only: list = field(default_factory=list)  # nops before it whose wait it does not carry
    link: bool = False  # a chain's later link: it inherits the first link's waits
    sends_to: "_Step" = None  # the receive a sending step pairs with
    receives_from: "_Step" = None
    clock: dict = None  # what is known to have happened once it is done: tb key -> seq


@dataclass(eq=False)
class _Tb:
    gpu: int
    chan: int
    send: int
    recv: int
    steps: list = field(default_factory=list)

    @property
    def key(self):
        return (self.gpu, self.chan, self.send, self.recv)


class _Generator:
    def __init__(self, seed: int, attempt: int = 0):
        self.seed, self.rng = seed, random.Random(f"msccl fuzz {seed} {attempt}")
        rng = self.rng
        draw = rng.random()
        self.intent = ("valid" if draw < 0.55 else "race" if draw < 0.72
                       else "garbage" if draw < 0.86 else "cycle")
        self.n = rng.randint(2, 8)
        self.k = rng.choice([1, 2, 2, 3, 3, 4, 4, 5, 6])
        self.channels = rng.randint(1, 3)
        self.inplace = rng.random() < 0.5
        self.scratch = [rng.choice([0, 1, 2, 3, 4, 6, 8]) for _ in range(self.n)]
        if self.intent == "garbage" and self.inplace:
            self.scratch = [max(s, 2) for s in self.scratch]
        self.time = 0
        self._threadblocks()

    # ------------------------------------------------------------------ threadblocks

    def _threadblocks(self) -> None:
        """Connections per channel (channel 0 holds a ring, the rest random edges), grouped
        into threadblocks: a gpu's send peer and recv peer on a channel share one now and
        then; 0-2 local threadblocks per gpu."""
        rng, n = self.rng, self.n
        self.tbs = {g: [] for g in range(n)}
        self.sender, self.receiver = {}, {}  # (gpu, chan, peer) -> _Tb
        density = rng.choice([0.15, 0.3, 0.6])
        for chan in range(self.channels):
            edges = {(g, (g + 1) % n) for g in range(n)} if chan == 0 else set()
            edges |= {(a, b) for a in range(n) for b in range(n)
                      if a != b and rng.random() < density}
            for g in range(n):
                outs = sorted(b for a, b in edges if a == g)
                ins = sorted(a for a, b in edges if b == g)
                rng.shuffle(outs)
                rng.shuffle(ins)
                pairs = min(len(outs), len(ins))
                both = sum(rng.random() < 0.6 for _ in range(pairs))
                shapes = [(outs[j], ins[j]) for j in range(both)]
                shapes += [(p, -1) for p in outs[both:]] + [(-1, p) for p in ins[both:]]
                for send, recv in shapes:
                    tb = _Tb(g, chan, send, recv)
                    self.tbs[g].append(tb)
                    if send >= 0:
                        self.sender[g, chan, send] = tb
                    if recv >= 0:
                        self.receiver[g, chan, recv] = tb
        for g in range(n):
            for _ in range(rng.choice([0, 1, 1, 2])):
                self.tbs[g].append(_Tb(g, 0, -1, -1))
            rng.shuffle(self.tbs[g])  # threadblock ids in no particular order

    # ------------------------------------------------------------------ cells

    def size(self, g: int, buf: str) -> int:
        return self.scratch[g] if buf == "s" else self.k

    def cell(self, g: int, buf: str, off: int):
        return (g, "io" if self.inplace and buf in "io" else buf, off)

    def cells(self, g: int, buf: str, off: int, cnt: int) -> frozenset:
        return frozenset(self.cell(g, buf, off + j) for j in range(cnt))

    def runs(self, g: int, cnt: int, bufs, data: bool | None = None, avoid=frozenset()):
        """(buf, off) of every run of cnt chunks in bufs at gpu g that holds data (data=True),
        holds some garbage (data=False) or either (None), and touches no cell of avoid."""
        found = []
        for buf in bufs:
            for off in range(self.size(g, buf) - cnt + 1):
                cells = self.cells(g, buf, off, cnt)
                if cells & avoid:
                    continue
                if data is None or (cells <= self.has) == data:
                    found.append((buf, off))
        return found

    def pick_run(self, g, cnt, bufs, data=None, avoid=frozenset()):
        found = self.runs(g, cnt, bufs, data, avoid)
        return self.rng.choice(found) if found else None

    def count(self, g: int, most: int | None = None) -> int:
        most = most or max(self.k, max(self.scratch))
        weights = [8, 5, 3, 2, 1, 1, 1, 1]
        options = list(range(1, min(most, len(weights)) + 1))
        return self.rng.choices(options, weights[:len(options)])[0]

    def dst_bufs(self):
        if self.inplace:
            return ["i", "o", "s", "o"]
        return ["o", "o", "s", "s"] + (["i"] if self.rng.random() < 0.2 else [])

    # ------------------------------------------------------------------ steps

    def add(self, tb: _Tb, step: _Step, reads=frozenset(), writes=frozenset()) -> _Step:
        step.tb, step.time, step.seq = tb, self.time, len(tb.steps)
        step.reads, step.writes = frozenset(reads), frozenset(writes)
        self.time += 1
        if step.type == "re" and not step.link and not step.forced:
            self._no_accidental_chain(tb, step)
        tb.steps.append(step)
        self.has |= step.writes
        return step

    def _no_accidental_chain(self, tb: _Tb, step: _Step) -> None:
        """An re that the parser would chain to the one before it, where the generator did
        not mean a chain: the one before signals (hasdep=1), which ends a chain."""
        last = tb.steps[-1] if tb.steps else None
        if (last is not None and last.type == "re"
                and (last.dstbuf, last.dstoff, last.srcbuf)
                == (step.dstbuf, step.dstoff, step.srcbuf)):
            last.hasdep = 1

    def transfer(self) -> bool:
        """s (or a forwarding step) along a path of connections on one channel, ending in r
        or rrc; the first sender reads data, each forwarding step reads data."""
        rng = self.rng
        chan = rng.randrange(self.channels)
        starters = [tb for g in range(self.n) for tb in self.tbs[g]
                    if tb.chan == chan and tb.send >= 0]
        if not starters:
            return False
        first = rng.choice(starters)
        g, cnt = first.gpu, self.count(first.gpu)
        x = self.pick_run(g, cnt, ["i", "o", "s"], data=True)
        if x is None:
            return False
        plan = [(first, "s", x, None)]
        hops, prev, at = 0, g, first.send
        while True:  # choose the path's steps before adding any (a step may find no run)
            tb = self.receiver[at, chan, prev]
            go_on = tb.send >= 0 and hops < 3 and rng.random() < 0.5
            kind = rng.choice(FORWARDS if go_on else ENDS)
            xr = yr = None
            if kind in ("rrs", "rrc", "rrcs"):
                xr = self.pick_run(at, cnt, ["i", "o", "s"], data=True)
                if xr is None:
                    return False
            if kind in ("r", "rcs", "rrc", "rrcs"):
                if xr is not None and rng.random() < 0.6:
                    yr = xr  # reduce in place: Y is X
                else:
                    avoid = self.cells(at, *xr, cnt) if xr else frozenset()
                    yr = self.pick_run(at, cnt, self.dst_bufs(), avoid=avoid)
                    if yr is None:
                        return False
            plan.append((tb, kind, xr, yr))
            if not go_on:
                break
            hops, prev, at = hops + 1, at, tb.send
        sent = None
        for tb, kind, xr, yr in plan:
            src = xr or yr or x
            dst = yr or xr or src
            step = _Step(kind, src[0], src[1], dst[0], dst[1], cnt)
            reads = self.cells(tb.gpu, *xr, cnt) if xr and kind != "s" else frozenset()
            if kind == "s":
                reads = self.cells(tb.gpu, *x, cnt)
            writes = self.cells(tb.gpu, *yr, cnt) if yr else frozenset()
            self.add(tb, step, reads, writes)
            if sent is not None:
                sent.sends_to, step.receives_from = step, sent
            sent = step
        return True

    def local_tb(self, g: int) -> _Tb:
        local = [tb for tb in self.tbs[g] if tb.send < 0 and tb.recv < 0]
        if local and self.rng.random() < 0.6:
            return self.rng.choice(local)
        return self.rng.choice(self.tbs[g]) if self.tbs[g] else None

    def local(self, kind: str, garbage: bool = False) -> bool:
        """cpy (Y := X) or re (Y := Y + X) at a random gpu; ``garbage``: X holds garbage."""
        rng = self.rng
        g = rng.randrange(self.n)
        tb = self.local_tb(g)
        if tb is None:
            return False
        cnt = self.count(g)
        x = self.pick_run(g, cnt, ["i", "o", "s"], data=False if garbage else True)
        if x is None:
            return False
        xs = self.cells(g, *x, cnt)
        y = self.pick_run(g, cnt, self.dst_bufs() if kind == "cpy" else ["i", "o", "s"],
                          data=None if kind == "cpy" else True, avoid=xs)
        if self.inplace and x[0] in "io" and rng.random() < 0.04:
            y = ("o" if x[0] == "i" else "i", x[1])  # the same chunks by their other name
        if y is None:
            return False
        ys = self.cells(g, *y, cnt)
        self.add(tb, _Step(kind, x[0], x[1], y[0], y[1], cnt),
                 xs | (ys if kind == "re" else frozenset()), ys)
        return True

    def chain(self) -> bool:
        """Consecutive re into one dst run from one src buffer in one threadblock: the
        parser's chain (equal or differing counts; broken now and then). Every link reads
        and writes what the whole chain does, up to its largest count."""
        rng = self.rng
        g = rng.randrange(self.n)
        tb = self.local_tb(g)
        if tb is None:
            return False
        links = rng.randint(14, 18) if rng.random() < 0.05 else rng.choice([2, 2, 2, 3, 3, 4])
        most = self.count(g)
        counts = ([most] * links if rng.random() < 0.35
                  else [rng.randint(1, most) for _ in range(links)])
        srcbuf = rng.choice(["i", "o", "s"])
        ys = self.runs(g, most, ["i", "o", "s"], data=True)
        rng.shuffle(ys)
        for y in ys:
            yc = self.cells(g, *y, most)
            xs = self.runs(g, most, [srcbuf], data=True, avoid=yc)
            if xs:
                break
        else:
            return False
        breaker = rng.random()
        sources = [rng.choice(xs) for _ in counts]
        if breaker < 0.1:  # the last link from another src buffer: no chain there
            found = [f for f in self.runs(g, most, "ios", data=True, avoid=yc)
                     if f[0] != srcbuf]
            if found:
                sources[-1] = rng.choice(found)
        touched = yc.union(*(self.cells(g, buf, off, most) for buf, off in sources))
        earlier = [s for other_tb in self.tbs[g] if other_tb is not tb for s in other_tb.steps]
        for j, (cnt, (buf, off)) in enumerate(zip(counts, sources)):
            step = _Step("re", buf, off, y[0], y[1], cnt, link=j > 0)
            if j and 0.1 <= breaker < 0.3 and j == links // 2 and earlier:
                step.forced.append(rng.choice(earlier))  # a depid on a later link: no chain
                step.link = False
            if j < links - 1 and 0.3 <= breaker < 0.45 and j == 0:
                step.hasdep = 1  # the first link signals: no chain
            if step.link and 0.45 <= breaker < 0.5 and earlier:
                step.nop_only.append(rng.choice(earlier))  # a nop inside the chain
            self.add(tb, step, touched, yc)
        return True

    # ------------------------------------------------------------------ waits

    def waits(self) -> None:
        """Every step waits for the latest earlier step of each other threadblock of its gpu
        that it conflicts with (a common cell, one writing), unless known to be done."""
        steps = sorted((s for g in range(self.n) for tb in self.tbs[g] for s in tb.steps),
                       key=lambda s: s.time)
        by_gpu = {g: [] for g in range(self.n)}
        clocks = {}  # tb key -> its clock after its last step
        for step in steps:
            tb, g = step.tb, step.tb.gpu
            clock = dict(clocks.get(id(tb), {}))
            if step.receives_from is not None:
                _merge(clock, step.receives_from.clock)
            for target in step.forced:
                self._wait(step, target, clock)
            conflicts = [a for a in by_gpu[g] if a.tb is not tb and (
                a.writes & (step.reads | step.writes) or step.writes & a.reads)]
            for a in sorted(conflicts, key=lambda a: -a.time):
                if clock.get(id(a.tb), -1) < a.seq:
                    if step.link:
                        raise _Retry("a chain link would need a wait of its own")
                    self._wait(step, a, clock)
            clock[id(tb)] = step.seq
            step.clock = clock
            clocks[id(tb)] = clock
            by_gpu[g].append(step)

    def _wait(self, step: _Step, target: _Step, clock: dict) -> None:
        if target not in step.waits:
            step.waits.append(target)
        target.hasdep = 1
        _merge(clock, target.clock)

    def lower_deps(self, step: _Step, position: dict) -> int:
        """deps for a wait on ``step``: its position, or now and then an earlier one of its
        threadblock with no signalling step between (the same wait: it ends at the first
        step at or after deps that signals)."""
        at = position[id(step)]
        if self.rng.random() < 0.3:
            earlier = [position[id(s)] for s in step.tb.steps[:step.seq]
                       if s.hasdep] + [-1]
            return self.rng.randint(max(earlier) + 1, at)
        return at

    # ------------------------------------------------------------------ the program

    def build(self) -> str:
        rng = self.rng
        self.has = {self.cell(g, "i", c) for g in range(self.n) for c in range(self.k)}
        moves = rng.randint(4, 26)
        garbage_at = rng.randrange(moves) if self.intent == "garbage" else -1
        for m in range(moves):
            if m == garbage_at:
                for _ in range(20):
                    if self.local(rng.choice(["cpy", "re"]), garbage=True):
                        break
                else:
                    raise _Retry("no garbage to read")
                continue
            kind = rng.choices(["transfer", "cpy", "re", "chain"], [45, 12, 13, 30])[0]
            for _ in range(4):  # a few tries: a move may find no run that fits
                if (self.transfer() if kind == "transfer" else self.chain()
                        if kind == "chain" else self.local(kind)):
                    break
        self.waits()
        if self.intent == "race":
            self._drop_a_wait()
        elif self.intent == "cycle":
            self._cycle()
        return self.text()

    def _drop_a_wait(self) -> None:
        waiting = [s for g in range(self.n) for tb in self.tbs[g] for s in tb.steps
                   if [w for w in s.waits if w not in s.forced]]
        if not waiting:
            raise _Retry("no wait to drop")
        step = self.rng.choice(waiting)
        step.waits.remove(self.rng.choice([w for w in step.waits if w not in step.forced]))

    def _cycle(self) -> None:
        busy = [g for g in range(self.n) if sum(bool(tb.steps) for tb in self.tbs[g]) >= 2]
        if not busy:
            raise _Retry("no gpu with two threadblocks")
        g = self.rng.choice(busy)
        a, b = self.rng.sample([tb for tb in self.tbs[g] if tb.steps], 2)
        for one, other in ((a, b), (b, a)):
            first, last = one.steps[0], other.steps[-1]
            first.waits.append(last)
            last.hasdep = 1

    def text(self) -> str:
        gpus = {g: [tb for tb in self.tbs[g] if tb.steps] for g in range(self.n)}
        ids = {id(tb): t for g in gpus for t, tb in enumerate(gpus[g])}
        position = {}
        for g in gpus:
            for tb in gpus[g]:
                at = 0
                for step in tb.steps:
                    for target in step.nop_only:
                        target.hasdep = 1
                    at += max(len(step.waits) - 1, 0) + len(step.nop_only)
                    position[id(step)] = at
                    at += 1
                if at > 64:
                    raise _Retry("more than 64 steps in a threadblock")
        inplace = int(self.inplace)
        lines = [f"<!-- msccl fuzz seed={self.seed} intent={self.intent} -->",
                 f'<algo name="fuzz {self.seed}" proto="Simple" nchannels="{self.channels}" '
                 f'nchunksperloop="{self.k}" ngpus="{self.n}" coll="allreduce" '
                 f'inplace="{inplace}" outofplace="{1 - inplace}" minBytes="0" maxBytes="0">']
        for g in range(self.n):
            lines.append(f'  <gpu id="{g}" i_chunks="{self.k}" o_chunks="{self.k}" '
                         f's_chunks="{self.scratch[g]}">')
            for t, tb in enumerate(gpus[g]):
                lines.append(f'    <tb id="{t}" send="{tb.send}" recv="{tb.recv}" '
                             f'chan="{tb.chan}">')
                at = 0
                for step in tb.steps:
                    waits = [(ids[id(w.tb)], self.lower_deps(w, position))
                             for w in step.nop_only + step.waits]
                    for depid, deps in waits[:len(step.nop_only) + len(step.waits) - 1]:
                        lines.append("      " + _line(at, "nop", "i", -1, "o", -1, 0, depid,
                                                      deps, 0))
                        at += 1
                    depid, deps = waits[-1] if step.waits else (-1, -1)
                    if not step.waits and step.nop_only:
                        lines.append("      " + _line(at, "nop", "i", -1, "o", -1, 0,
                                                      *waits[-1], 0))
                        at += 1
                    lines.append("      " + _line(at, step.type, step.srcbuf, step.srcoff,
                                                  step.dstbuf, step.dstoff, step.cnt, depid,
                                                  deps, step.hasdep))
                    at += 1
                lines.append("    </tb>")
            lines.append("  </gpu>")
        return "\n".join(lines + ["</algo>"]) + "\n"


class _Retry(Exception):
    """This draw came out unusable (no run fits, too many steps): draw again."""


def _merge(clock: dict, other: dict | None) -> None:
    for key, seq in (other or {}).items():
        if clock.get(key, -1) < seq:
            clock[key] = seq


def _line(s, kind, srcbuf, srcoff, dstbuf, dstoff, cnt, depid, deps, hasdep) -> str:
    return (f'<step s="{s}" type="{kind}" srcbuf="{srcbuf}" srcoff="{srcoff}" '
            f'dstbuf="{dstbuf}" dstoff="{dstoff}" cnt="{cnt}" depid="{depid}" deps="{deps}" '
            f'hasdep="{hasdep}"/>')


def program(seed: int) -> str:
    """A random MSCCL XML allreduce, the same for the same seed (its first line names the
    seed and the intent: valid, race, garbage or cycle)."""
    for attempt in range(100):
        try:
            return _Generator(seed, attempt).build()
        except _Retry:
            continue
    raise RuntimeError(f"msccl_fuzz: no program for seed {seed} in 100 draws")


def intent(text: str) -> str:
    """The intent a generated file's first line names."""
    return re.search(r"intent=(\w+)", text).group(1)


def inplace(text: str) -> bool:
    return 'inplace="1"' in text.split("\n", 2)[1]


# ---------------------------------------------------------------------- what a file holds

def chains(text: str) -> list[list[dict]]:
    """The chains of re steps the runtimes' parser fuses (msccl_parser.cc): per threadblock,
    consecutive re steps (nops between them aside) with the chain's dstbuf, dstoff and srcbuf,
    depid -1, after an re with hasdep 0, up to the threadblock's 16th re; only chains of two or
    more steps, each step as its attributes."""
    found = []
    for tb in re.findall(r"<tb [^>]*>(.*?)</tb>", text, re.S):
        steps = [dict(re.findall(r'(\w+)="([^"]*)"', line))
                 for line in re.findall(r"<step [^>]*/>", tb)]
        current, reductions, key = [], 0, None
        for step in steps:
            if step["type"] == "nop":
                continue
            if step["type"] != "re":
                key = None
            else:
                this = (step["dstbuf"], step["dstoff"], step["srcbuf"])
                if key == this and step["depid"] == "-1":
                    current.append(step)
                else:
                    if len(current) > 1:
                        found.append(current)
                    current = [step]
                reductions += 1
                key = None if step["hasdep"] == "1" or reductions == 16 else this
            if key is None:
                if len(current) > 1:
                    found.append(current)
                current = []
        if len(current) > 1:
            found.append(current)
    return found


def differing_chain(text: str) -> bool:
    """True if some chain's counts differ (where today's loader and the runtimes disagree)."""
    return any(len({step["cnt"] for step in chain}) > 1 for chain in chains(text))
