# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 11 · Compute and communication: when collectives hide
#
# Notebook 09 found the collectives of each way to split a model. This one weighs them
# against the arithmetic around them.
#
# **What you will learn**
#
# - T_comp = FLOPs / peak beside T_comm = bytes / bandwidth, per device and step, for data
#   parallelism (DP), FSDP, tensor parallelism (TP), sequence parallelism (SP) and mixture of
#   experts (MoE), on the machines of `jaxcoll.analysis.systems`;
# - the **critical** batch or width below which each is communication-bound, derived and
#   checked against a direct evaluation;
# - notebook 07's rule for hiding a transfer, applied to each;
# - one DP x FSDP x TP step on a 2 x 4 mesh with jaxcoll's collectives, equal to lax's and
#   to one device, its collectives counted in the compiled program;
# - how to pick such a step's collectives and say whether they hide.
#
# **Prerequisites**: notebooks 07 (overlap) and 09 (collectives of sharded matmuls).

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
os.environ["JAXCOLL_CALIBRATE"] = "0"        # auto: the shipped calibrations, everywhere
import jax
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

import functools
import re

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import jaxcoll
import lesson                                 # tutorials/lesson.py: the plumbing the notebooks share
from jaxcoll.analysis import systems

# %% [markdown]
# ## 1. Two clocks
#
# A step that does `flops` of arithmetic and sends `bytes` on a device with **peak** FLOP/s
# and link bandwidth W (bytes/s each way) needs
#
#     T_comp = flops / peak        T_comm = bytes / W
#
# `jaxcoll.analysis.systems` has the links (with their sources): NCCL's effective NVLink bandwidth
# per GPU and the InfiniBand NIC line rate. It has no FLOP/s, so we take the dense bf16 peak
# from NVIDIA's data sheets (which print twice that, "with sparsity").

# %%
PEAK_FLOPS = {"a100": 312e12, "h100": 989e12}  # dense bf16 FLOP/s per GPU
BF16 = 2                                       # bytes per parameter, gradient or activation

links = {}                                     # (gpu, link): bytes/s each way, per GPU
for gpu, (nvlink_gbs, nic_gbs) in systems.GPUS.items():
    links[gpu, "NVLink"], links[gpu, "NIC"] = nvlink_gbs * 1e9, nic_gbs * 1e9
for (gpu, link), bandwidth in links.items():
    print(f"{gpu.upper()} {link:<6} W = {bandwidth / 1e9:5.1f} GB/s   "
          f"R = peak / W = {PEAK_FLOPS[gpu] / bandwidth:6.0f} FLOPs per byte")
assert round(PEAK_FLOPS["h100"] / links["h100", "NVLink"], -2) == 2700   # the text below
assert round(PEAK_FLOPS["h100"] / links["h100", "NIC"], -3) == 20000

# %% [markdown]
# R is the number to remember: an H100 does about 2,700 FLOPs while it sends a byte over
# NVLink, 20,000 while a byte crosses its NIC. Communication can hide only in a step doing
# at least R FLOPs per byte sent.
#
# For the bytes we use the cost model (`jaxcoll.cost` with α = 0, β = 1, as in 09): the bytes
# the busiest device sends. Leaving out α (05_choosing_an_algorithm, section 1) is fair for
# large buffers: the simulator, α and link contention included, agrees on 1 and 8 DGX H100
# nodes:

# %%
@functools.cache
def bytes_sent(primitive, algorithm, nbytes, ranks):
    """Bytes the busiest rank sends in `algorithm`'s schedule for a buffer of `nbytes`."""
    schedule = jaxcoll.schedule(primitive, algorithm, ranks)
    return jaxcoll.cost(schedule, nbytes, alpha=0.0, beta=1.0).bytes_sent


