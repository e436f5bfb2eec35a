# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 12 · Pipeline parallelism, and what goes wrong
#
# Data parallelism (notebook 06) copies the model; tensor and expert parallelism (notebook 09)
# split each layer. **Pipeline parallelism** splits it by depth: stage s holds some layers and
# sends its activations to stage s + 1, a point-to-point send, at the price of idle stages.
# The second half is about failures any layout can hit.
#
# **What you will learn**
#
# - a pipeline from `jax.lax.ppermute` in `jax.shard_map`: GPipe and 1F1B schedules run
#   from one table of clock ticks, both equal to one device; 1F1B's p microbatches in flight
#   against GPipe's m;
# - the bubble, (p-1)/(m+p-1), counted, against a send's modelled time on DGX H100 links;
# - pipeline x data parallel on a 2 x 4 mesh with `jaxcoll.ring_allreduce`; TP and EP axes;
# - ranks issuing different collectives: a type error, hangs, silently wrong sums;
# - what a straggler costs everyone; algbw and busbw read correctly.
#
# **Prerequisites**: notebooks 01 (`ppermute`), 02 §7 (`check_vma`), 06 (a data-parallel
# step), 10 (the launcher).
#
# **Notation.** p = stages, m = microbatches per step, s = a stage, i = a microbatch.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
os.environ["JAXCOLL_CALIBRATE"] = "0"        # the shipped calibrations, here and in the processes
import jax                                   # started below: the same on every machine
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

import re
from fractions import Fraction

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import _pipeline_demo as demo                # the failure runs, each in processes of its own
import jaxcoll
import lesson                                # tutorials/lesson.py: the notebooks' plumbing
from jaxcoll import Schedule, Transfer
from jaxcoll.analysis import systems
from jaxcoll.tools.bench import busbw_factor

STAGES, MICRO, ROWS, WIDTH = 4, 8, 4, 16     # p, m, rows per microbatch, layer width
mesh = Mesh(np.array(jax.devices()[:STAGES]), ("pp",))

# %% [markdown]
# ## 1. Stages, microbatches and a schedule
#
# Four `tanh` layers of width 16, one per stage, and a mean squared error; on one device, a
# loop over the layers, whose loss and gradients are the reference.

# %%
def layer(w, h):
    return jnp.tanh(h @ w["w"] + w["b"])


def reference_loss(params, x, y):            # params: every layer, stacked on axis 0
    for s in range(STAGES):
        x = layer(jax.tree.map(lambda a: a[s], params), x)
    return jnp.mean((x - y) ** 2)


rng = np.random.default_rng(0)
params = {"w": rng.normal(size=(STAGES, WIDTH, WIDTH)).astype(np.float32) / 4,
          "b": rng.normal(size=(STAGES, WIDTH)).astype(np.float32) / 4}
x, y = (rng.normal(size=(MICRO * ROWS, WIDTH)).astype(np.float32) for _ in range(2))
loss_1, grads_1 = jax.value_and_grad(reference_loss)(params, x, y)

# %% [markdown]
# The batch is cut into m = 8 microbatches. Stage s runs forward F(i) once stage s-1 has sent
# it microbatch i's activations, and backward B(i) once stage s+1 has sent back their
# gradient (the last stage starts from the loss). A **schedule** is each stage's order of F
# and B; `schedule_table` plays it out in clock ticks of one operation, each stage running its
# next one once what it needs was done at an earlier tick. GPipe runs all forwards, then all
# backwards; 1F1B runs p - 1 - s forwards ahead, then alternates one forward, one backward.

# %%
def needs(kind, i, s, p):
    """What stage s must have received (or done) before running kind ("F" or "B") on i."""
    if kind == "F":
        return [("F", s - 1, i)] if s > 0 else []
    return [("B", s + 1, i)] if s < p - 1 else [("F", s, i)]


def schedule_table(order, p, m):
    """table[tick][stage]: ("F", i), ("B", i) or None (idle), each stage following order(s)."""
    todo, done, table = {s: list(order(s, p, m)) for s in range(p)}, {}, []
    while any(todo.values()):
        tick, row = len(table), [None] * p
        for s in range(p):
            if todo[s] and all(done.get(d, tick) < tick for d in needs(*todo[s][0], s, p)):
                row[s] = todo[s].pop(0)
        done.update({(op[0], s, op[1]): tick for s, op in enumerate(row) if op})
        table.append(row)
    return table


