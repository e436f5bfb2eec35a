# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 10 · Across real processes
#
# Every notebook so far ran its 8 "devices" as threads of one Python process, sharing one
# memory. There `lax.psum` is a reduction over buffers it can read directly, and a jaxcoll
# ring is a chain of memory copies. This notebook starts several processes that share
# nothing and talk over TCP, runs the same collectives across them, and counts what crosses
# between them.
#
# **What you will learn**
#
# - how `python -m jaxcoll.tools.launch` starts P processes and how
#   `jaxcoll.tools.distributed.initialize()` joins them into one mesh, so that unchanged jaxcoll
#   code runs across them;
# - that `jaxcoll.ring_allreduce` still equals `lax.psum` bit for bit, and still compiles to
#   nothing but `collective-permute`s: 2(n-1) exchanges of N/n bytes, counted in the program
#   the processes ran;
# - what the transport is on CPU (gloo over TCP on 127.0.0.1), and what one `psum` and one
#   `ppermute` each turn into there;
# - how to record a profiler trace in every process (`jax.profiler`), put the processes on one
#   clock and draw each round's `collective-permute`; what in it the α-β model predicts (the
#   rounds) and what it does not (waiting for each other, host work, the first call);
# - what a small machine cannot show (timings of algorithms across processes), and why;
# - what GPU runtimes run: an algorithm in MSCCL's XML, the format of RCCL's library, read,
#   proved, stepped through and priced, and a jaxcoll schedule written out for RCCL.
#
# **Prerequisites**: notebook 01 (the ring), 05_choosing_an_algorithm (the α-β model) and
# 05_what_auto_picks (`auto`).
#
# The lecture (see notebook 01) warns that the ring "对网络带宽要求高，如果节点间跨交换机，延迟会
# 变大" ("needs high network bandwidth; if nodes sit across switches, latency grows"). Between
# processes every exchange pays such a latency; counting the exchanges is the part of that
# this machine can check.
#
# The notebook itself only starts other Python processes; all their JAX work happens there.
# The plumbing (starting them, reading process 0's line of results) is in
# `_across_processes_demo.py`, next to this notebook.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
os.environ["JAXCOLL_CALIBRATE"] = "0"        # auto: the shipped calibrations (here and in the
import jax                                   # processes started), the same on every machine
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

import inspect
import pathlib
import tempfile
import warnings

import matplotlib.pyplot as plt
import numpy as np
from jax.profiler import ProfileData

import _across_processes_demo as demo       # starts the processes; what each one runs
import jaxcoll
import lesson                                # tutorials/lesson.py: the notebooks' plumbing

PROCESSES = 4

# %% [markdown]
# ## 1. The launcher
#
# `python -m jaxcoll.tools.launch --nproc P --devices-per-proc D -- COMMAND` starts P copies of
# COMMAND. It plays the part `torchrun` plays for PyTorch on one machine: it picks a free port
# on 127.0.0.1 for a coordinator and tells each process its id, the process count, the
# coordinator's address and how many fake CPU devices to make, through `JAX_*` environment
# variables; it also sets JAX's CPU collectives to **gloo**, Meta's collective library
# (PyTorch's CPU backend), over TCP. It prefixes every line a process prints with `[rank k]`,
# and if one process fails it stops the others and exits with that process's code.
#
# A script joins the run with `jaxcoll.tools.distributed.initialize()` before any other JAX work.
# Under the launcher it calls `jax.distributed.initialize` with those coordinates; on a
# cluster (`srun`, `mpirun`) it lets JAX detect the cluster, and alone it does nothing. After
# it, `jax.devices()` lists every process's devices, process 0's first, so a `Mesh` over them
# spans the processes. Nothing else in the script changes. Here is what each process runs:

# %%
print(inspect.getsource(demo.main))

# %% [markdown]
# ## 2. The same allreduce, across 4 processes
#
# 4 processes with one device each, so every rank of the mesh is in a process of its own and
# every transfer crosses a process boundary. Every process builds the same input, so each can
# check its own ranks' results against the exact sum (integer values: every order of summation
# gives the same bits); the counts of mismatches are added up over processes with
# `jaxcoll.tools.distributed.gather` (JAX's `process_allgather`). The same run also records the
# profiler traces of section 4, in a temporary folder:

# %%
traces = tempfile.TemporaryDirectory(prefix="jaxcoll-traces-")  # removed when the kernel ends
result = demo.result(PROCESSES, traces.name)
assert (result["processes"], result["ranks"]) == (PROCESSES, PROCESSES)
assert result["collectives_implementation"] == "gloo" and result["transport"] == "gloo"
assert result["wrong"] == {"ring": 0, "psum": 0, "auto": 0}
print(f"{result['processes']} processes over {result['transport']}: ring, psum and auto give "
      "every rank in every process the exact sum")

# %% [markdown]
# ## 3. What crosses between the processes, counted
#
# Process 0 also read the programs it compiled. For each: its collectives, the bytes of each
# `collective-permute`, and the trip counts of its loops. From those, how many exchanges a
# rank makes per allreduce and how many bytes it sends, against the ring's schedule (notebook
# 01) and the lower bound 2(n-1)/n·N:

# %%
nbytes = result["count"] * 4                  # N: the float32 buffer of each rank
ring = jaxcoll.schedule("allreduce", "ring", PROCESSES)
ring_compiled = result["compiled"]["ring"]
exchanges = sum(ring_compiled["loop_trips"])  # one collective-permute in each loop
sent = sum(size * trips for size, trips in zip(ring_compiled["permute_bytes"],
                                               ring_compiled["loop_trips"]))
for name, compiled in result["compiled"].items():
    print(f"{name:>5}: {compiled['ops']}, collective-permutes of {compiled['permute_bytes']} "
          f"bytes, loops run {compiled['loop_trips']} times")
print(f"ring: {exchanges} exchanges, {sent:,} bytes sent per rank for N = {nbytes:,}: "
      f"{sent / nbytes:.2f} N")
assert ring_compiled["ops"] == {"collective-permute": 2} and len(ring_compiled["loop_trips"]) == 2
assert exchanges == ring.n_rounds == 2 * (PROCESSES - 1)
assert sent == lesson.traffic(ring, nbytes)[0].max() == 2 * (PROCESSES - 1) / PROCESSES * nbytes
assert result["compiled"]["psum"]["ops"] == {"all-reduce": 1}
assert "all-reduce" not in result["compiled"]["auto"]["ops"]
chosen, auto_compiled = result["auto"], result["compiled"]["auto"]
assert chosen == jaxcoll.choose("allreduce", PROCESSES, nbytes, jaxcoll.calibration("gloo"))
auto_schedule = jaxcoll.schedule("allreduce", chosen, PROCESSES)
assert auto_compiled["loop_trips"] == []      # its partners change every round: no loop
auto_sent = sum(auto_compiled["permute_bytes"])
assert len(auto_compiled["permute_bytes"]) == auto_schedule.n_rounds
assert auto_sent == lesson.traffic(auto_schedule, nbytes)[0].max()
print(f"auto chose {chosen!r}: {auto_schedule.n_rounds} exchanges, {auto_sent:,} bytes sent per "
      f"rank: {auto_sent / nbytes:.2f} N")
gloo = jaxcoll.calibration("gloo")
print(f"the gloo calibration: α = {gloo.alpha * 1e6:.0f} µs a round, {gloo.overhead * 1e6:.0f} µs "
      f"a message, {gloo.beta * 1e9:.2f} ns a byte")

# %% [markdown]
# The ring is two loops, reduce-scatter then allgather, each running one `collective-permute` of
# N/n = 100 kB n-1 = 3 times: 6 exchanges and 1.5 N = 2(n-1)/n·N bytes per rank, exactly the
# schedule's count and the bound. `auto` knew it runs across processes
# (`jaxcoll.tools.distributed.transport()` is `"gloo"`), so it ranked the algorithms with the
# calibration measured over gloo, not the one-process one. (`JAXCOLL_CALIBRATE=0` above makes it
# use the gloo calibration shipped with jaxcoll, the same everywhere, not this machine's
# cache.) It compiled to `collective-permute`s only:
# recursive doubling, 2 exchanges of the whole buffer, 2 N per rank. Fewer exchanges for more
# bytes: the gloo calibration charges ~410 µs a round and ~100 µs a message (printed), which at
# 400 kB outweighs the extra bytes. `psum` is a single `all-reduce`, and here is what each op does
# at run time, in XLA's CPU runtime with gloo
# (`xla/backends/cpu/collectives/gloo_communicator.cc`):
#
# - **`all-reduce`** (`psum`) is **one call** to `gloo::allreduce`, and XLA asks it for
#   gloo's **ring** algorithm: the same algorithm as jaxcoll's ring, and the same bytes, but
#   all of it inside gloo's C++, pipelined, without returning to XLA between steps.
# - **`collective-permute`** (one `ppermute`) is one gloo `send` to the target process and
#   one `recv` from the source, both waited for before the op ends. jaxcoll's ring runs 2(n-1)
#   of them, one after another, each a separate trip through XLA's runtime with its own
#   start-up.
#
# So across processes the two sides move the same bytes through the same sockets, and differ in
# the number of separate exchanges: α, in 05_choosing_an_algorithm's terms. In one process,
# `psum` instead reads the other "devices'" buffers directly after one rendezvous of threads,
# which no ring of copies can match.
#
# ## 4. A trace: the rounds on the clock
#
# Counting says what the processes run; a trace says when. After the checks above, every process
# recorded a trace (`jax.profiler.trace`) of a few calls of the ring and of `psum`, each
# compiled and run once before, so that no compilation is in it:

# %%
print(inspect.getsource(demo.trace))

# %% [markdown]
# Each process writes its own, `p{k}/plugins/profile/<time>/<host>.xplane.pb`, with a
# `.trace.json.gz` of the same events beside it (for Perfetto or `chrome://tracing`). On the
# CPU backend every op a call runs is an event named after its instruction in the compiled
# program (process 0 sent the names with its counts: `ppermute.N` for a `collective-permute`,
# `psum…` for the `all-reduce`; the numbers vary with JAX's version); one call's events share a
# `run_id`. A trace's times count from its own start, a different instant in each process.
# `jax.profiler.ProfileData` reads the `.pb`, start included (`profile_start_time`: ns on the
# host's real-time clock, the one clock all processes of a machine read), so start + time puts
# every process on one clock. The cell checks that clock as far as causality goes: in every
# round a process's `collective-permute` ends after its source's began, since it receives what
# that sends. (Processes on different hosts read different clocks; there they need aligning.)

# %%
warnings.filterwarnings("ignore", "builtin type", DeprecationWarning)  # jaxlib on Python 3.12


def calls_traced(folder, names):
    """One process's traced calls, in order: each a list of its ops named ``names``, as
    (name, start, end) in seconds on the host's clock."""
    (path,) = pathlib.Path(folder).glob("plugins/profile/*/*.xplane.pb")
    trace = ProfileData.from_file(str(path))
    start = dict(trace.find_plane_with_name("Task Environment").stats)["profile_start_time"]
    calls = {}  # run_id (one per call) -> its ops
    for line in trace.find_plane_with_name("/host:CPU").lines:  # a line per thread
        for event in line.events:
            if event.name in names:
                calls.setdefault(dict(event.stats)["run_id"], []).append(
                    (event.name, (start + event.start_ns) / 1e9, (start + event.end_ns) / 1e9))
    calls = [sorted(ops, key=lambda op: op[1]) for ops in calls.values()]
    return sorted(calls, key=lambda ops: ops[0][1])  # in time, and each call's ops too


def timeline(program, ops_per_call):
    """(processes, calls, ops a call, 2): when each op of each call began and ended."""
    names = result["compiled"][program]["names"]
    traced = [calls_traced(f"{traces.name}/{program}/p{k}", names) for k in range(PROCESSES)]
    assert [len(calls) for calls in traced] == [result["calls_traced"]] * PROCESSES
    assert {len(ops) for calls in traced for ops in calls} == {ops_per_call}
    order = {tuple(name for name, _, _ in ops) for calls in traced for ops in calls}
    assert len(order) == 1  # every call of every process: the same ops in the same order
    print(f"{program}: {result['calls_traced']} calls of {' '.join(order.pop())}")
    return np.array([[[op[1:] for op in ops] for ops in calls] for calls in traced])


ring_times, psum_times = timeline("ring", ring.n_rounds), timeline("psum", 1)
began, ended = ring_times[..., 0], ring_times[..., 1]  # (processes, calls, rounds)
for k, round_ in enumerate(ring.rounds):
    for t in round_.transfers:  # rank t.dst receives from t.src; process k holds rank k
        assert (ended[t.dst, :, k] > began[t.src, :, k]).all()