gradients = BF16 * 1e9                         # 1e9 parameters' gradients
for n_nodes, link in [(1, "NVLink"), (8, "NIC")]:
    machine = systems.dgx("h100", n_nodes)
    ring = jaxcoll.schedule("allreduce", "ring", machine.n)
    simulated = jaxcoll.simulate(ring, gradients, machine).seconds
    estimate = bytes_sent("allreduce", "ring", gradients, machine.n) / links["h100", link]
    assert abs(simulated / estimate - 1) < 0.02
    print(f"{machine.name}: bytes / W = {estimate * 1e3:5.1f} ms, "
          f"simulated {simulated * 1e3:5.1f} ms")

# %%
eight_channels = jaxcoll.simulate(ring, gradients, machine, channels=8).seconds
assert round(eight_channels * 1e3, 1) == 11.1                 # the text below
print(f"{machine.name}, NCCL's 8 channels: simulated {eight_channels * 1e3:5.1f} ms")

# %% [markdown]
# Across nodes one ring runs at its slowest hop, a NIC: one of the node's 8, the others idle.
# NCCL runs 8 rings at once (*channels*), each on 1/8 of the buffer and crossing nodes
# through a different GPU's NIC, so every NIC carries 1/8: 11.1 ms, not 80. (This is the
# ring's model. On H100 NCCL's default inside a node is NVLink SHARP, which reduces in the
# switch: ~480 GB/s busbw against the ring's ~370, NVIDIA/nccl-tests#212.)
#
# ## 2. Notebook 07's rule: when a transfer hides
#
# [Notebook 07, section 3](07_overlap.ipynb) cut a collective matmul into steps, each
# multiplying a block (time c) and passing one on (time t). One after the other a step costs
# c + t; at the same time, **max(c, t)**. So a transfer is hidden exactly when **c >= t**:
# the compute that does not wait for it takes at least as long. The same holds for a whole
# step: communication hides only behind compute that does not depend on it, and then the
# step takes max(T_comp, T_comm) instead of the sum.

# %%
def step_seconds(compute, transfer, overlapped):
    """07's rule: one after the other, or at the same time (the longer one counts)."""
    return max(compute, transfer) if overlapped else compute + transfer


steps = lesson.n - 1                                  # 07's ring on 8 devices, c = t = 1
assert steps * step_seconds(1, 1, False) + 1 == 15    # 07: (n-1)·(c + t) + c
assert steps * step_seconds(1, 1, True) + 1 == 8      # 07: (n-1)·max(c, t) + c
print("07's example: 15 units one after the other, 8 overlapped")

# %% [markdown]
# ## 3. Each pattern's FLOPs and bytes
#
# Per device and training step, in bf16. A matmul `[a, b] · [b, c]` is 2abc FLOPs; the
# backward does two per forward one (the input's gradient and the weights'), so a step is
# 3 x the forward.
#
# - **DP**, P parameters, B tokens per device: 6PB FLOPs; an AllReduce of 2P gradient bytes.
# - **FSDP**: 6PB; AllGather the weights forward and backward, ReduceScatter the gradients.
# - **TP**, a Megatron MLP: T tokens of width D, hidden width F (F/n per device). Two
#   matmuls of 2·T·D·(F/n), x 3; AllReduces of the 2TD-byte output and input gradient.
# - **SP**: TP's FLOPs; each AllReduce split into AllGather + ReduceScatter (09, section 3).
# - **MoE**, top-1, one expert of hidden width F_e per device, each running `capacity` x T
#   tokens; four AllToAlls of that buffer (dispatch, combine, and their gradients).

# %%
PARAMS, TOKENS, WIDTH = 1e9, 8192, 4096        # P; T tokens per step; model width D
CAPACITY = 1.25                                # MoE slots per expert, per token it expects


def data_parallel(batch, n):                   # batch: B, tokens per device
    return 6 * PARAMS * batch, bytes_sent("allreduce", "ring", BF16 * PARAMS, n)


def fsdp(batch, n):
    weights = BF16 * PARAMS
    return 6 * PARAMS * batch, (2 * bytes_sent("allgather", "ring", weights, n)
                                + bytes_sent("reduce_scatter", "ring", weights, n))


