"""MSCCL's XML algorithms in and out: :func:`load` reads one into an ordinary
:class:`~jaxcoll.Schedule`, :func:`dump` writes one that MSCCL's runtimes run.

MSCCL's XML is what Microsoft's MSCCL (msccl-executor-nccl) and AMD's RCCL execute on GPUs;
RCCL ships a library of them (``tools/msccl-algorithms/``). The rules below are the runtimes'
own, read from their public sources: the parser (``src/misc/msccl/msccl_parser.cc`` in
ROCm/rccl and in Azure/msccl-executor-nccl), the interpreter kernel
(``src/device/msccl_kernel_impl.h`` in RCCL, ``msccl_kernel.cu`` in msccl-executor-nccl), the
setup and algorithm selection (``msccl_setup.cc``, ``msccl_lifecycle.cc``).

**The program.** ``<algo>`` names the collective (``coll``), the GPUs (``ngpus``), the chunks
the buffers are cut into (``nchunksperloop`` K), ``nchannels``, ``proto`` and when it is chosen
(``inplace``, ``outofplace``, ``minBytes``, ``maxBytes``): all required, no defaults. Each
``<gpu id>`` declares ``i_chunks``, ``o_chunks``, ``s_chunks`` and holds threadblocks ``<tb id
send recv chan>``, each an ordered list of ``<step s type srcbuf srcoff dstbuf dstoff cnt depid
deps hasdep>`` (all ten attributes on every step).

**Buffers and chunks.** ``i`` (input), ``o`` (output), ``s`` (scratch, garbage at the start). A
chunk is 1/K of the larger of the whole input and output: allreduce, broadcast and reduce cut
their buffer into K chunks; allgather's ``o`` has K and ``i`` K/N (the rank's part);
reducescatter the reverse; alltoall's ``i`` and ``o`` have K, the block for (and from) peer p
at chunks p·K/N on; gather's and scatter's root buffer has N·K chunks, the other K (their size
multiplier is 1). In place, the runtime passes one buffer as both: allgather's ``i[k]`` is
``o[r·K/N + k]``, reducescatter's ``o[k]`` is ``i[r·K/N + k]``, the others' ``i[k]`` is ``o[k]``.

**Steps** (X = ``srcbuf[srcoff .. srcoff + cnt)``, Y = the dst run, R = what arrives from the
threadblock's ``recv`` peer; the reduction is the call's, not the file's)::

    s     send X                      cpy   Y := X
    r     Y := R                      re    Y := Y op X
    rcs   Y := R, send R              rrs   send R op X (stores nothing)
    rrc   Y := R op X                 rrcs  Y := R op X, send it
    nop   no data: its dependency is the next step's

**Pairing.** A threadblock has one send and one receive connection for its life (its ``send``
and ``recv`` peers on its channel): the j-th sending step of gpu x's threadblock with
``send=y`` on channel c pairs with the j-th receiving step of gpu y's threadblock with
``recv=x`` on channel c, with equal ``cnt``. At most one threadblock per (gpu, channel, send
peer) and per (gpu, channel, receive peer): two would share one FIFO.

**Dependencies.** A step with ``depid=b deps=k`` waits until threadblock b of its gpu has
published a flag at or past step k; a step with ``hasdep=1`` publishes one when it is done
(flags are per threadblock and only grow, so the wait ends at the first step at or after k
with ``hasdep=1``). More dependencies are ``nop`` steps before the step, each with one; the
step itself must carry the last (the parser refuses it otherwise); nops after a threadblock's
last real step are dropped with their waits. ``s`` is the step's position in its threadblock,
nops included.

**Chained reductions.** The parser fuses consecutive ``re`` steps of a threadblock into one
transmission where the later one has the chain's ``dstbuf``, ``dstoff`` and ``srcbuf`` and no
``depid`` and the earlier one no ``hasdep`` (nops between them do not end a chain; the
threadblock's 16th ``re`` in all does). It keeps the *last* step's ``cnt``, and the kernel
adds every chained source over that one count, reading them all (and ``Y``) before it writes
``Y``: ``re s[0] cnt=2 -> o[0]`` then ``re s[2] cnt=1 -> o[0]`` adds only ``s[0]`` and
``s[2]`` into ``o[0]``, and ``o[1]`` gets nothing. :func:`load` reads such a file as the
runtimes run it, with an :class:`MscclWarning` where a chain's counts differ, so ``verify``
tells the truth about what the runtimes compute (refusing it would hide what the file does;
reading each step with its own count, as jaxcoll did, proved files the runtimes compute
wrong). :func:`dump` ends a chain (``hasdep=1`` on the step before) wherever chaining would
change the sum. A nop's wait before an ``re`` the parser chains goes to the next step it does
not chain (or nowhere, at the threadblock's end), and a flag publishes the kernel's step
counter, which then falls behind the file's positions: both read as the runtimes run them.
In place, ``cpy i[c] -> o[c]`` copies a chunk onto itself (nothing) and ``re i[c] -> o[c]``
adds it to itself (read aside first, as a schedule cannot move a chunk onto itself).

Limits: 64 steps per threadblock, ``cnt`` < 72, ``depid`` <= 127
(an int8), 32 sending and 32 receiving threadblocks per channel. RCCL today runs ``s``, ``r``,
``cpy``, ``re`` and ``nop`` only ("this version of MSCCL build doesn't support full Ops" for
the fused ``rcs``, ``rrs``, ``rrc``, ``rrcs``); msccl-executor-nccl runs all nine.

**As a Schedule.** Every rank's buffer is the primitive's chunks (the output, where the call is
out of place), then the input's (out of place only: ``input_at``), then the scratch chunks and
one temporary per ``rrs`` step (or ``rrc``/``rrcs`` whose X is not its Y: X is copied there
first). A step's data moves become transfers, a send and the receive it pairs with one
transfer, ``cpy``/``re`` local ones; each goes to the earliest round its step's dependencies,
its threadblock's order and its pairing allow (a forwarding step sends a round after it
receives). Races (two threadblocks touching a chunk, one writing, in no order) and reads of a
chunk nothing wrote are refused. Broadcast, reduce, gather and scatter have no root in the
file: it is 0 (the call's).
"""