took, gaps = ended - began, began[..., 1:] - ended[..., :-1]
assert (took > 0).all() and (gaps >= 0).all()
arrived = began[:, :, 0].max(0)  # (calls,) when the last process began each call


def span(times):
    """(calls,) each call's time: its first op's start to its last op's end, over processes."""
    return times[:, :, -1, 1].max(0) - times[:, :, 0, 0].min(0)


model = jaxcoll.simulate(ring, nbytes, gloo.topology(PROCESSES))  # what auto prices with
fig, axes = plt.subplots(2, 1, figsize=(9, 4.5), sharex=True)
for ax, times, name in [(axes[0], ring_times, "ring"), (axes[1], psum_times, "psum")]:
    call = np.argsort(span(times))[len(span(times)) // 2]  # the call of median time
    zero = times[:, call, 0, 0].min()
    for k in range(PROCESSES):
        for r, (start, end) in enumerate((times[k, call] - zero) * 1e3):
            ax.barh(k, end - start, left=start, color=f"C{r}", edgecolor="black")
            ax.text((start + end) / 2, k, r if name == "ring" else "", ha="center",
                    va="center", fontsize=8)
    if name == "ring":  # the model's rounds, from the last process's start
        for end in arrived[call] - zero + np.cumsum(model.round_seconds):
            ax.axvline(end * 1e3, color="grey", linestyle="--", linewidth=1)
    ax.set(yticks=range(PROCESSES), ylabel="process", title=f"{name}, call {call}")
    ax.invert_yaxis()
axes[1].set_xlabel("ms since the call's first collective began")
plt.show()

# %% [markdown]
# A bar is one `collective-permute` (labelled with its round) or the one `all-reduce`; the
# dashed lines are where the model ends each round, counted from the last process's start. It
# prices each round with the gloo calibration as `auto` does: its links are `"shared"`,
# so a round costs α + n·overhead + (the round's n·N/n bytes)·β (`jaxcoll.simulate` on
# `gloo.topology(n)`). Measured against it, over every round, call and process:

# %%
per_round, first = model.round_seconds.max(), np.median(result["first_call_seconds"]["ring"])
call_time, after_last = np.median(span(ring_times)), np.median(ended[:, :, -1].max(0) - arrived)
skew = np.median(arrived - began[:, :, 0].min(0))  # over calls: the last start - the first
between_calls = np.median(began[:, 1:, 0] - ended[:, :-1, -1])
print(f"a round: the model {per_round * 1e6:.0f} µs; measured median {np.median(took) * 1e6:.0f} "
      f"µs ({np.median(took) / per_round:.2f} x the model), from {took.min() * 1e6:.0f} to "
      f"{took.max() * 1e6:.0f} µs; round 0 alone: median {np.median(took[..., 0]) * 1e6:.0f} µs")
print(f"a call: the model {model.seconds * 1e3:.1f} ms; measured median {call_time * 1e3:.1f} ms, "
      f"{after_last * 1e3:.1f} ms after the last process began; psum "
      f"{np.median(span(psum_times)) * 1e3:.1f} ms")
print(f"processes began a call a median {skew * 1e6:.0f} µs apart; a process spent a median "
      f"{np.median(gaps) * 1e6:.0f} µs between rounds, {between_calls * 1e6:.0f} µs between "
      "calls")
print(f"the first call (compiling, connecting): {first:.2f} s, "
      f"{first / call_time:.0f} x a traced call")
in_rounds = np.median(took.sum(-1))  # over processes and calls: a call's rounds, added up
print(f"a process's {ring.n_rounds} rounds add up to a median {in_rounds * 1e3:.1f} ms a call, "
      f"{in_rounds / ring.n_rounds * 1e6:.0f} µs a round on average")

# %% [markdown]
# What the model predicts, the trace confirms in full: every process runs 2(n-1)
# `collective-permute`s a call, the same ones in the same order, one after another, each
# ending after its source's began. How long a round takes is another matter. The model
# has one price per round, fitted to whole calls on 8 processes; the trace shows what that
# single number folds together, none of which the model names:
#
# - **Waiting for each other.** The processes do not begin a call at the same instant. One that
#   begins early waits inside its first `collective-permute` until its source has begun, so
#   the skew shows up as a long round 0 in some processes, not as a gap; the model has every
#   rank start together.
# - **Rounds that differ.** The same round takes different times in different calls and
#   processes (the range printed): a process the operating system is not running holds up its
#   neighbour, and the ring passes the delay on; with more processes than cores that is
#   frequent. So the median round can be below the model's while the call is above it: a call
#   pays every round, the few long ones included (their sum, printed last, against 2(n-1)
#   median rounds). Section 5 comes back to this.
# - **Host work**: between rounds (slicing and adding the chunks, the loop) and between calls
#   (Python dispatching the next one). The model charges per round only what crosses.
# - **The first call** compiles the program and, the run's first collective, has gloo connect
#   the processes: the seconds printed, many times a call, which is why the trace starts after.
#
# And `psum`, one `all-reduce` in gloo's C++, is one bar per process, with no rounds to read.
#
# ## 5. What this machine cannot show
#
# Timing algorithms against each other across processes needs a core per process: a process
# that is not running holds up every other one, and the timings measure the operating system's
# scheduler. This machine allows:

# %%
cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
timed = max(2, min(8, cores))


def distinct_schedules(ranks):
    """{(rounds, bytes each rank sends per byte of N): allreduce algorithms with them}."""
    alike = {}
    for name in set(jaxcoll.algorithms("allreduce")) - {"auto", "xla", "hierarchical"}:
        schedule = jaxcoll.schedule("allreduce", name, ranks)  # (hierarchical: a 2-D mesh)
        sent = jaxcoll.cost(schedule, 1.0, alpha=0.0, beta=1.0).bytes_sent
        alike.setdefault((schedule.n_rounds, round(sent, 3)), []).append(name)
    return alike


for ranks in sorted({2, timed, 8}):
    alike = distinct_schedules(ranks)
    print(f"n = {ranks}: {len(alike)} distinct (rounds, bytes) among "
          f"{sum(map(len, alike.values()))} algorithms")
    for (rounds, per_byte), names in sorted(alike.items()):
        print(f"    {rounds:2} rounds, {per_byte:.3f} N sent per rank: {', '.join(sorted(names))}")
two = distinct_schedules(2)
biggest = max(two.values(), key=len)           # on 2 ranks: one schedule for nearly all
assert "ring" in biggest and len(biggest) >= 0.75 * sum(map(len, two.values()))
print(f"this machine: {cores} cores, so at most {timed} processes could be timed")

# %% [markdown]
# On 2 ranks nearly every algorithm is the same 2-round exchange of N (the list above), so a
# timed table could only compare psum's one gloo call with the ring's two `ppermute`s, not
# algorithms. What there is to compare on 8 processes is in
# [bench/RESULTS.md](../bench/RESULTS.md), section 9 ("Across processes"): recorded on a shared
# 2-core machine with 8 processes of one device, whose interquartile ranges below 1 MiB are
# 30-100% of the medians, so its small sizes say "auto's pick 2.5-4x faster than psum", not the
# digits, as it warns itself. The counts of section
# 3 hold on any machine; the times need one core per process, and real links to mean anything
# for a cluster.
#
# ## 6. What GPU runtimes run: an MSCCL algorithm
#
# NCCL picks among its built-in algorithms (ring, tree, and where the hardware has them NVLS,
# CollNet, PAT). Microsoft's MSCCL and AMD's RCCL also run
# algorithms written as data, in MSCCL's XML, and RCCL ships a library of them for its fully
# connected GPUs (`tools/msccl-algorithms/` in ROCm/rccl). One of them,
# `allreduce_1step_mccl_4_2_*_LL.xml`, is an all-pairs allreduce for 4 GPUs: every GPU sends
# its whole buffer to every other, which receives it into scratch; then each of a GPU's 8
# threadblocks waits (with `nop` steps, each waiting on one other threadblock) until the copies
# it needs have arrived, and adds one chunk's copies in with `re` (reduce) steps. The cell below
# writes that algorithm out in the same format (our own text, not RCCL's file: one channel
# instead of its two, and every addition on one threadblock): a `<tb>` is a threadblock with one
# send and one receive peer, and a `<step>` reads `srcbuf[srcoff..]` and writes
# `dstbuf[dstoff..]` for `cnt` chunks.

# %%
def step(s, kind, src="i", srcoff=-1, dst="o", dstoff=-1, cnt=1, depid=-1, deps=-1, hasdep=0):
    return (f'<step s="{s}" type="{kind}" srcbuf="{src}" srcoff="{srcoff}" dstbuf="{dst}" '
            f'dstoff="{dstoff}" cnt="{cnt}" depid="{depid}" deps="{deps}" hasdep="{hasdep}"/>')


def one_step_allreduce(n=4, chunks=8):
    lines = [f'<algo name="one-step all-pairs" proto="LL" nchannels="1" nchunksperloop="{chunks}" '
             f'ngpus="{n}" coll="allreduce" inplace="1" outofplace="0" minBytes="0" maxBytes="0">']
    for gpu in range(n):
        peers = [p for p in range(n) if p != gpu]
        lines.append(f'<gpu id="{gpu}" i_chunks="{chunks}" o_chunks="0" '
                     f's_chunks="{(n - 1) * chunks}">')
        waits = [(1 + k, s) for k in range(n - 1) for s in (0, 1)]  # each peer's send, receive
        adds = [step(k, "nop", cnt=0, depid=tb, deps=s) for k, (tb, s) in enumerate(waits[:-1])]
        for c in range(chunks):  # i[c] += the n - 1 copies that arrived in scratch
            for k in range(n - 1):
                tb, s = waits[-1] if c == k == 0 else (-1, -1)  # the first carries a wait too
                adds.append(step(len(adds), "re", "s", k * chunks + c, "i", c, depid=tb, deps=s))
        lines += ['<tb id="0" send="-1" recv="-1" chan="0">', *adds, "</tb>"]
        for k, peer in enumerate(peers):
            lines += [f'<tb id="{1 + k}" send="{peer}" recv="{peer}" chan="0">',
                      step(0, "s", "i", 0, "s", 0, cnt=chunks, hasdep=1),
                      step(1, "r", "i", 0, "s", k * chunks, cnt=chunks, hasdep=1), "</tb>"]
        lines.append("</gpu>")
    return "\n".join(lines + ["</algo>"])


xml = one_step_allreduce()
print(*xml.splitlines()[:4], "...", sep="\n")
schedule = jaxcoll.ir.msccl.load(xml)  # by the runtimes' rules: pairing, dependencies, races
jaxcoll.verify(schedule)
print(repr(schedule), "verified;", schedule.n_scratch, "scratch chunks")
assert schedule.n_rounds == 3

# %% [markdown]
# `load` read it the way the runtimes do: each send pairs with its peer's receive in order on
# their connection, each `nop` adds a wait to the next step, and consecutive `re` steps into one
# chunk are one fused addition, up to a threadblock's 16th `re`, where the parser ends a chain
# (ours has 24 on one threadblock: chunk 5's last two additions wait for its first; RCCL's file,
# 3 per threadblock, never meets the limit). It refuses what they would not run right (two threadblocks that
# touch a chunk in no order, a read of scratch nothing wrote, a send nobody receives), naming
# the gpu, threadblock and step. Then it gave each move the earliest round its data allow: all
# the sends at once, then the additions, local to each GPU. That is an ordinary schedule:
# `verify` proved it, and the page below steps through it (a local addition reads a cell of a
# row, outlined dotted, into another, outlined thick; scratch columns are named `s0`, `s1`, ...).

# %%
jaxcoll.tools.pictures.html(schedule)

# %% [markdown]
# It also runs as an ordinary jaxcoll collective, here on the notebook's own fake devices, and
# can be priced on the links it was written for: 4 MI300X GPUs, a link each way between every
# two (`jaxcoll.analysis.systems.mi300x`; one MSCCL kernel runs every transfer of a round at once).

# %%
from jax.sharding import Mesh, PartitionSpec as P

from jaxcoll.analysis import systems

mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
x = np.arange(4 * 16, dtype=np.float32).reshape(4, 16) % 7
run = jax.jit(jax.shard_map(lambda b: jaxcoll.allreduce(b[0], "i", algorithm=schedule)[None],
                            mesh=mesh, in_specs=P("i"), out_specs=P("i")))
np.testing.assert_array_equal(run(x), np.broadcast_to(x.sum(0), x.shape))
links = systems.mi300x(4)
times = {name: jaxcoll.simulate(s, 2048, links).seconds for name, s in [
    ("the MSCCL file", schedule), ("ring", jaxcoll.schedule("allreduce", "ring", 4)),
    ("recursive_doubling", jaxcoll.schedule("allreduce", "recursive_doubling", 4))]}
for name, seconds in times.items():
    print(f"{name:20s} {seconds * 1e6:5.1f} µs at 2 KiB on {links.name}")
assert min(times, key=times.get) == "the MSCCL file"

# %% [markdown]
# At 2 KiB the all-pairs algorithm wins: one round of messages, each on its own link, against
# the ring's 6 rounds one link at a time (bench/MODEL.md prices all of RCCL's library this
# way). The other direction works too: `jaxcoll.ir.msccl.dump` writes any schedule as a file RCCL
# runs, with the steps it supports today (`s`, `r`, `cpy`, `re`, `nop`: a reducing receive is
# an `r` into scratch and an `re`).

# %%
ring_xml = jaxcoll.ir.msccl.dump(jaxcoll.schedule("allreduce", "ring", 4))
print(*ring_xml.splitlines()[2:7], sep="\n")
kinds = {line.split('type="')[1].split('"')[0] for line in ring_xml.splitlines() if "<step" in line}
assert kinds <= {"s", "r", "cpy", "re", "nop"}
back = jaxcoll.ir.msccl.load(ring_xml)
jaxcoll.verify(back)
assert sorted(str(t) for r in back.rounds for t in r) == sorted(
    str(t) for r in jaxcoll.schedule("allreduce", "ring", 4).rounds for t in r)

# %% [markdown]
# ## 7. On a real cluster
#
# The script of section 2 is what runs on a cluster, unchanged. A cluster's own launcher
# (SLURM's `srun`, Open MPI's `mpirun`, a Kubernetes job) takes the place of
# `jaxcoll.tools.launch`, and `jaxcoll.tools.distributed.initialize()` hands over to
# `jax.distributed.initialize()`, which detects it. On GPUs, JAX uses NCCL instead of gloo.
# There XLA turns `psum` into one NCCL all-reduce kernel (ring or tree, NCCL's choice, with
# the steps pipelined on the GPU), and each `ppermute` into an NCCL send/recv pair. The same
# trade-off applies: jaxcoll's algorithms pay one launch per round, which is why `auto`
# needs a calibration measured on those links (docs/guide/processes.md).
#
# ## Try it
#
# **Which transfers cross a process boundary?** With `--nproc 2 --devices-per-proc 2` the
# mesh has 4 ranks: ranks 0 and 1 live in process 0, and ranks 2 and 3 in process 1
# (`jax.devices()` lists process 0's devices first). In every round of the ring allreduce,
# rank r sends to rank r + 1 (mod 4), so 2 of the 4 transfers cross processes (1 -> 2 and
# 3 -> 0), and the other 2 are copies inside a process. Each round waits for its slowest
# transfer.
#
# Write `my_crossings(nproc, devices_per_proc, schedule)`: the number of transfers, over all
# rounds of `schedule` (a `jaxcoll.Schedule`: `schedule.rounds`, each round's `.transfers`,
# each transfer's `.src` and `.dst`), that go from one process to another. Then compare the
# ring with `recursive_doubling` on 2 x 4.
#
# *Hint:* rank r lives in process `r // devices_per_proc`.
#
# <details><summary>Answer</summary>
#
# ```python
# def my_crossings(nproc, devices_per_proc, schedule):
#     return sum(t.src // devices_per_proc != t.dst // devices_per_proc
#                for round_ in schedule.rounds for t in round_.transfers)
# ```
#
# On 2 x 4 the ring crosses 2 times a round, 28 times over its 14 rounds. Recursive doubling
# crosses 8 times, all in its one round at distance 4, which sends the whole buffer, not a
# 1/8 chunk.
# </details>

# %%
def my_crossings(nproc, devices_per_proc, schedule):
    raise NotImplementedError("your code here")


def check_exercise(crossings):
    for nproc, per_proc in [(2, 2), (2, 4), (4, 2), (8, 1)]:
        for algorithm in ("ring", "recursive_doubling", "tree"):
            schedule = jaxcoll.schedule("allreduce", algorithm, nproc * per_proc)
            want = sum(t.src // per_proc != t.dst // per_proc
                       for round_ in schedule.rounds for t in round_.transfers)
            try:
                got = crossings(nproc, per_proc, schedule)
            except NotImplementedError:
                print("not done yet: fill in my_crossings")
                return
            assert got == want, f"{algorithm} on {nproc} x {per_proc}: {got}, expected {want}"
    print("correct: you can now count which rounds pay the network's price")


check_exercise(my_crossings)