def tensor_parallel(width, n, tokens=TOKENS):  # width: F/n
    activations = BF16 * tokens * WIDTH
    return 12 * tokens * WIDTH * width, 2 * bytes_sent("allreduce", "ring", activations, n)


def sequence_parallel(width, n, tokens=TOKENS):
    activations = BF16 * tokens * WIDTH
    return 12 * tokens * WIDTH * width, 2 * (bytes_sent("allgather", "ring", activations, n)
                                             + bytes_sent("reduce_scatter", "ring", activations, n))


def mixture_of_experts(expert_width, n, tokens=TOKENS, capacity=CAPACITY):  # F_e
    buffer = BF16 * capacity * tokens * WIDTH
    return (12 * capacity * tokens * WIDTH * expert_width,
            4 * bytes_sent("alltoall", "naive", buffer, n))


PATTERNS = {"DP": data_parallel, "FSDP": fsdp, "TP": tensor_parallel,
            "SP": sequence_parallel, "MoE": mixture_of_experts}


def clocks(pattern, x, n, gpu="h100", link="NVLink", **sizes):
    """(T_comp, T_comm) in seconds: pattern(x, n) returns (FLOPs, bytes)."""
    flops, sent = pattern(x, n, **sizes)
    return flops / PEAK_FLOPS[gpu], sent / links[gpu, link]


for name, pattern in PATTERNS.items():
    compute, transfer = clocks(pattern, 1024, n=8)
    print(f"{name:<5} x = 1024: T_comp {compute * 1e3:5.2f} ms, T_comm {transfer * 1e3:5.2f} ms")
assert sequence_parallel(1024, 8) == tensor_parallel(1024, 8)   # 09: the same bytes
assert fsdp(1024, 8)[1] == 1.5 * data_parallel(1024, 8)[1]      # 09: 1.5 x DP's bytes

# %% [markdown]
# ## 4. The critical batch and width
#
# Set T_comp = T_comm and solve, with R = peak / W:
#
# - **DP**: 6PB / peak = 2(n−1)/n · 2P / W, so **B\* = (2/3)·(n−1)/n · R**. P cancels.
# - **FSDP**: 3(n−1)/n · 2P bytes, so **B\* = (n−1)/n · R**.
# - **TP**: 12·T·D·(F/n) / peak = 2 · 2(n−1)/n · 2TD / W, so **(F/n)\* = (2/3)·(n−1)/n · R**.
#   The tokens cancel: what must be large is each device's share of the hidden width.
# - **SP**: the same bytes and FLOPs, the same (F/n)\*.
# - **MoE**: 12·capacity·T·D·F_e / peak = 4 · (n−1)/n · 2·capacity·T·D / W, so
#   **F_e\* = (2/3)·(n−1)/n · R**. Tokens and capacity cancel.
#
# T_comp grows with x and T_comm does not, so T_comp / T_comm = x / x\*. The formulas, checked
# against a bisection on the functions above (cost model, no formula):

# %%
CRITICAL = {  # pattern: x* as a function of n and R = peak / W
    "DP": lambda n, R: 2 / 3 * (n - 1) / n * R,
    "FSDP": lambda n, R: (n - 1) / n * R,
    "TP": lambda n, R: 2 / 3 * (n - 1) / n * R,
    "SP": lambda n, R: 2 / 3 * (n - 1) / n * R,
    "MoE": lambda n, R: 2 / 3 * (n - 1) / n * R}


def crossing(pattern, n, gpu="h100", link="NVLink", **sizes):
    """The x where T_comp = T_comm, by bisection between 1 and 1e7."""
    low, high = 1.0, 1e7
    for _ in range(100):
        middle = (low * high) ** 0.5
        compute, transfer = clocks(pattern, middle, n, gpu, link, **sizes)
        low, high = (middle, high) if compute < transfer else (low, middle)
    return low