def gpipe(s, p, m):
    return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]


def one_f_one_b(s, p, m):
    warm = min(p - 1 - s, m)
    steady = [op for i in range(warm, m) for op in (("F", i), ("B", i - warm))]
    return [("F", i) for i in range(warm)] + steady + [("B", i) for i in range(m - warm, m)]


tables = {name: schedule_table(order, STAGES, MICRO)
          for name, order in [("GPipe", gpipe), ("1F1B", one_f_one_b)]}
lesson.pipeline_timelines(tables);

# %% [markdown]
# Both take 22 ticks, 24 of their 88 stage-ticks idle (section 2). They differ in what a stage
# must keep: the input of each microbatch run forward but not yet backward. Under GPipe every
# stage holds all m; under 1F1B stage s holds p - s, counted from the tables:

# %%
def in_flight(table, s):
    """The most microbatches stage s holds at once: forward done, backward not yet."""
    held = most = 0
    for row in table:
        held += {None: 0, "F": 1, "B": -1}[row[s] and row[s][0]]
        most = max(most, held)
    return most


for p in range(2, 9):
    for m in range(1, 17):
        assert [in_flight(schedule_table(gpipe, p, m), s) for s in range(p)] == [m] * p
        assert [in_flight(schedule_table(one_f_one_b, p, m), s) for s in range(p)] == [
            min(p - s, m) for s in range(p)]
print({name: [in_flight(t, s) for s in range(STAGES)] for name, t in tables.items()})

# %% [markdown]
# **Running a table on the mesh.** Stage s is rank s of the axis `"pp"` and holds layer s
# (`P("pp")`). Every rank runs the same program (SPMD): each tick it computes a forward and a
# backward and keeps what its entry of the table (picked with `lax.axis_index`) says. The
# activations then move with one `ppermute` over the pairs (s, s+1): a **shift, not a ring**, the
# last stage sends nothing forward; gradients move back over (s+1, s); a tick with nothing to send
# skips it. A stage keeps microbatch i's input in slot i % `slots`: its backward recomputes the
# forward inside `jax.vjp` (activation recomputation), so the input is all it keeps; otherwise
# it would keep every layer's activations. Each `ppermute`
# waits for the previous one (`after`: independent collectives in one program can crash jaxlib
# 0.10 on CPU, `lesson.py`'s docstring).

# %%
def after(value, previous):
    value, _ = lax.optimization_barrier((value, previous))
    return value


def pipeline(table, slots, axis="pp"):
    """The per-stage program: (this stage's layer, x, y) -> (its gradients, its loss share)."""
    p = len(table[0])
    kind = jnp.array([[0 if op is None else 1 if op[0] == "F" else 2 for op in r] for r in table])
    micro = jnp.array([[op[1] if op else 0 for op in row] for row in table])
    forward, backward = [(s, s + 1) for s in range(p - 1)], [(s + 1, s) for s in range(p - 1)]

    def run(w, x, y):                        # w: (1, ...) this stage's layer; x, y: (m, rows, D)
        w, s = jax.tree.map(lambda a: a[0], w), lax.axis_index(axis)
        inputs = cotangents = jnp.zeros((slots,) + x.shape[1:], x.dtype)
        grads, loss, last = jax.tree.map(jnp.zeros_like, w), 0.0, 0.0
        for t, row in enumerate(table):
            k, i = kind[t, s], micro[t, s]
            out, pull = jax.vjp(layer, w, jnp.where(s == 0, x[i], inputs[i % slots]))
            loss += jnp.where((k == 1) & (s == p - 1), jnp.sum((out - y[i]) ** 2), 0.0)
            dw, dh = pull(jnp.where(s == p - 1, 2 * (out - y[i]) / x.size, cotangents[i % slots]))
            grads = jax.tree.map(lambda g, d: g + jnp.where(k == 2, d, 0), grads, dw)
            if any(op and op[0] == "F" for op in row[:-1]):       # someone sends forward
                last = got = lax.ppermute(after(out, last), axis, forward)
                j = micro[t, s - 1] % slots                       # the sender's microbatch
                inputs = inputs.at[j].set(jnp.where((s > 0) & (kind[t, s - 1] == 1), got,
                                                    inputs[j]))
            if any(op and op[0] == "B" for op in row[1:]):        # someone sends backward
                last = got = lax.ppermute(after(dh, last), axis, backward)
                up = jnp.minimum(s + 1, p - 1)
                j = micro[t, up] % slots
                cotangents = cotangents.at[j].set(
                    jnp.where((s < p - 1) & (kind[t, up] == 2), got, cotangents[j]))
        return jax.tree.map(lambda g: g[None], grads), (loss / x.size)[None]
    return run


