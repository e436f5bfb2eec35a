"""MSCCL's XML algorithms in and out: :func:`load` reads one into an ordinary
:class:`~jaxcoll.Schedule`, :func:`dump` writes one that MSCCL's runtimes run.

The package's modules, one job each: ``parsing`` (the file read and checked by the parser's
rules: :func:`parse`, :class:`Program`), ``loading`` (a program as a schedule: :func:`load`,
:class:`BufferLayout`), ``dumping`` (a schedule as a file: :func:`dump`).

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

from jaxcoll.ir import _renamed
from jaxcoll.ir.msccl.dumping import dump
from jaxcoll.ir.msccl.loading import BufferLayout, layout_of, load
from jaxcoll.ir.msccl.parsing import (
    ALGO_ATTRIBUTES,
    COLL_OF,
    COLLS,
    MAX_COUNT,
    MAX_DEPID,
    MAX_PER_CHANNEL,
    MAX_REDUCE_FUSION,
    MAX_STEPS,
    READS_X,
    RECEIVES,
    SENDS,
    STEP_ATTRIBUTES,
    TYPES,
    WRITES_Y,
    MscclError,
    MscclWarning,
    Program,
    Step,
    Threadblock,
    parse,
)

__all__ = ["ALGO_ATTRIBUTES", "BufferLayout", "COLL_OF", "COLLS", "MAX_COUNT", "MAX_DEPID",
           "MAX_PER_CHANNEL", "MAX_REDUCE_FUSION", "MAX_STEPS", "MscclError", "MscclWarning",
           "Program", "READS_X", "RECEIVES", "SENDS", "STEP_ATTRIBUTES", "Step", "Threadblock",
           "TYPES", "WRITES_Y", "dump", "layout_of", "load", "parse"]
# Layout, BufferLayout's name before 0.5.0, reads it with a DeprecationWarning
__getattr__ = _renamed.module_getattr(__name__, {"Layout": "BufferLayout"}, globals())