critical = {}                                  # (gpu, link): {pattern: x*}
print(f"{'':<20}" + "".join(f"{name:>8}" for name in PATTERNS))
for gpu, link, n in [("h100", "NVLink", 8), ("h100", "NIC", 64),
                     ("a100", "NVLink", 8), ("a100", "NIC", 64)]:
    R = PEAK_FLOPS[gpu] / links[gpu, link]
    critical[gpu, link] = {name: crossing(fn, n, gpu, link) for name, fn in PATTERNS.items()}
    for name, x_star in critical[gpu, link].items():
        assert abs(x_star / CRITICAL[name](n, R) - 1) < 1e-9, (name, gpu, link)
    print(f"{gpu.upper()} {link:<6} n = {n:<3}"
          + "".join(f"{x_star:8.0f}" for x_star in critical[gpu, link].values()))
h100 = critical["h100", "NVLink"]
for name, sizes in [("TP", {"tokens": 1024}), ("SP", {"tokens": 65536}),
                    ("MoE", {"tokens": 1024, "capacity": 2.0})]:
    assert np.isclose(crossing(PATTERNS[name], 8, **sizes), h100[name])  # they cancel
assert (round(h100["DP"], -1), round(h100["FSDP"], -1)) == (1560, 2330)  # the text below
assert round(critical["h100", "NIC"]["DP"] / h100["DP"]) == 8
assert round(critical["h100", "NIC"]["TP"], -3) == 13000
print("formulas == bisection; tokens and capacity do not move TP's, SP's and MoE's x*")

# %% [markdown]
# Inside an H100 node DP needs about 1,560 tokens per device per step, FSDP 2,330. The NIC
# rows are rings of 64 GPUs in which every hop crosses a 50 GB/s NIC (one GPU per node;
# section 7's FSDP across nodes is such a ring, of 8): about 8 times more, and TP would need
# a hidden width of 13,000 per device, more than almost any model has. A ring over 8 whole
# DGX nodes does better with NCCL's 8 channels (section 1): each NIC carries 1/8, so W is
# ~7 times the NIC's and DP needs ~1,800 tokens (below), near NVLink's. What still keeps TP
# inside a node is that its forward AllReduce waits on every layer (section 5) and pays α per
# ring step: 126 steps across 64 GPUs, 14 inside a node.

# %%
W_channels = bytes_sent("allreduce", "ring", gradients, 64) / eight_channels
dp_channels = CRITICAL["DP"](64, PEAK_FLOPS["h100"] / W_channels)
assert round(dp_channels, -2) == 1800                         # the text above
print(f"64 H100s in one ring, 8 channels: W = {W_channels / 1e9:.0f} GB/s per GPU, "
      f"DP's B* = {dp_channels:.0f} tokens")

# %%
R = PEAK_FLOPS["h100"] / links["h100", "NVLink"]
fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
panels = [("DP", "FSDP"), ("TP", "SP"), ("MoE",)]
xlabels = ["tokens per device, B", "hidden width per device, F/n", "expert hidden width, F_e"]
xs = np.logspace(7, 16, 64, base=2)
for ax, names, xlabel in zip(axes, panels, xlabels):
    ax.loglog(xs, [clocks(PATTERNS[names[0]], x, 8)[0] for x in xs], "k", label="T_comp")
    for colour, style, name in zip(["tab:orange", "tab:red"], ["-", "--"], names):
        ax.loglog(xs, [clocks(PATTERNS[name], x, 8)[1] for x in xs], style, color=colour,
                  label=f"T_comm {name}")
        x_star = CRITICAL[name](8, R)
        ax.plot(x_star, clocks(PATTERNS[name], x_star, 8)[0], "o", color=colour)
        ax.axvline(x_star, color=colour, ls=":", lw=1)
        ax.annotate(f"{x_star:.0f}", (x_star, clocks(PATTERNS[name], x_star, 8)[0]),
                    textcoords="offset points", xytext=(5, -12), fontsize=8, color=colour)
    ax.set(xlabel=xlabel, ylabel="seconds per step", title=" and ".join(names))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