from __future__ import annotations

import re as _re
import warnings
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Round, Schedule, ScheduleError, Transfer
from jaxcoll.ir.symbolic import verify


class MscclWarning(UserWarning):
    """A file the runtimes run to another result than its steps read one by one suggest (a
    chain of ``re`` steps whose counts differ); jaxcoll reads it as the runtimes run it."""


class MscclError(ScheduleError):
    """An MSCCL XML file (or a schedule to write as one) that MSCCL's runtimes would not run,
    or would run to another result; the message names the gpu, threadblock and step."""


# coll -> jaxcoll's primitive; msccl-tools writes "reduce_scatter", the runtimes "reducescatter"
COLLS = {"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
         "reduce_scatter": "reduce_scatter", "alltoall": "alltoall", "broadcast": "broadcast",
         "reduce": "reduce", "gather": "gather", "scatter": "scatter"}
COLL_OF = {"allreduce": "allreduce", "allgather": "allgather", "reduce_scatter": "reducescatter",
           "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce",
           "gather": "gather", "scatter": "scatter"}
SENDS = {"s", "rcs", "rrs", "rrcs"}  # steps that send on the threadblock's connection
RECEIVES = {"r", "rcs", "rrs", "rrc", "rrcs"}  # steps that receive on it
TYPES = SENDS | RECEIVES | {"cpy", "re", "nop"}
READS_X = {"s", "rrs", "rrc", "rrcs", "cpy", "re"}  # steps whose src run is read
WRITES_Y = {"r", "rcs", "rrc", "rrcs", "cpy", "re"}  # steps whose dst run is written
MAX_STEPS, MAX_COUNT, MAX_DEPID, MAX_PER_CHANNEL = 64, 72, 127, 32
MAX_REDUCE_FUSION = 16  # the parser closes a chain of re at a threadblock's 16th re
ALGO_ATTRIBUTES = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace",
                   "outofplace", "minBytes", "maxBytes")
STEP_ATTRIBUTES = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps",
                   "hasdep")