def on_pipeline(table, slots):
    return jax.jit(jax.shard_map(pipeline(table, slots), mesh=mesh, in_specs=(P("pp"), P(), P()),
                                 out_specs=(P("pp"), P("pp"))))


micro_x, micro_y = x.reshape(MICRO, ROWS, WIDTH), y.reshape(MICRO, ROWS, WIDTH)
for name, slots in [("GPipe", MICRO), ("1F1B", STAGES)]:
    grads, losses = on_pipeline(tables[name], slots)(params, micro_x, micro_y)
    np.testing.assert_allclose(losses[-1], loss_1, rtol=1e-6)   # the loss: on the last stage
    for key in grads:
        np.testing.assert_allclose(grads[key], grads_1[key], rtol=1e-5, atol=1e-7)
    print(f"{name} with {slots} slots: loss {losses[-1]:.7f} (one device {loss_1:.7f}), "
          "gradients equal to 1e-5")

# %% [markdown]
# Both give one device's loss and gradients to float32 rounding (the microbatches' gradients
# are added one by one, not in one matmul), 1F1B with p = 4 slots. GPipe cannot: microbatch
# 4's input would overwrite microbatch 0's before B(0) needs it. The loss stays right, the
# gradients do not:

# %%
grads, losses = on_pipeline(tables["GPipe"], STAGES)(params, micro_x, micro_y)
np.testing.assert_allclose(losses[-1], loss_1, rtol=1e-6)
assert not np.allclose(grads["w"], grads_1["w"], rtol=1e-2)
print("GPipe with 4 slots: the loss right, the gradients wrong")

# %% [markdown]
# ## 2. The bubble, against the time of a send
#
# Every stage is busy 2m ticks of the 2(m + p - 1). In GPipe stage s idles s ticks before its
# first forward, 2(p - 1 - s) between its last forward and the backward coming back, and s
# after its last backward; 1F1B has as many idle ticks, placed elsewhere (the figure). So
# **(p - 1)/(m + p - 1)** of the time is idle for both: 1F1B saves memory, not time. Counted
# for p = 2..8 and m = 1..16:

# %%
def idle_share(table):
    return Fraction(sum(op is None for row in table for op in row), len(table) * len(table[0]))


for p in range(2, 9):
    for m in range(1, 17):
        for order in (gpipe, one_f_one_b):
            table = schedule_table(order, p, m)
            assert len(table) == 2 * (m + p - 1)
            assert idle_share(table) == Fraction(p - 1, m + p - 1)
print({name: str(idle_share(t)) for name, t in tables.items()}, "idle at p = 4, m = 8")

# %% [markdown]
# Real backwards take about twice a forward. `makespan` runs the same orders in seconds, F
# taking f and B taking b: the step takes (m + p - 1)(f + b), so the idle share is the same.

# %%
def makespan(order, p, m, f, b):
    """When the last operation ends: each stage runs order(s) in turn, each operation as soon
    as the stage is free and what it needs has ended."""
    todo, end, free = {s: list(order(s, p, m)) for s in range(p)}, {}, [0.0] * p
    while any(todo.values()):
        for s in range(p):
            while todo[s] and all(d in end for d in needs(*todo[s][0], s, p)):
                kind, i = todo[s].pop(0)
                start = max([free[s]] + [end[d] for d in needs(kind, i, s, p)])
                free[s] = end[(kind, s, i)] = start + (f if kind == "F" else b)
    return max(free)


for p in range(2, 9):
    for m in range(1, 17):
        for order in (gpipe, one_f_one_b):
            assert makespan(order, p, m, f=1.0, b=2.0) == 3 * (m + p - 1)

# %% [markdown]
# More microbatches shrink the bubble, but each costs every stage boundary two sends
# (activations, gradients), each α + bytes·β, and α is a larger share of a smaller
# microbatch's time.
#
# A send, priced as a one-round schedule on modelled links (`jaxcoll.analysis.systems`,
# 05_choosing_an_algorithm: NCCL's NVLink numbers, the InfiniBand line rate, an assumed 10 µs
# NIC α), with 4 stages in one DGX H100 or on 4 nodes:

# %%
def shift(ranks, n):
    """One pipeline send: ranks[k] -> ranks[k+1], all at once, a schedule on n ranks."""
    return Schedule.build("pipeline send", n, n_chunks=1,
                          rounds=[[Transfer(a, b, 0, False) for a, b in zip(ranks, ranks[1:])]])


links = {"in one node": (shift(range(4), 8), systems.dgx("h100")),
         "across 4 nodes": (shift(range(0, 32, 8), 32), systems.dgx("h100", 4))}
for where, (send, topology) in links.items():
    print(f"{where}: 1 MiB in {jaxcoll.simulate(send, 2**20, topology).seconds * 1e6:.1f} µs")

# %% [markdown]
# Compute by the transformer rule of thumb: a forward is 2 FLOPs per parameter per token,
# 12h² parameters a layer of width h, the backward twice that, at 40% of an H100's 989
# TFLOP/s dense bf16 peak, but never faster than reading the stage's bf16 weights from HBM
# (3.35 TB/s: the roofline). Activations are h bf16 values a token. A step of 16384 tokens in
# m microbatches (powers of two, so that they divide it), sends not overlapped, takes
# `makespan` with f = c + t and b = 2c + t: (m + p - 1)(3c + 2t), c a microbatch's forward
# and t its send. Two models, across nodes:

# %%
FLOPS, HBM, TOKENS, p = 0.4 * 989e12, 3.35e12, 16384, 4
send, across = links["across 4 nodes"]


def step_time(width, layers, m):
    """(seconds of a step, a send / a forward, whether the forward is FLOP-bound) for m
    microbatches, stages of layers x width."""
    flops, weights = 2 * 12 * width**2 * layers * (TOKENS / m), 12 * width**2 * layers * 2
    c = max(flops / FLOPS, weights / HBM)
    t = jaxcoll.simulate(send, TOKENS / m * width * 2, across).seconds
    seconds = (m + p - 1) * (3 * c + 2 * t)
    assert np.isclose(makespan(one_f_one_b, p, m, f=c + t, b=2 * c + t), seconds)
    return seconds, t / c, flops / FLOPS >= weights / HBM


ms = 2 ** np.arange(9)                                      # 1, 2, 4, ..., 256
for name, width, layers in [("h = 8192, 8 layers a stage", 8192, 8),
                            ("h = 2048, 1 layer a stage", 2048, 1)]:
    times, ratios, bound = np.array([step_time(width, layers, m) for m in ms]).T
    best, roofline = ms[np.argmin(times)], ms[bound.astype(bool)].max()
    print(f"{name}: a send is {ratios[ms == 8][0]:.1%} of a forward at m = 8; best m = {best} "
          f"of 1..256, {times.min() * 1e3:.1f} ms, bubble there {(p - 1) / (best + p - 1):.1%}; "
          f"FLOP-bound up to m = {roofline}")
    if width == 8192:
        assert ratios.max() < 0.02 and best == roofline      # the sends never decide
    else:
        assert ratios[ms == 8] > 0.3 and 8 < best < roofline  # the sends stop it first
        assert times[ms == 4 * best] > times.min() * 1.02

# %% [markdown]
# For the wide model a send is 1% of a forward: the bubble is the cost, and more microbatches cure
# it until a microbatch (below about 120 tokens) takes longer to read the weights than to do its
# FLOPs; beyond that, the interleaved schedule of [Narayanan et al.
# 2021](https://arxiv.org/abs/2104.04473) divides the bubble by v, the chunks per stage, for v
# times the sends. For the narrow one a send is a third of a forward and grows as microbatches
# shrink (α stays): past the best m, sends cost more than the bubble saves. A model with stated
# assumptions, not a measurement.
#
# ## 3. Pipeline x data parallel on a 2 x 4 mesh
#
# The mesh `("dp", "pp")`: two pipelines, each on half the batch. Afterwards each stage
# averages its gradients and loss with its twin: `jaxcoll.ring_allreduce(tree, axis="dp",
# op="mean")`. `check_vma=False` as in notebook 06: with the check on, `jax.vjp` would already
# sum the `"dp"`-replicated weights' gradient (notebook 02, section 7), doubling the mean.

# %%
DP = 2
mesh2 = Mesh(np.array(jax.devices()).reshape(DP, STAGES), ("dp", "pp"))
stages = pipeline(tables["1F1B"], STAGES)