fig.suptitle(f"8 x H100 over NVLink (P = {PARAMS:.0e}, T = {TOKENS}, D = {WIDTH}): "
             "left of a dot, communication-bound", fontsize=11)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 5. Will it hide? 07's rule, pattern by pattern
#
# T_comp >= T_comm says communication *could* hide; it does only beside compute that does
# not wait for it:
#
# | pattern | collectives per step | bytes per device | FLOPs per device | comm-bound below | hides behind |
# |---|---|---|---|---|---|
# | DP | AllReduce dW | 2(n−1)/n · 2P | 6PB | B\* = (2/3)(n−1)/n · R | the backward (2/3 of T_comp, buckets as in 06), from 1.5·B\* |
# | FSDP | AllGather W x 2, ReduceScatter dW | 3(n−1)/n · 2P | 6PB | B\* = (n−1)/n · R | neighbouring layers (prefetch), from B\* |
# | TP | AllReduce Y, AllReduce dX | 4(n−1)/n · 2TD | 12TD(F/n) | (2/3)(n−1)/n · R | forward Y's: nothing (the next op needs the sum); backward dX's: the dW₁ matmul (no data dependency), from F/n = 3·(F/n)\* |
# | SP | AllGather x 2, ReduceScatter x 2 | 4(n−1)/n · 2TD | 12TD(F/n) | (2/3)(n−1)/n · R | its matmuls (07's collective matmul), from F/n = R |
# | MoE | AllToAll x 4 | 4(n−1)/n · 2·cap·TD | 12·cap·TD·F_e | (2/3)(n−1)/n · R | chunks pipelined through the expert |
#
# In TP's backward, dX = dH·W₁ᵀ is summed while dW₁ = Xᵀ·dH, which needs only the local
# dH, is computed (Megatron-LM overlaps them): one AllReduce, half of T_comm, beside 2TD(F/n)
# FLOPs, a sixth of T_comp. For SP, one ring step of 07 passes T/n rows (t = 2·(T/n)·D / W)
# while multiplying the rows it has by its weights (c = 2·(T/n)·D·(F/n) / peak): c >= t when
# F/n >= R, whatever T is. The hiding points, from 07's rule on the clocks:

# %%
n = 8


def backward_hides_allreduce(batch):           # DP: c = the backward, 4PB FLOPs
    compute, transfer = clocks(data_parallel, batch, n)
    return step_seconds(2 / 3 * compute, transfer, True) == 2 / 3 * compute


def fsdp_layer_hides(batch, layer_params=1e8):
    gather = bytes_sent("allgather", "ring", BF16 * layer_params, n) / links["h100", "NVLink"]
    scatter = bytes_sent("reduce_scatter", "ring", BF16 * layer_params, n) / links["h100", "NVLink"]
    forward = 2 * layer_params * batch / PEAK_FLOPS["h100"]   # the backward: twice that
    return (step_seconds(forward, gather, True) == forward
            and step_seconds(2 * forward, gather + scatter, True) == 2 * forward)


def dx_allreduce_hides(width):                 # TP's backward: dX's AllReduce beside dW1's matmul
    compute, transfer = clocks(tensor_parallel, width, n)
    return step_seconds(compute / 6, transfer / 2, True) == compute / 6


def collective_matmul_hides(width):            # SP: one ring step of 07
    block_rows = TOKENS // n
    c = 2 * block_rows * WIDTH * width / PEAK_FLOPS["h100"]
    t = BF16 * block_rows * WIDTH / links["h100", "NVLink"]
    return step_seconds(c, t, True) == c