# ----------------------------------------------------------------------------- the program

@dataclass
class Step:
    gpu: int
    tb: int
    index: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int
    written_cnt: int = -1  # cnt as the file writes it; ``cnt`` is what the kernel runs
    chain: list = field(default_factory=list)  # an re: the re steps fused with it, in order
    waiting: list = field(default_factory=list)  # steps (its nops, itself) with a depid
    waits: list = field(default_factory=list)  # the steps whose flags end those waits
    flag: int = -1  # what the kernel publishes when it ends a transmission (:func:`_flags`)

    def where(self) -> str:
        return f"gpu {self.gpu}, threadblock {self.tb}, step {self.index}"

    @property
    def continues_chain(self) -> bool:
        """True for an ``re`` the parser fused into the ``re`` steps before it."""
        return bool(self.chain) and self.chain[0] is not self


@dataclass
class Threadblock:
    gpu: int
    id: int
    send: int
    recv: int
    chan: int
    steps: list[Step]


@dataclass
class Program:
    """An MSCCL XML algorithm, read and checked by the runtime's rules."""
    name: str
    coll: str
    primitive: str
    ngpus: int
    nchunks: int  # nchunksperloop
    nchannels: int
    proto: str
    inplace: bool
    outofplace: bool
    min_bytes: int
    max_bytes: int
    gpus: dict  # id -> {"i_chunks", "o_chunks", "s_chunks", "tbs": {id: Threadblock}}

    def sizes(self, rank: int) -> dict[str, int]:
        """The chunks of ``i``, ``o`` and ``s`` at ``rank`` (``s``: what the file declares)."""
        return {**_io_chunks(self.primitive, self.nchunks, self.ngpus),
                "s": self.gpus[rank]["s_chunks"]}