def dp_step(w, x, y):                        # x, y: (1, m, rows, width), this row's half
    grads, loss = stages(w, x[0], y[0])
    return jaxcoll.ring_allreduce((grads, loss), axis="dp", op="mean")


def dp_program(check_vma):
    return jax.jit(jax.shard_map(dp_step, mesh=mesh2, in_specs=(P("pp"), P("dp"), P("dp")),
                                 out_specs=(P("pp"), P("pp")), check_vma=check_vma))


x2, y2 = (rng.normal(size=(DP * MICRO * ROWS, WIDTH)).astype(np.float32) for _ in range(2))
halves = x2.reshape(DP, MICRO, ROWS, WIDTH), y2.reshape(DP, MICRO, ROWS, WIDTH)
grads, losses = dp_program(check_vma=False)(params, *halves)
loss_2, grads_2 = jax.value_and_grad(reference_loss)(params, x2, y2)   # one device, whole batch
np.testing.assert_allclose(losses[-1], loss_2, rtol=1e-6)
for key in grads:
    np.testing.assert_allclose(grads[key], grads_2[key], rtol=1e-5, atol=1e-7)
doubled, _ = dp_program(check_vma=True)(params, *halves)              # the trap
np.testing.assert_allclose(doubled["w"], 2 * grads_2["w"], rtol=1e-5, atol=1e-7)
print(f"2 x 4 mesh: loss {losses[-1]:.7f}, one device {loss_2:.7f}; gradients equal to 1e-5 "
      "(with check_vma on: twice that)")

# %% [markdown]
# **More axes**, each with its collective (notebooks 09, 11): **TP** (`"tp"`, inside a
# stage): Megatron's MLP allreduces activations once per layer forward and once backward, so it
# stays on NVLink; **EP** (`"ep"`): two alltoalls per mixture-of-experts layer, tokens to experts
# and back; **PP**: one send per microbatch and stage boundary each way, the fewest bytes, so it
# crosses nodes; **DP**: one gradient allreduce a step. Narayanan et al. place them so: TP inside
# a node, PP across nodes, DP outermost, on a mesh `("dp", "pp", "tp")`.
#
# ## 4. Failure modes
#
# ### 4a. Collectives issued in different orders
#
# With NCCL each rank calls `ncclSend`, `ncclRecv` or `ncclAllReduce` itself, and all ranks
# of a communicator must call the same collectives in the same order. In one SPMD program
# `ppermute`'s list of pairs *is* every send with its receive; ranks can still diverge by
# branching on their rank. With `check_vma` on, JAX rejects this `lax.cond`: an
# allreduce's result is typed invariant (equal on every rank), the other branch's varying.
# jaxcoll types its allreduce as `psum` is:

# %%
def allreduce_on_even_ranks(v):
    return lax.cond(lax.axis_index("pp") % 2 == 0,
                    lambda v: jaxcoll.ring_allreduce(v, "pp"), lambda v: 2 * v, v)


try:
    jax.jit(jax.shard_map(allreduce_on_even_ranks, mesh=mesh, in_specs=P("pp"),
                          out_specs=P("pp"))).lower(np.arange(4.0, dtype=np.float32))
    raise AssertionError("expected a type error")
except TypeError as error:
    assert "output types" in str(error)
    print(str(error).splitlines()[0], "\n ", str(error).split("\n\n")[2])

# %% [markdown]
# The check is about types, not about who communicates. A `ppermute` only rank 0's branch
# reaches passes it (both branches varying) and waits for ranks that never come. XLA's CPU
# runtime warns, then aborts the process, after two timeouts set by XLA flags (here 1 and
# 3 s), so it runs in a process of its own (`_pipeline_demo.py cond`):

# %%
ran = demo.alone("cond", "--xla_cpu_collective_call_warn_stuck_timeout_seconds=1 "
                         "--xla_cpu_collective_call_terminate_timeout_seconds=3")
said = [re.sub(r"RendezvousKey\{[^}]*\}", "...", line.split("] ", 1)[1])
        for line in ran.stderr.splitlines() if "rendezvous.cc" in line and "arrived" in line]
print(f"return code {ran.returncode}", *said, sep="\n  ")
assert "TRACED" in ran.stdout and "RAN" not in ran.stdout      # traced, never returned
assert ran.returncode != 0                                      # the runtime ended it