for hides, x_hide, what in [(backward_hides_allreduce, 1.5 * CRITICAL["DP"](n, R), "DP: B"),
                            (fsdp_layer_hides, CRITICAL["FSDP"](n, R), "FSDP: B"),
                            (dx_allreduce_hides, 3 * CRITICAL["TP"](n, R), "TP's dX, F/n"),
                            (collective_matmul_hides, R, "SP: F/n")]:
    assert hides(1.001 * x_hide) and not hides(0.999 * x_hide)
    print(f"{what} >= {x_hide:.0f} hides")
compute, transfer = clocks(tensor_parallel, 2 * h100["TP"], n)
print(f"TP at twice its (F/n)*: {compute * 1e3:.2f} + {transfer * 1e3:.2f} ms; the forward's "
      f"AllReduce, {transfer / 2 * 1e3:.2f} ms, never hidden")

# %% [markdown]
# DP's AllReduce hides behind the backward from the same batch as FSDP's collectives:
# 1.5 x (2/3) = 1. Two refinements move every number: real steps reach a fraction u of peak
# ("model FLOPs utilization"), so R becomes u·R and every x\* is multiplied by u; gradients in
# fp32 double DP's bytes and B\*, but only FSDP's ReduceScatter (its two AllGathers still
# move bf16 weights): 4/3 of its bytes and B\*.
#
# ## 6. One step that is DP, FSDP and TP at once
#
# The 8 devices as a 2 x 4 mesh, axes `data` and `model`:
#
# - `data` (2): **DP** (each row of devices gets half the batch) and **FSDP** (the weights
#   split over it too, gathered just before use);
# - `model` (4): **TP**, Megatron's MLP (W1 split by columns, W2 by rows).
#
# In 09's notation: `x[B_data, D]`, `W1[D_data, F_model]`, `W2[F_(model, data), D]` (W2's
# rows split over `model`, each model slice over `data`, so gathering over `data` gives a
# model device its rows whole). Both weights are split along their first dimension, so one
# AllGather call gathers both.

# %%
mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
B, D, F = 16, 8, 32                            # tokens, model width, hidden width
rng = np.random.default_rng(0)
params = {"w1": rng.standard_normal((D, F)).astype(np.float32) / np.sqrt(D),
          "w2": rng.standard_normal((F, D)).astype(np.float32) / np.sqrt(F)}
x, y = rng.standard_normal((2, B, D)).astype(np.float32)
SPECS = {"w1": P("data", "model"), "w2": P(("model", "data"), None)}


def sgd(params, grads, learning_rate=0.1):
    return jax.tree.map(lambda w, g: w - learning_rate * g, params, grads)


@jax.jit
def step_one_device(params, x, y):
    loss = lambda p: jnp.sum((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2) / B  # noqa: E731
    return sgd(params, jax.grad(loss)(params))


def sharded_step(allgather, allreduce):
    """The step on `mesh`, with these two collectives (jaxcoll's or lax's)."""
    def local_loss(shards, x, y):              # w1, w2: (4, 8) shards; x, y: (8, 8)
        w = allgather(shards, "data")          # FSDP: W1[D, F_model], W2[F_model, D], (8, 8)
        h = jax.nn.relu(x @ w["w1"])           # TP, column parallel: H[B_data, F_model]
        out = allreduce(h @ w["w2"], "model")  # TP, row parallel: sum the partial products
        return jnp.sum((out - y) ** 2) / B     # this data row's part of the loss

    def step(shards, x, y):
        grads = jax.grad(local_loss)(shards, x, y)  # adds the ReduceScatter over data
        return sgd(shards, grads)              # each device updates its own shards

    return jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(SPECS, P("data"), P("data")),
                                 out_specs=SPECS))


jaxcoll_step = sharded_step(
    lambda tree, axis: jaxcoll.allgather(tree, axis, tiled=True, algorithm="ring"),
    lambda x, axis: jaxcoll.allreduce(x, axis, algorithm="ring"))
lax_step = sharded_step(
    lambda tree, axis: jax.tree.map(lambda w: lax.all_gather(w, axis, tiled=True), tree),
    lax.psum)

