"""An MSCCL XML file read and checked by the runtimes' parser's rules (the package docstring
has them): :func:`parse` makes a :class:`Program` of threadblocks and steps, every pairing,
dependency, chain of ``re`` and limit checked, without making a schedule of it."""

from __future__ import annotations

import re as _re
import warnings
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import ScheduleError


class MscclWarning(UserWarning):
    """A file the runtimes run to another result than its steps, read one by one, suggest.

    Warned for a chain of ``re`` steps whose counts differ (the runtimes' parser fuses them
    and keeps the last count); jaxcoll reads the file as the runtimes run it.
    """


class MscclError(ScheduleError):
    """An MSCCL XML file, or a schedule to write as one, that MSCCL's runtimes would not run.

    Also raised where they would run it to another result than the schedule's. The message
    names the gpu, threadblock and step. A :class:`~jaxcoll.ScheduleError`.
    """


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
    """One ``<step>`` of a threadblock, as the file writes it and as the kernel runs it.

    Attributes:
      gpu: the gpu (rank) of its threadblock,
        and ``tb`` that threadblock's id.
      index: its position in the threadblock (``s``, nops included);
        the other attributes are the file's (``type`` ... ``hasdep``).
      written_cnt: ``cnt`` as the file writes it (-1: the same); ``cnt`` is what the
        kernel runs, a chained ``re``'s last count.
      chain: for an ``re``, the ``re`` steps the parser fuses with it,
        in order.
      waiting: the steps (its nops, itself) that carry a ``depid``,
        and ``waits`` the steps whose flags end those waits.
      flag: what the kernel publishes
        when it ends a transmission.
    """

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
    """One ``<tb>``: an ordered list of steps with one send and one receive connection.

    Attributes:
      gpu: the gpu (rank) it runs on,
        and ``id`` its id there.
      send: the peer it sends to on its channel ``chan``
        (-1: none).
      recv: the peer it receives from on its channel
        (-1: none).
      steps: its :class:`Step` list,
        in order.
    """

    gpu: int
    id: int
    send: int
    recv: int
    chan: int
    steps: list[Step]


@dataclass
class Program:
    """An MSCCL XML algorithm, read and checked by the runtime's rules (:func:`parse`).

    Attributes:
      name: the ``<algo>``'s ``name``
        ("" where it has none).
      coll: the collective as the file names it,
        and ``primitive`` as jaxcoll does.
      ngpus: the ranks; ``nchunks`` its ``nchunksperloop``,
        ``nchannels`` and ``proto`` as written.
      inplace: whether the runtimes may choose it in place,
        and ``outofplace`` out of place.
      min_bytes: its ``minBytes``,
        and ``max_bytes`` its ``maxBytes``.
      gpus: gpu id -> ``{"i_chunks", "o_chunks", "s_chunks", "tbs": {id:
        Threadblock}}``.
    """
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
    """Read and check an MSCCL XML algorithm by the runtimes' rules, without making a schedule.

    Every threadblock, step, pairing, dependency, chain of ``re`` steps and limit is checked
    as the runtimes' parser and kernel would (the rules: :mod:`jaxcoll.ir.msccl`).

    Args:
      source: the file's path (a :class:`pathlib.Path`, or a string with no ``<``), or its
        text.
      assume: values for ``<algo>`` attributes the file lacks (msccl-tools' writer leaves
        out ``outofplace``, ``minBytes`` and ``maxBytes``, which the runtimes require),
        e.g. ``{"outofplace": 0, "minBytes": 0, "maxBytes": 0}``; None for none.

    Returns:
      The :class:`Program` — the ``<algo>`` attributes and every gpu's threadblocks and
      steps.

    Raises:
      MscclError: if the XML is malformed, an attribute is missing or out of range, or a
        step, pairing or dependency is one the runtimes would refuse or run otherwise.

    Warns:
      MscclWarning: for a chain of ``re`` steps whose counts differ
        (read as the runtimes run it).

    >>> import jaxcoll
    >>> program = parse(jaxcoll.msccl.dump(jaxcoll.schedule("allreduce", "ring", 4)))
    >>> program.coll, program.ngpus, program.nchunks, program.inplace
    ('allreduce', 4, 4, True)
    >>> parse("<algo")
    Traceback (most recent call last):
      ...
    jaxcoll.ir.msccl.parsing.MscclError: msccl: malformed XML: unclosed token: line 1, column 0
    """
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