# %% [markdown]
# It ended with SIGABRT (return code -6 above) after "Termination timeout ... only 1 of them
# arrived": rank 0, the only one that reached the `ppermute`.
#
# **Across processes** each runs its own programs, like NCCL's ranks; nothing checks
# their order. Process 0 calls `psum` then `all_gather`, process 1 the other order
# (`_pipeline_demo.py order`), each call under a 3 s watchdog:

# %%
hung = demo.launch(2, "order")
print(*[line for line in hung.stdout.splitlines() if "native" not in line], sep="\n")
print(*[line for line in hung.stderr.splitlines() if "jaxcoll.tools.launch" in line], sep="\n")
assert hung.returncode != 0 and "finished" not in hung.stdout    # neither call finished
assert hung.stdout.count("WATCHDOG") >= 1

# %% [markdown]
# Each waits in its first collective for a partner in another; without the watchdog, until
# the launcher's `--timeout` (exit 124). Same-shaped psums in swapped order
# (`_pipeline_demo.py swapped`, 3 processes, rank r holding 4r, ..., 4r + 3) depend on the
# runtime: jaxlib 0.10 pairs first calls with first calls (a wrong sum, no error), 0.12.1
# waits as in `order`. The cell checks either:

# %%
swapped = demo.launch(3, "swapped")
if swapped.returncode == 0:      # paired by order: process 0's psum got process 1's 10 x
    found = demo.result(swapped.stdout)
    values, got = np.array(found["values"]), np.array(found["swapped"]["psum"])
    print(f"paired: process 0's psum {got.tolist()}, meant {values.sum(axis=0).tolist()}")
    np.testing.assert_array_equal(got, values[0] + 10 * values[1] + values[2])
else:                            # told apart: each waits, as in `order`
    assert "WATCHDOG: psum not done" in swapped.stdout and "RESULT" not in swapped.stdout
    print("hung: the watchdog ended it")

# %% [markdown]
# Paired by order, nothing fails: process 0's `psum` got process 1's `10 x`. NCCL pairs a
# communicator's calls by order too: on GPUs this is the silent case. A hang shows as GPUs busy
# doing nothing (NCCL's kernels spin). `NCCL_DEBUG=INFO` prints what NCCL set up and its errors;
# `NCCL_DEBUG_SUBSYS=COLL` a line per call, whose sequences can be compared across ranks.
# PyTorch's `ProcessGroupNCCL` aborts collectives older than the group's `timeout`, as our
# watchdog does. Only comparing the sequences catches the silent case.
#
# ### 4b. A straggler
#
# `_pipeline_demo.py straggler` synchronises 3 processes with one `ring_allreduce`, lets
# process 1 sleep 1 s (a slow data loader, a throttled GPU), and notes on the host's clock when
# each entered its next `ring_allreduce` and left it (`block_until_ready`):

# %%
straggler = demo.launch(3, "straggler")
assert straggler.returncode == 0
found = demo.result(straggler.stdout)
entered, left = np.array(found["entered"]), np.array(found["left"])
print("each process's allreduce:", ", ".join(f"{t:.3f} s" for t in left - entered),
      f"(process {found['straggler']} slept {found['sleep']} s)")
assert (left >= entered.max()).all()    # no process left before the last one entered

# %% [markdown]
# No process can leave before the last one arrives (asserted: it holds on any machine), so the
# others' allreduce lasts about the sleep and the sleeper's is quick (printed: times depend on the
# machine): a collective ends when its last rank arrives. A rank slow *in a collective* may mean a
# slow rank elsewhere: compare when ranks *enter* it. In a pipeline every tick waits for the
# slowest stage.
#
# ### 4c. Reading busbw
#
# nccl-tests prints, for a size S (the larger of a rank's input and output) and a time t,
# **algbw = S / t** and **busbw = algbw x a factor**: 2(n-1)/n for allreduce, (n-1)/n for
# reduce_scatter and allgather, 1 for broadcast and reduce (`jaxcoll.tools.bench`'s
# docstring). The factor is the bytes the busiest rank must move per byte of S, so busbw
# compares with one link's bandwidth whatever n. The ring (the chain for broadcast) sends
# exactly that, counted from the schedules with `lesson.traffic`:

# %%
S = 2.0**30
for n in (2, 3, 4, 8, 16):
    for primitive, algorithm in [("allreduce", "ring"), ("reduce_scatter", "ring"),
                                 ("allgather", "ring"), ("broadcast", "chain")]:
        sent, _ = lesson.traffic(jaxcoll.schedule(primitive, algorithm, n), S)
        assert np.isclose(sent.max() / S, busbw_factor(primitive, n))
print("the busiest rank's bytes / S == busbw_factor, for n = 2, 3, 4, 8, 16")

# %% [markdown]
# **The mistake: comparing algbw across n.** On the same links the ring allreduce's algbw
# falls as n grows (towards half), its busbw stays at the link's bandwidth; modelled on a
# switch with NCCL's H100 NVLink numbers (370.8 GB/s each way, α 3.4 µs):

# %%
nvlink = 1 / systems.GPUS["h100"][0] / 1e9
algbw = {}
for n in (2, 4, 8):
    links_n = jaxcoll.analysis.topology.switch(n, alpha=systems.NVLINK_ALPHA, beta=nvlink)
    t = jaxcoll.simulate(jaxcoll.schedule("allreduce", "ring", n), S, links_n).seconds
    algbw[n] = S / t / 1e9
    busbw = algbw[n] * busbw_factor("allreduce", n)
    print(f"n = {n}: algbw {algbw[n]:5.1f} GB/s, busbw {busbw:5.1f} GB/s")
    assert abs(busbw / systems.GPUS["h100"][0] - 1) < 0.02      # the link's 370.8 GB/s
assert np.isclose(algbw[2] / algbw[8],
                  busbw_factor("allreduce", 8) / busbw_factor("allreduce", 2), rtol=0.02)

published = systems.PUBLISHED[1]
print(f"{published.system}: {published.source}")
print(f"  its algbw: {published.busbw / busbw_factor('allreduce', 8):.0f} GB/s; "
      f"the model's busbw {published.predicted_busbw():.0f} GB/s")

# %% [markdown]
# So "algbw 210 GB/s on 8 GPUs, 370 on 2" is the same hardware, equally used. The published
# 370 GB/s busbw compares with one direction of NVLink: 450 GB/s line rate on H100 (the quoted
# 900 GB/s counts both).
# And in a timed run, a straggler's wait (4b) counts in every other rank's t.
#
# ## Summary
#
# - A pipeline is `ppermute` shifts between stages; GPipe and 1F1B, orders in one table,
#   both equal one device. The bubble is (p-1)/(m+p-1) for both; 1F1B holds p microbatches,
#   not m. More microbatches pay until their sends' α, or a microbatch too small to keep the
#   GPU FLOP-bound, costs more.
# - PP x DP: a second mesh axis and an allreduce over `"dp"`.
# - Divergent collectives: a type error, a hang (XLA's abort, a watchdog, a timeout), or
#   silently wrong sums when shapes agree. A straggler slows everyone's collective.
# - busbw = algbw x the busiest rank's bytes per byte of S: compare busbw, not algbw.
#
# ## Try it
#
# **Read two nccl-tests lines.** An allreduce on 8 GPUs: size 1073741824 bytes, time
# 5400 µs. An allgather on 16 GPUs, size 1073741824 bytes, time 3000 µs. Write
# `my_bandwidths(op, n, size, microseconds)` returning (algbw, busbw) in GB/s (10⁹ bytes/s).
#
# *Hint:* nccl-tests' size is already S.
#
# <details><summary>Answer</summary>
#
# ```python
# def my_bandwidths(op, n, size, microseconds):
#     algbw = size / (microseconds * 1e-6) / 1e9
#     factor = {"allreduce": 2 * (n - 1) / n, "allgather": (n - 1) / n}[op]
#     return algbw, algbw * factor
# ```
#
# 198.8 and 348.0 GB/s; 357.9 and 335.5 GB/s.
# </details>

# %%
def my_bandwidths(op, n, size, microseconds):
    raise NotImplementedError("your code here")


def check_bandwidths(fn):
    for op, n, size, us in [("allreduce", 8, 2**30, 5400), ("allgather", 16, 2**30, 3000)]:
        try:
            got = fn(op, n, size, us)
        except NotImplementedError:
            print("not done yet: fill in my_bandwidths")
            return
        algbw = size / (us * 1e-6) / 1e9
        np.testing.assert_allclose(got, (algbw, algbw * busbw_factor(op, n)), rtol=1e-6)
    print("correct: now compare busbw, not algbw, across rank counts")


check_bandwidths(my_bandwidths)