want = step_one_device(params, x, y)
ours, theirs = jaxcoll_step(params, x, y), lax_step(params, x, y)
for name in params:
    np.testing.assert_allclose(ours[name], want[name], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-5, atol=1e-6)
print("jaxcoll's step == lax's step == the one-device step")

# %% [markdown]
# | line | collective | axis | why |
# |---|---|---|---|
# | `allgather(shards, "data")` | AllGather | data | FSDP: weights stored split, used whole |
# | `x @ w["w1"]` | none | | 09's case 1: D whole on both sides |
# | `allreduce(h @ w["w2"], "model")` | AllReduce | model | 09's case 3: F split over `model` on both sides |
# | `jax.grad`: the AllGather's transpose | ReduceScatter | data | FSDP: sum both data rows' gradients, keep your shard (DP's sum too) |
# | `jax.grad`: the AllReduce's transpose | none | | each model device already holds the same output gradient |
# | `sgd` | none | | each device updates only its shards (ZeRO-3) |
#
# DP needs no AllReduce of its own: the ReduceScatter sums, and the next step's AllGather is
# the AllReduce's other half (notebook 02). With a layer before this one, `jax.grad` would
# add TP's backward AllReduce (for the replicated input) as JAX's own `psum` (09, section
# 7). One AllGather for both weights (a bucket, notebook 06) also keeps the collectives in
# one chain, as jaxlib 0.10's CPU runtime needs (docs/guide/typing.md). Traced and compiled:

# %%
traced = re.findall(r"jaxcoll_(\w+)", str(jax.make_jaxpr(jaxcoll_step)(params, x, y)))
ours_ops = lesson.collectives_in(jaxcoll_step, params, x, y)
lax_ops = lesson.collectives_in(lax_step, params, x, y)
assert traced == ["allgather", "allreduce", "reduce_scatter"]
assert lax_ops == {"all-gather": 2, "all-reduce": 1, "reduce-scatter": 2}
assert set(ours_ops) == {"collective-permute"}
print("traced:", traced)
print("compiled, lax:", dict(lax_ops), " jaxcoll:", dict(ours_ops))

# %% [markdown]
# lax gathers and reduce-scatters each weight on its own; jaxcoll packs both into one
# buffer, and compiles to `collective-permute`s only. Each ring round is one; count the
# rounds of the three schedules and the permutes that run (a loop's once per trip):

# %%
rounds = {"allgather over data (2)": jaxcoll.schedule("allgather", "ring", 2).n_rounds,
          "allreduce over model (4)": jaxcoll.schedule("allreduce", "ring", 4).n_rounds,
          "reduce_scatter over data (2)": jaxcoll.schedule("reduce_scatter", "ring", 2).n_rounds}