def _io_chunks(primitive: str, k: int, n: int) -> dict[str, int]:
    """(input, output) chunks of a coll of K chunks per loop on n gpus, as the runtime sizes
    them (a chunk is 1/K of the larger whole buffer; gather and scatter multiply by 1)."""
    record = RECORDS[primitive]
    if record.rows_in == record.rows_out:  # the same size in and out
        return {"i": k, "o": k}
    one, whole = (k, n * k) if record.rooted else (k // n, k)  # a rank's row, all n rows
    return {"i": one if record.rows_in == "1" else whole,
            "o": one if record.rows_out == "1" else whole}


def _block(primitive: str, k: int, n: int) -> int:
    """The chunks of one rank's block in a buffer of n blocks (0 if there are none)."""
    record = RECORDS[primitive]
    if record.layout not in ("gather", "scatter"):
        return 0
    return k if record.rooted else k // n


def _strtol(text: str, what: str) -> int:
    """An integer as the runtime's ``strtol(text, NULL, 0)`` reads it: 0x.. hex, a leading 0
    octal (``"010"`` is 8); anything else but a whole number is refused."""
    found = _re.fullmatch(r"\s*([-+]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)\s*", text or "")
    if found is None:
        raise MscclError(f"msccl: {what}={text!r} is not an integer")
    sign, digits = found.groups()
    value = int(digits, 16) if digits[:2].lower() == "0x" else int(digits, 8 if digits[0] == "0"
                                                                     else 10)
    return -value if sign == "-" else value


def _attribute(node, name: str, where: str, integer: bool = True):
    value = node.get(name)
    if value is None:
        raise MscclError(f"msccl: {where}: attribute {name!r} of <{node.tag}> not found (the "
                         "runtimes take no defaults)")
    return _strtol(value, f"{where}: {name}") if integer else value


def parse(source, assume: dict | None = None, *, _stacklevel: int = 2) -> Program:
    """Read an MSCCL XML algorithm (a path or the text) by the runtime's rules, without
    making a schedule of it: every threadblock, step, pairing and dependency checked.
    ``assume``: values for ``<algo>`` attributes the file lacks (msccl-tools' writer leaves
    out ``outofplace``, ``minBytes`` and ``maxBytes``, which the runtimes require)."""
    text = Path(source).read_text() if _is_path(source) else str(source)
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise MscclError(f"msccl: malformed XML: {error}") from None
    if root.tag != "algo":
        found = root.find(".//algo")
        if found is None:
            raise MscclError(f"msccl: no <algo> element (the root is <{root.tag}>)")
        root = found
    for attribute, value in (assume or {}).items():
        if root.get(attribute) is None:
            root.set(attribute, str(value))
    get = {name: _attribute(root, name, "algo", integer=name not in ("name", "proto", "coll"))
           for name in ALGO_ATTRIBUTES if name != "name"}
    coll = get["coll"]
    if coll not in COLLS:
        raise MscclError(f"msccl: algo: coll={coll!r} has no jaxcoll primitive (the runtimes "
                         f"run {sorted(COLL_OF.values())}; a 'custom' collective promises "
                         "nothing jaxcoll can check)")
    if get["proto"] not in ("Simple", "LL", "LL128"):
        raise MscclError(f"msccl: algo: proto={get['proto']!r}, the runtimes take Simple, LL "
                         "or LL128")
    k, n, channels = get["nchunksperloop"], get["ngpus"], get["nchannels"]
    if k < 1 or n < 1 or channels < 1:
        raise MscclError(f"msccl: algo: nchunksperloop={k}, ngpus={n} and nchannels={channels} "
                         "must be >= 1")
    primitive = COLLS[coll]
    if RECORDS[primitive].layout != "whole" and not RECORDS[primitive].rooted and k % n:
        raise MscclError(f"msccl: algo: nchunksperloop={k} is not a multiple of ngpus={n}, as "
                         f"{coll}'s per-gpu blocks need")
    program = Program(root.get("name", ""), coll, primitive, n, k, channels, get["proto"],
                      bool(get["inplace"]), bool(get["outofplace"]), get["minBytes"],
                      get["maxBytes"], {})
    for gpu in root.findall("gpu"):
        _read_gpu(program, gpu)
    missing = sorted(set(range(n)) - set(program.gpus))
    if missing:
        raise MscclError(f"msccl: algo has ngpus={n} but no <gpu> with id {missing[0]}")
    _check_connections(program)
    _pair(program)
    _check_waits(program)
    uneven = _uneven_chains(program)
    if uneven:
        warnings.warn(MscclWarning(
            f"msccl: {len(uneven)} chain(s) of re steps whose counts differ, first at "
            f"{uneven[0]}: the runtimes' parser fuses consecutive re steps of a threadblock with "
            "one dstbuf, dstoff and srcbuf (the later without depid) into one reduction with "
            "the last step's cnt; read as the runtimes run it"), stacklevel=_stacklevel)
    return program


def _is_path(source) -> bool:
    return isinstance(source, Path) or (isinstance(source, str) and "<" not in source)


def _read_gpu(program: Program, node) -> None:
    rank = _attribute(node, "id", "gpu")
    where = f"gpu {rank}"
    if not 0 <= rank < program.ngpus or rank in program.gpus:
        raise MscclError(f"msccl: {where}: id must be one of 0..{program.ngpus - 1}, once each")
    declared = {name: _attribute(node, name, where) for name in ("i_chunks", "o_chunks",
                                                                  "s_chunks")}
    if declared["s_chunks"] < 0:
        raise MscclError(f"msccl: {where}: s_chunks={declared['s_chunks']} must be >= 0")
    tbs = {}
    for tb_node in node.findall("tb"):
        tb = _read_tb(program, rank, tb_node)
        if tb.id in tbs:
            raise MscclError(f"msccl: {where}: duplicate threadblock id {tb.id}")
        tbs[tb.id] = tb
    absent = sorted(set(range(len(tbs))) - set(tbs))
    if absent:
        raise MscclError(f"msccl: {where}: threadblock {absent[0]} is missing (ids must be "
                         f"0..{len(tbs) - 1})")
    program.gpus[rank] = {**declared, "tbs": tbs}
    sizes = program.sizes(rank)
    for tb in tbs.values():
        for step in tb.steps:
            _check_step(program, tb, step, sizes, declared, tbs)


def _read_tb(program: Program, rank: int, node) -> Threadblock:
    where = f"gpu {rank}, threadblock {node.get('id')}"
    tb = Threadblock(rank, *(_attribute(node, name, where) for name in ("id", "send", "recv",
                                                                       "chan")), [])
    for peer in (tb.send, tb.recv):
        if peer < -1 or peer >= program.ngpus or peer == rank:
            raise MscclError(f"msccl: {where}: send={tb.send} and recv={tb.recv} must be -1 or "
                             f"another gpu, 0..{program.ngpus - 1}")
    if not 0 <= tb.chan < program.nchannels:
        raise MscclError(f"msccl: {where}: chan={tb.chan} is not one of the algo's "
                         f"nchannels={program.nchannels} (only those are connected)")
    for position, step_node in enumerate(node.findall("step")):
        values = {name: _attribute(step_node, name, f"{where}, step {position}",
                                   integer=name not in ("type", "srcbuf", "dstbuf"))
                  for name in STEP_ATTRIBUTES}
        step = Step(rank, tb.id, position, values.pop("type"), **{
            name: values[name] for name in ("srcbuf", "srcoff", "dstbuf", "dstoff", "cnt",
                                            "depid", "deps", "hasdep")}, written_cnt=values["cnt"])
        if values["s"] != position:
            raise MscclError(f"msccl: {step.where()}: s={values['s']}, but it is step "
                             f"{position} of its threadblock (the kernel counts steps itself)")
        tb.steps.append(step)
    if len(tb.steps) > MAX_STEPS:
        raise MscclError(f"msccl: {where}: {len(tb.steps)} steps, more than the runtimes' "
                         f"{MAX_STEPS}")
    _chain_reductions(tb)
    return tb


def _chain_reductions(tb: Threadblock) -> None:
    """Fuse ``re`` steps as the runtimes' parser does (``msccl_parser.cc``): an ``re`` with the
    dst run start and srcbuf of the open chain and no ``depid`` joins it (nops in between do not
    close a chain; any other step, an ``re`` with ``hasdep=1`` and the threadblock's 16th ``re``
    in all do). The fused step runs with the count of its *last* step (the kernel,
    ``msccl_kernel_impl.h``, adds every chained source over that one count), so every chained
    step's ``cnt`` becomes the last one's; a chain whose counts differ warns."""
    chain, reductions = None, 0
    for step in tb.steps:
        if step.type == "nop":
            continue
        if step.type != "re":
            chain = None
            continue
        key = (step.dstbuf, step.dstoff, step.srcbuf)
        if chain is not None and chain[0] == key and step.depid == -1:
            chain[1].append(step)
        else:
            chain = (key, [step])
        step.chain = chain[1]
        reductions += 1
        if step.hasdep or reductions == MAX_REDUCE_FUSION:
            chain = None
    for step in tb.steps:
        if step.chain and step.chain[-1] is step:
            for chained in step.chain:
                chained.cnt = step.written_cnt


def _uneven_chains(program: Program) -> list[str]:
    """Each chain of re whose counts differ, said as where it is and what runs."""
    said = []
    for gpu in program.gpus.values():
        for tb in gpu["tbs"].values():
            for step in tb.steps:
                if step.chain and step.chain[0] is step and any(
                        s.written_cnt != s.cnt for s in step.chain):
                    odd = next(s for s in step.chain if s.written_cnt != s.cnt)
                    said.append(f"gpu {step.gpu}, threadblock {step.tb}, steps "
                                f"{', '.join(str(s.index) for s in step.chain)} (step "
                                f"{odd.index}'s cnt={odd.written_cnt} runs as {odd.cnt})")
    return said


def _check_step(program: Program, tb: Threadblock, step: Step, sizes: dict, declared,
                tb_ids) -> None:
    where = step.where()
    if step.type not in TYPES:
        raise MscclError(f"msccl: {where}: type={step.type!r} is not a step type of the "
                         f"runtimes ({', '.join(sorted(TYPES))})")
    if step.hasdep not in (0, 1):
        raise MscclError(f"msccl: {where}: hasdep={step.hasdep} must be 0 or 1")
    for name in ("srcbuf", "dstbuf"):
        if getattr(step, name) not in ("i", "o", "s"):
            raise MscclError(f"msccl: {where}: {name}={getattr(step, name)!r} must be i, o or s")
    if step.depid >= 0 and (step.depid == tb.id or step.depid not in tb_ids):
        raise MscclError(f"msccl: {where}: depid={step.depid} is not another threadblock of "
                         f"gpu {tb.gpu}")
    if step.depid > MAX_DEPID:
        raise MscclError(f"msccl: {where}: depid={step.depid} > {MAX_DEPID} (an int8 in the "
                         "runtimes)")
    if step.type == "nop":
        if step.depid < 0:
            raise MscclError(f"msccl: {where}: a nop without a dependency (the parser drops "
                             "it and the kernel's step numbers then differ from the file's)")
        return
    if not 1 <= step.written_cnt < MAX_COUNT:
        raise MscclError(f"msccl: {where}: cnt={step.written_cnt} must be 1..{MAX_COUNT - 1}")
    if step.type in SENDS and tb.send < 0:
        raise MscclError(f"msccl: {where}: a {step.type!r} step in a threadblock with no send "
                         "peer (send=-1)")
    if step.type in RECEIVES and tb.recv < 0:
        raise MscclError(f"msccl: {where}: a {step.type!r} step in a threadblock with no recv "
                         "peer (recv=-1)")
    runs = ([("src", step.srcbuf, step.srcoff)] if step.type in READS_X else []) + (
        [("dst", step.dstbuf, step.dstoff)] if step.type in WRITES_Y else [])
    chained = ("" if step.cnt == step.written_cnt else
               f", cnt={step.cnt} as the last re of its chain, step {step.chain[-1].index}")
    for side, buffer, offset in runs:
        limit = min(sizes[buffer], declared[f"{buffer}_chunks"])
        if offset < 0 or offset + step.cnt > limit:
            raise MscclError(f"msccl: {where}: {side} {buffer}[{offset}..{offset + step.cnt - 1}]"
                             f" is outside the {limit} chunks of {buffer!r} ({program.coll}, "
                             f"K={program.nchunks} on {program.ngpus} gpus; {buffer}_chunks="
                             f"{declared[f'{buffer}_chunks']}{chained})")


def _check_connections(program: Program) -> None:
    """One threadblock per (gpu, channel, send peer) and per (gpu, channel, receive peer); at
    most 32 of either per channel."""
    for rank, gpu in program.gpus.items():
        for side in ("send", "recv"):
            seen, per_channel = {}, {}
            for tb in gpu["tbs"].values():
                peer = getattr(tb, side)
                if peer < 0:
                    continue
                key = (tb.chan, peer)
                if key in seen:
                    raise MscclError(f"msccl: gpu {rank}: threadblocks {seen[key]} and {tb.id} "
                                     f"both {side} {'to' if side == 'send' else 'from'} gpu "
                                     f"{peer} on channel {tb.chan}: they would share one FIFO")
                seen[key] = tb.id
                per_channel[tb.chan] = per_channel.get(tb.chan, 0) + 1
            crowded = [c for c, count in per_channel.items() if count > MAX_PER_CHANNEL]
            if crowded:
                raise MscclError(f"msccl: gpu {rank}: {per_channel[crowded[0]]} threadblocks "
                                 f"{side} on channel {crowded[0]}, more than "
                                 f"{MAX_PER_CHANNEL}")


def _pair(program: Program) -> None:
    """Each sending step's matching receive (``step.sends_to``, ``step.receives_from``)."""
    receivers = {(rank, tb.chan, tb.recv): tb for rank, gpu in program.gpus.items()
                 for tb in gpu["tbs"].values() if tb.recv >= 0}
    paired = set()
    for rank, gpu in program.gpus.items():
        for tb in gpu["tbs"].values():
            if tb.send < 0:
                continue
            sends = [s for s in tb.steps if s.type in SENDS]
            other = receivers.get((tb.send, tb.chan, rank))
            receives = [] if other is None else [s for s in other.steps if s.type in RECEIVES]
            if other is not None:
                paired.add(id(other))
            for j in range(max(len(sends), len(receives))):
                if j >= len(receives):
                    raise MscclError(f"msccl: {sends[j].where()}: an unpaired send: gpu "
                                     f"{tb.send} has no receive for it on channel {tb.chan} "
                                     f"(it receives {len(receives)} of {len(sends)})")
                if j >= len(sends):
                    raise MscclError(f"msccl: {receives[j].where()}: an unpaired receive: gpu "
                                     f"{rank} threadblock {tb.id} sends only {len(sends)} on "
                                     f"channel {tb.chan}")
                send, receive = sends[j], receives[j]
                if send.cnt != receive.cnt:
                    raise MscclError(f"msccl: {send.where()} sends {send.cnt} chunks; its "
                                     f"receive, {receive.where()}, takes {receive.cnt}")
                send.sends_to, receive.receives_from = receive, send
    for tb in receivers.values():
        if id(tb) not in paired and any(s.type in RECEIVES for s in tb.steps):
            first = next(s for s in tb.steps if s.type in RECEIVES)
            raise MscclError(f"msccl: {first.where()}: an unpaired receive: gpu {tb.recv} has "
                             f"no threadblock sending to gpu {tb.gpu} on channel {tb.chan}")


def _check_waits(program: Program) -> None:
    """Each transmission's waits, as the parser gathers them and the kernel ends them: a
    real step that is not a chained ``re`` waits for its own dependency and for those of the
    nops since the last such step (a nop before a chained ``re`` too: the parser hands its
    wait on), each ended by the first step of that threadblock whose published flag (the
    kernel's step counter, :func:`_flags`) is at or past ``deps``. Nops after a threadblock's
    last transmission wait for nothing."""
    for gpu in program.gpus.values():
        for tb in gpu["tbs"].values():
            pending = []
            for step in tb.steps:
                if step.depid >= 0:
                    pending.append(step)
                if step.type == "nop" or step.continues_chain:
                    continue
                if pending and step.depid < 0:
                    raise MscclError(f"msccl: {step.where()}: nops before it add dependencies, "
                                     "so it must carry the last one itself (the parser "
                                     "refuses the file otherwise)")
                step.waiting, pending = pending, []
            _flags(tb)
    for gpu in program.gpus.values():
        for tb in gpu["tbs"].values():
            for step in tb.steps:
                step.waits = [_releasing(gpu["tbs"], waiting) for waiting in step.waiting]


def _flags(tb: Threadblock) -> None:
    """``step.flag`` of the last step of each transmission: what the kernel publishes when it
    ends, its step counter, which a transmission advances by its dependencies but one (one per
    nop) and a chain by its steps but one. That is the step's position in the file wherever
    each nop's wait lands on the step right after it, and falls behind it where a nop's wait
    is handed past a chained ``re``."""
    counter = 0
    for step in tb.steps:
        if step.type == "nop" or step.continues_chain:
            continue
        counter += max(len(step.waiting) - 1, 0) + max(len(step.chain) - 1, 0)
        (step.chain[-1] if step.chain else step).flag = counter
        counter += 1


def _releasing(tbs: dict, step: Step) -> Step:
    """The step whose flag ends ``step``'s wait: the first of threadblock ``depid`` that ends
    a transmission with ``hasdep=1`` and publishes at or past ``deps``."""
    releasing = next((s for s in tbs[step.depid].steps
                      if s.hasdep and s.flag >= step.deps), None)
    if releasing is None:
        raise MscclError(f"msccl: {step.where()}: waits for step {step.deps} of threadblock "
                         f"{step.depid}, but no step of it at or after that one signals "
                         "(hasdep=1): it would wait for ever")
    return releasing


# ----------------------------------------------------------------------------- as a schedule

@dataclass(frozen=True)
class Layout:
    """Where MSCCL's buffers lie in a jaxcoll schedule's chunks, for one coll on n ranks of K
    chunks per loop, in place or out of place (the module docstring)."""
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


def layout_of(program: Program, inplace: bool | None = None) -> Layout:
    """The :class:`Layout` to load ``program`` with: out of place where the file may run so
    (``inplace=None``), else in place; ``inplace`` chooses, if the file allows it."""
    if inplace is None:
        inplace = not program.outofplace
    if not (program.inplace if inplace else program.outofplace):
        raise MscclError(f"msccl: algo: {'inplace' if inplace else 'outofplace'}=0, so the "
                         f"runtimes never run it {'in place' if inplace else 'out of place'}")
    return Layout(program.primitive, program.ngpus, program.nchunks, inplace,
                  max(gpu["s_chunks"] for gpu in program.gpus.values()))


def _run(layout: Layout, step: Step, side: str) -> list[int]:
    """The chunk ids of a step's src or dst run."""
    buffer, offset = (step.srcbuf, step.srcoff) if side == "src" else (step.dstbuf, step.dstoff)
    return [layout.chunk(step.gpu, buffer, offset + j) for j in range(step.cnt)]


def _accesses(layout: Layout, step: Step) -> list[tuple[int, bool]]:
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


def _touches(layout: Layout, order: list[Step]) -> dict[tuple[int, int], list]:
    """(gpu, chunk) -> [(step, writes)] of every step that reads or writes it, in order."""
    touched: dict[tuple[int, int], list] = {}
    for step in order:
        for chunk, writes in _accesses(layout, step):
            touched.setdefault((step.gpu, chunk), []).append((step, writes))
    return touched


def _check_overlaps(layout: Layout, steps: list[Step]) -> None:
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


def _check_races(layout: Layout, order: list[Step], before: dict, touched: dict) -> None:
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


def _name(layout: Layout, gpu: int, chunk: int) -> str:
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
    """An MSCCL XML algorithm (a path or the text) as a :class:`~jaxcoll.Schedule`, under the
    runtimes' semantics; out of place where the file may run so (``inplace`` chooses).
    ``assume``: values for missing ``<algo>`` attributes (:func:`parse`)."""
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


def _completed_receives(layout: Layout, program: Program, touched: dict) -> dict:
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


def _ops(layout: Layout, order: list[Step], completed: dict) -> tuple[list[_Op], list]:
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


# ----------------------------------------------------------------------------- out

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
    """``schedule`` as MSCCL XML that RCCL and msccl-executor-nccl run, to the same result
    under their semantics; in place where the schedule runs so (``inplace`` chooses).

    A reducing receive is an ``r`` into scratch and an ``re`` (what RCCL runs), or with
    ``fused=True`` one ``rrc`` (msccl-executor-nccl only). Raises MscclError where the
    schedule does not verify or does not fit the runtimes' limits."""
    if schedule.primitive not in COLL_OF:
        raise MscclError(f"msccl.dump: {schedule!r} names no collective MSCCL has "
                         f"(primitive={schedule.primitive!r})")
    if RECORDS[schedule.primitive].rooted and schedule.root != 0:
        raise MscclError(f"msccl.dump: {schedule!r} is rooted at {schedule.root}; an MSCCL file "
                         "names no root (the call does), and jaxcoll reads it as 0")
    try:
        verify(schedule)
    except ScheduleError as error:
        raise MscclError(f"msccl.dump: {schedule!r} does not verify: {error}") from None
    n, primitive = schedule.n_ranks, schedule.primitive
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
        self.layout = Layout(schedule.primitive, n, k, inplace, 0)
        io = _io_chunks(schedule.primitive, k, n)
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
        return RECORDS[s.primitive].origins(rank, s.n_ranks, s.n_chunks, s.root)[
            chunk - s.input_at]

    def _holds_input(self, rank: int, chunk: int) -> bool:
        return self._origin(rank, chunk) is not None

    def _input(self, rank: int, chunk: int) -> tuple[str, int]:
        """Where in ``i`` the input a chunk starts with lies (alltoall's two copies: one)."""
        return self.by_id[rank][self.layout.input_at + self._origin(rank, chunk)]

    def _promised(self, rank: int, chunk: int) -> bool:
        s = self.schedule
        promises = RECORDS[s.primitive].promises(s.n_ranks, s.n_chunks, s.root)
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
        promises = RECORDS[s.primitive].promises(s.n_ranks, s.n_chunks, s.root)
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
    n, coll = schedule.n_ranks, COLL_OF[schedule.primitive]
    io = _io_chunks(schedule.primitive, k, n)
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