written, run = lesson.permutes_run(jaxcoll_step, params, x, y)
assert run == sum(rounds.values()) == 8 and written == ours_ops["collective-permute"] == 4
sizes = sorted(lesson.permute_sizes(jaxcoll_step, params, x, y))
bucket = 4 * 2 * (D * F // mesh.size)          # float32 bytes of one device's w1 and w2 shards
chunk = 4 * (B // 2) * D // 4                  # a quarter of one device's (8, 8) output
assert sizes == sorted([bucket, bucket, chunk, chunk])
assert bucket + 6 * chunk + bucket == (bytes_sent("allgather", "ring", 2 * bucket, 2)
                                       + bytes_sent("allreduce", "ring", 4 * chunk, 4)
                                       + bytes_sent("reduce_scatter", "ring", 2 * bucket, 2))
print("rounds:", rounds)
print(f"collective-permutes: {written} written, {run} run; sizes {sizes} bytes")

# %% [markdown]
# 8 rounds and 8 permutes run, but only 4 written: the ring AllReduce's 3 reduce-scatter
# rounds repeat one permutation, as do its 3 all-gather rounds, so each half is a loop with
# one permute in its body. The sizes add up to the cost model's bytes.
#
# ## 7. How to pick
#
# 1. **Write the layout** in 09's notation; the collectives follow from its rules. Batch
#    split over an axis is DP; weights split over it too is FSDP (an AllGather; `jax.grad`
#    writes the ReduceScatter); hidden width split over an axis is TP (one AllReduce, or
#    with SP an AllGather and a ReduceScatter).
# 2. **Put the chattiest axis on the fastest links.** TP sends activations every layer and,
#    without collective matmuls, hides only the backward's dX (beside dW): inside the node.
#    FSDP and DP send weights and gradients, in the background: across nodes.
# 3. **Check the critical numbers** with each axis's R: hidden width per device F/n >=
#    (2/3)(n−1)/n·R for TP (>= R for SP's collective matmuls to hide); tokens per DP replica
#    >= (n−1)/n·R for FSDP and for DP's AllReduce to hide behind the backward.
# 4. **Pick each collective's algorithm** (05_choosing_an_algorithm).
#
# A worked case: 8 nodes of 8 H100s, D = 8192, F = 4D, TP over a node's 8 GPUs and FSDP over
# the 8 nodes. TP divides FSDP's bytes and FLOPs alike, so FSDP's B counts the tokens per TP
# group:

# %%
tp, fsdp_n, F_big = 8, 8, 4 * 8192
R_nvlink, R_nic = (PEAK_FLOPS["h100"] / links["h100", link] for link in ("NVLink", "NIC"))
tp_width = F_big // tp
assert CRITICAL["TP"](tp, R_nvlink) < R_nvlink < tp_width < CRITICAL["TP"](tp, R_nic)
tokens_needed = CRITICAL["FSDP"](fsdp_n, R_nic)
assert round(fsdp_n * tokens_needed, -4) == 140_000   # the text below
print(f"TP: F/n = {tp_width}; in a node compute-bound from {CRITICAL['TP'](tp, R_nvlink):.0f}, "
      f"hidden (SP's collective matmuls) from {R_nvlink:.0f}; "
      f"across nodes needs {CRITICAL['TP'](tp, R_nic):.0f}")
print(f"FSDP over the NICs hides from {tokens_needed:.0f} tokens per TP group per step, "
      f"{fsdp_n * tokens_needed / 1e3:.0f}k in all")

# %% [markdown]
# So TP inside nodes, FSDP across them, and about 140k tokens per step before the NICs stop
# mattering (fewer at real utilization). Ask any layout the same: which collective, how
# many bytes, beside how many FLOPs, and does that compute wait for it?
#
# ## Try it
#
# **fp32 gradients on A100s across nodes.** DP over n GPUs, one a node behind a 25 GB/s HDR NIC
# (`systems.GPUS["a100"]`), gradients allreduced in float32 (4 bytes). Write
# `my_critical_batch(n)`: the tokens per GPU per step where T_comp = T_comm.
#
# *Hint:* DP's derivation with 4P bytes instead of 2P.
#
# <details><summary>Answer</summary>
#
# 6PB / peak = 2(n−1)/n · 4P / W, so B\* = (4/3)·(n−1)/n · peak / W.
#
# ```python
# def my_critical_batch(n):
#     return 4 / 3 * (n - 1) / n * PEAK_FLOPS["a100"] / links["a100", "NIC"]
# ```
# </details>

# %%
def my_critical_batch(n):
    raise NotImplementedError("your code here")


def check_exercise(critical_batch):
    def fp32_data_parallel(batch, n):
        return 6 * PARAMS * batch, bytes_sent("allreduce", "ring", 4 * PARAMS, n)

    try:
        for n in (16, 64):
            want = crossing(fp32_data_parallel, n, "a100", "NIC")
            assert abs(critical_batch(n) / want - 1) < 1e-6, (n, critical_batch(n), want)
    except NotImplementedError:
        print("not done yet: fill in my_critical_batch")
        return
    print(f"correct: {critical_batch(64):.0f} tokens per GPU per step on 64 A100s")


check_exercise(my_critical_batch)
