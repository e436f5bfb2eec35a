# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 13 · What NCCL runs, and what jaxcoll runs
#
# A jaxcoll schedule runs on JAX as rounds of `ppermute`s: a round starts when the one before
# has ended on every rank, and each pays its start-up α. That is **lock-step**. NCCL runs the
# same kind of algorithm otherwise: the buffer in slices, each sent as soon as it has
# arrived (**pipelined**), over several **channels** at once, in a **protocol** that trades
# latency for bandwidth, and on H100 nodes with the NVSwitch adding (**NVLS**). This notebook
# prices both on paper, from counts and the model's terms, not from this machine's timings:
#
# - `jaxcoll.simulate(schedule, nbytes, topology, runtime=...)` prices any schedule
#   lock-step (jaxcoll's XLA executor, the default) or pipelined (NCCL's way);
# - `jaxcoll.analysis.nccl.predict(collective, nbytes, topology)` repeats NCCL's own tuner
#   (v2.28.9: its channel search, its tables of latency and bandwidth, its choice), with every
#   constant named after its file and symbol in NCCL's source.
#
# **What you will learn**
#
# - why pipelining hides all but one of a ring's α's at large sizes and none at small ones;
# - channels and rails: several rings at once, each leaving a node by its own NIC;
# - NCCL's tree: a chain inside each node, two binary trees between nodes;
# - NVLS: the switch adds, and each GPU sends about N instead of 2(n−1)/n·N;
# - the protocols LL, LL128 and Simple, and NCCL's choice by size and node count;
# - the model against published nccl-tests curves, and where it misses.
#
# **Prerequisites:** 05_choosing_an_algorithm (its sections on links and on 1024 GPUs) and notebook 06
# (section 6).
# **Notation:** n ranks, g GPUs per node, N bytes per rank, busbw as nccl-tests reports it
# (algbw·2(n−1)/n for allreduce); GB/s = 10⁹ B/s.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices, even where a GPU is present
os.environ["JAXCOLL_CALIBRATE"] = "0"        # auto: the shipped calibrations, everywhere
import jax
jax.config.update("jax_num_cpu_devices", 8)  # before any JAX work

import math

import numpy as np
from IPython.display import display
from jax import lax

import jaxcoll
from jaxcoll.analysis import nccl, protocols, systems
import lesson                                 # tutorials/lesson.py: the notebooks' plumbing
from lesson import AXIS, on_every_rank, size_label
import _nccl_curves                           # tutorials/_nccl_curves.py: tables, a tree, a plot

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
dgx = systems.dgx("h100")                     # 8 H100s on an NVSwitch (05_choosing_an_algorithm)
ring8 = jaxcoll.schedule("allreduce", "ring", 8)
alpha, beta = systems.NVLINK_ALPHA, 1 / (systems.GPUS["h100"][0] * 1e9)
print(dgx.assumptions)

# %% [markdown]
# ## 1. The same ring, lock-step and pipelined
#
# The ring allreduce has R = 2(n−1) = 14 rounds; in each, every rank sends one chunk of N/n
# bytes to its neighbour. **Lock-step**, each round takes α + N/n·β:
#
#     T_lockstep = R·(α + N/n·β)
#
# **Pipelined**, each chunk is cut into S slices and a slice of round i leaves as soon as the
# same slice of round i − 1 has arrived; a link carries one slice at a time, taking
# t = N/(n·S)·β. Two bounds hold for the last arrival: the link is busy R·S·t, then the last
# slice pays its α; and slice 0 passes through all R rounds, paying t + α each, before the
# last round's other S − 1 slices cross. The run meets the larger (tests/test_pipelined.py
# derives it):
#
#     T_pipelined = max(R·S·t + α,  R·(t + α) + (S − 1)·t)
#
# The first term wins when (S − 1)·t ≥ α: a slice keeps the link busy while the next round's
# α passes, and the ring pays **one α instead of R**. Checked on the DGX:

# %%
def pipelined_ring(nbytes, slices, rounds=14, n=8):
    t = nbytes / (n * slices) * beta
    return max(rounds * slices * t + alpha, rounds * (t + alpha) + (slices - 1) * t)


for nbytes in (64 * KiB, 16 * MiB):
    lockstep = jaxcoll.simulate(ring8, nbytes, dgx).seconds
    assert math.isclose(lockstep, 14 * (alpha + nbytes / 8 * beta))
    for slices in (1, 4, 64):
        piped = jaxcoll.simulate(ring8, nbytes, dgx, runtime="pipelined", slices=slices).seconds
        assert math.isclose(piped, pipelined_ring(nbytes, slices))
        print(f"{size_label(nbytes):>7}, {slices:>2} slices: lock-step {lockstep * 1e6:6.1f} µs, "
              f"pipelined {piped * 1e6:6.1f} µs: {max(lockstep - piped, 0) / alpha:4.1f} α's "
              "hidden")
assert math.isclose(lockstep - piped, 13 * alpha)         # 16 MiB: all but one
assert 64 * KiB / 8 * beta < alpha / 100                  # 64 KiB: a chunk's time, beside α
gpu_alpha = jaxcoll.calibration("gpu").alpha              # what auto assumes per ppermute on GPUs
print(f"α per round: NCCL's NVLink step {alpha * 1e6:.1f} µs; gpu.json's ppermute "
      f"{gpu_alpha * 1e6:.0f} µs")
default = jaxcoll.simulate(ring8, 16 * MiB, dgx, runtime="pipelined").seconds
assert default == jaxcoll.simulate(ring8, 16 * MiB, dgx, runtime="pipelined", slices=4).seconds
print("default slices at 16 MiB: 2 MiB chunks / 512 KiB (NCCL's Simple step) = 4")

# %% [markdown]
# At 64 KiB a whole chunk (8 KiB) crosses in 0.02 µs, far below α = 3.4 µs: every round
# still waits for the α before it, whatever S. Pipelining hides α behind bytes, and a small
# message has too few bytes to hide it behind. NCCL answers small messages with
# protocols of lower per-step latency (section 5). At 16 MiB 13 of the 14 α's hide (in 4
# slices, the default: one per 512 KiB, NCCL's Simple step).
#
# Lock-step is what jaxcoll's executor runs, and its α is not NCCL's 3.4 µs: each round is a
# separate `collective-permute`, for which `gpu.json` assumes 15 µs (printed).

# %% [markdown]
# ## 2. Channels and rails
#
# A node has 8 NICs, one beside each GPU (a **rail**). One ring over two nodes crosses
# between them at one GPU, so all its traffic between the nodes goes through one NIC.
# NCCL runs c rings at once, its **channels**, each on N/c and each crossing at another GPU,
# so through another NIC. `simulate(..., channels=c)` does the same (channel c's ranks are
# rotated: `Topology.channel_ranks`). A 16-rank ring on two DGX nodes, 256 MiB:

# %%
two = systems.dgx("h100", 2)
ring16 = jaxcoll.schedule("allreduce", "ring", 16)
nics = [i for i, name in enumerate(two.link_names) if name.startswith("node0.nic")]
channel_times = {}
for channels in (1, 2, 4, 8, 16):
    run = jaxcoll.simulate(ring16, 256 * MiB, two, channels=channels, runtime="pipelined")
    out = run.link_bytes()[nics] / (256 * MiB)            # N's out through node 0's NICs
    channel_times[channels] = run.seconds
    print(f"{channels:>2} channel(s): {run.seconds * 1e3:6.2f} ms, {np.count_nonzero(out)} NIC(s) "
          f"used, the busiest sends {out.max():.3f}·N")
    assert math.isclose(out.sum(), 2 * 15 / 16)           # all channels: the ring's 2(n−1)/n·N
assert channel_times[16] == channel_times[8] < channel_times[1] / 7

# %% [markdown]
# Together the channels always send 2(n−1)/n·N = 1.875·N out of a node; one channel puts all of
# it on one NIC, eight spread it over all eight, and the time falls nearly 8x. A 16th channel
# finds no 9th NIC.
#
# NCCL picks its channels in two steps. At start-up its search finds, per pattern, how many
# rings the links carry at which speed (on one H100 node 12 rings at 30 GB/s: the ring's
# busbw limit, 360 GB/s; doubled to 24 channels). Per call it launches fewer when the buffer
# is small: while N < channels × threads × threshold, one channel less (`enqueue.cc`;
# threads x threshold: 512 x 8 bytes x n ranks for the LL ring, 640 x 8 for LL128, 512 x 64
# for Simple):

# %%
one_node = systems.cluster("h100", 1)
print(f"{'ring':<7}" + "".join(f"{size_label(s):>9}" for s in (KiB, 64 * KiB, MiB, GiB)))
launched = {}
for protocol in nccl.PROTOCOLS:
    launched[protocol] = [nccl.predict("allreduce", s, one_node, algorithm="ring",
                                       protocol=protocol).channels
                          for s in (KiB, 64 * KiB, MiB, GiB)]
    print(f"{protocol:<7}" + "".join(f"{c:>9}" for c in launched[protocol]))
for p, protocol in enumerate(nccl.PROTOCOLS):             # 64 KiB: N // (threads x threshold)
    per_channel = nccl.THREADS[p] * nccl.THRESHOLD[p] * (8 if protocol == "LL" else 1)
    assert launched[protocol][1] == 64 * KiB // per_channel and launched[protocol][3] == 24
limit = nccl.predict("allreduce", 1 << 40, one_node, algorithm="ring", protocol="Simple").busbw
assert math.isclose(limit, 12 * 30, rel_tol=1e-3)

# %% [markdown]
# ## 3. NCCL's tree: a chain inside, two binary trees between nodes
#
# Across many nodes the ring's 2(n−1) steps hurt: at 128 nodes it is 2046 steps, 254 of them
# through the network. NCCL's tree ([NCCL 2.4][nccl24]) makes each node a **chain** of its g
# GPUs over NVLink and joins the nodes by a **binary tree**; data goes up (reducing) and comes
# back down. Two such trees, each with half the data, complement each other: a node interior in
# one is a leaf in the other, so every NIC works evenly. Its depth is (g − 1) NVLink hops plus
# log₂(nodes) network hops, and NCCL's latency table says exactly that:
#
#     tree:  base + 2·((g − 1)·hw_NVLink + log₂(nodes)·hw_NET)
#     ring:  base + (2(n−1) − 2(nodes−1))·hw_NVLink' + 2(nodes − 1)·hw_NET
#
# (hw_NVLink': NCCL's step inside a node, at least the network's host overhead, 3 µs with
# Simple). Simple protocol, in µs:
#
# [nccl24]: https://developer.nvidia.com/blog/massively-scale-deep-learning-training-nccl-2-4/

# %%
SIMPLE = nccl.PROTOCOLS.index("Simple")
for nodes in (2, 16, 128):
    cluster = systems.cluster("h100", nodes)
    latency = {a: 1e6 * nccl.predict("allreduce", 0, cluster, algorithm=a, protocol="Simple")
               .seconds for a in ("ring", "tree")}
    hw_nvlink, hw_net = nccl.HW_LAT["nvlink"]["tree"][SIMPLE], nccl.HW_LAT["net"]["tree"][SIMPLE]
    tree = nccl.BASE_LAT["tree"][SIMPLE] + 2 * (7 * hw_nvlink + math.log2(nodes) * hw_net)
    ring = nccl.BASE_LAT["ring"][SIMPLE] + (2 * (8 * nodes - 1) - 2 * (nodes - 1)) * \
        nccl.HW_LAT["nvlink"]["ring"][SIMPLE] + 2 * (nodes - 1) * nccl.HW_LAT["net"]["ring"][SIMPLE]
    assert math.isclose(latency["tree"], tree) and math.isclose(latency["ring"], ring)
    print(f"{nodes:>3} nodes: ring {latency['ring']:7.0f} µs ({2 * (nodes - 1):>3} network steps),"
          f" tree {latency['tree']:4.0f} µs ({2 * round(math.log2(nodes))} network hops)")

# %% [markdown]
# jaxcoll's `double_tree` is the same idea without the nodes: two heap trees over all n ranks.
# NCCL's shape is a schedule too: `_nccl_curves.nccl_tree_allreduce(nodes, g)` builds it with
# jaxcoll's own tree code (`fan_out`), in one piece. On 16 DGX nodes (128 GPUs),
# lock-step, 64 KiB:

# %%
sixteen = systems.dgx("h100", 16)
nics16 = [i for i, name in enumerate(sixteen.link_names) if ".nic" in name]   # out and in
shapes = {"ring": jaxcoll.schedule("allreduce", "ring", 128),
          "double_tree (flat)": jaxcoll.schedule("allreduce", "double_tree", 128),
          "NCCL's tree shape": _nccl_curves.nccl_tree_allreduce(16, 8)}
jaxcoll.verify(shapes["NCCL's tree shape"])           # an allreduce, checked symbolically
tree_times, crossings, nic_load = {}, {}, {}
for name, schedule in shapes.items():
    run = jaxcoll.simulate(schedule, 64 * KiB, sixteen)
    crossings[name] = sum(any(t.src // 8 != t.dst // 8 for t in r.transfers)  # node = rank // 8
                          for r in schedule.rounds)
    tree_times[name], nic_load[name] = run.seconds, run.link_bytes()[nics16].max() / (64 * KiB)
    print(f"{name:<19} {schedule.n_rounds:>4} rounds, {crossings[name]:>4} with a transfer between "
          f"nodes, {nic_load[name]:.3f}·N through the busiest NIC: {run.seconds * 1e6:5.0f} µs")
assert np.allclose(list(nic_load.values()), [2 * 127 / 128, 2, 2])
assert tree_times["NCCL's tree shape"] < tree_times["double_tree (flat)"] < tree_times["ring"] / 10
assert crossings["NCCL's tree shape"] < crossings["double_tree (flat)"]

# %% [markdown]
# Both trees need about a tenth of the ring's rounds; the chains keep more of NCCL's rounds
# inside the nodes (12 of 26 cross the network, against 18 of 24 for the flat trees), on
# NVLink's smaller α. Every shape sends about 2·N through its busiest NIC (the ring
# 2(n−1)/n·N); in one piece a tree waits for each byte at every level, so NCCL pipelines it in
# many slices and channels, and then that 2·N·β is what it pays.
# The tree shape is an ordinary schedule, so jaxcoll runs it, lock-step, here on 8 fake
# devices as 2 "nodes" of 4:

# %%
small_tree = _nccl_curves.nccl_tree_allreduce(2, 4)
x = lesson.small_integers(8, 6)
program = on_every_rank(lambda v: jaxcoll.allreduce(v, AXIS, algorithm=small_tree))
np.testing.assert_array_equal(program(x), on_every_rank(lambda v: lax.psum(v, AXIS))(x))
print(small_tree)
print("jaxcoll runs NCCL's tree shape: equal to psum, bit for bit")

# %% [markdown]
# ## 4. NVLS: the switch adds
#
# Every allreduce above has the GPUs do the additions, and then each GPU must send and
# receive 2(n−1)/n·N (notebook 04's bound). An H100 node's NVSwitch can add (NVLink SHARP,
# **NVLS**): each GPU sends its N into the switch, which reduces, and reads the sum back:
# about N each way, whatever n. So the busbw nccl-tests reports, algbw·2(n−1)/n, can exceed
# the link's rate.
#
# NCCL's table prices NVLS with channels × speed (its search: 8 channels at 40 GB/s on one
# H100 node) × 0.85 (`nvlsEfficiency`, Hopper) × (channels − 1)/channels × 2 for allreduce,
# and a flat latency of 25 µs (`hwLatencies[NVLINK][NVLS]`) with no per-step term. Against the
# ring, NCCL's choice of protocol for each:

# %%
print(f"{'N':>8} {'ring (best protocol)':>28} {'NVLS (Simple)':>24}")
nvls_vs_ring = {}
for nbytes in (64 * KiB, 4 * MiB, 256 * MiB, GiB):
    ring_p = nccl.predict("allreduce", nbytes, one_node, algorithm="ring")
    nvls_p = nccl.predict("allreduce", nbytes, one_node, algorithm="nvls")
    nvls_vs_ring[nbytes] = nvls_p.seconds / ring_p.seconds
    print(f"{size_label(nbytes):>8} {ring_p.protocol:>7} {ring_p.seconds * 1e6:8.1f} µs "
          f"{ring_p.busbw:6.1f} GB/s {nvls_p.seconds * 1e6:8.1f} µs {nvls_p.busbw:6.1f} GB/s")
assert nvls_vs_ring[64 * KiB] > 1 > nvls_vs_ring[GiB]
assert math.isclose(nccl.predict("allreduce", 0, one_node, algorithm="nvls").seconds, 25e-6)
assert nccl.predict("allreduce", GiB, one_node).busbw > systems.GPUS["h100"][0]
nvls_bus = 8 * 40 * nccl.NVLS_EFFICIENCY[2] * 7 / 8 * 2   # channels x speed x 0.85 x 7/8 x 2
assert math.isclose(nccl.predict("allreduce", 1 << 40, one_node).busbw, nvls_bus, rel_tol=1e-3)
print(f"NVLS's busbw limit in NCCL's table: {nvls_bus:.0f} GB/s; the link: "
      f"{systems.GPUS['h100'][0]:.1f} GB/s")

# %% [markdown]
# Small messages: the ring in LL (15 µs) beats NVLS's 25 µs. Large ones: NVLS, 473 GB/s of
# busbw at 1 GiB against the ring's 356, above the 370.8 GB/s the link carries, which no
# reduction at the endpoints can reach.

# %% [markdown]
# jaxcoll's IR has NVLS too: `nvls.allreduce(n)` is one round of in-switch operations, as
# NCCL's kernel runs it: rank r loads chunk r summed in the switch (`multimem.ld_reduce`), then
# stores the sum to every rank at once (`multimem.st`). `verify` and `simulate` take it. What
# crosses GPU 0's port, 1 GiB:

# %%
from jaxcoll.ir.families import nvls

in_switch = nvls.allreduce(8)
jaxcoll.verify(in_switch)                             # it computes an allreduce
ports, runs = {}, {}
for name, schedule in (("ring", ring8), ("NVLS", in_switch)):
    runs[name] = jaxcoll.simulate(schedule, GiB, dgx, runtime="pipelined")
    load = runs[name].link_bytes() / GiB
    ports[name] = [load[dgx.link_names.index(k)] for k in ("gpu0->nvswitch", "nvswitch->gpu0")]
    print(f"{name:<4} {schedule.n_rounds:>2} round(s): GPU 0 sends {ports[name][0]:.3f}·N, "
          f"receives {ports[name][1]:.3f}·N; busbw {GiB / runs[name].seconds * 1.75e-9:4.0f} GB/s")
assert np.allclose(ports["ring"], 2 * 7 / 8) and np.allclose(ports["NVLS"], 9 / 8)
assert math.isclose(runs["NVLS"].seconds, 9 / 8 * GiB * beta + 2 * alpha)
nvls_busbw = GiB / runs["NVLS"].seconds * 1.75e-9
link_gbs = systems.GPUS["h100"][0]
assert nccl.predict("allreduce", GiB, one_node).busbw < nvls_busbw < 14 / 9 * link_gbs

# %% [markdown]
# Each port carries the buffer up (every rank loads its chunk from it) and its chunk of sums
# down, then that chunk up and every sum down: (n + 1)/n·N = 1.125·N each way, against the
# ring's 1.75·N, in one round: 576 GB/s of busbw on these links (14/9 of the link). NCCL's
# table says 473 (efficiency 0.85, and 7/8 for 8 channels), and the DGX measures within 1% of
# that at 1 GiB and above (section 7): the switch does not reach its ports' limit. jaxcoll
# cannot run it: no `ppermute` adds inside a switch.

# %%
try:
    on_every_rank(lambda v: jaxcoll.allreduce(v, AXIS, algorithm=in_switch))(x)
    raise AssertionError("an in-switch schedule ran")
except jaxcoll.ScheduleError as error:
    print(error)

# %% [markdown]
# ## 5. Three protocols: LL, LL128, Simple
#
# A protocol is how a receiver learns that data has arrived:
#
# - **LL** (low latency): every 8 bytes are 4 of data and a 4-byte flag (stored as 16-byte
#   lines); the receiver polls the flags, with no memory fence. The lowest latency, **half**
#   the bandwidth.
# - **LL128**: 128-byte lines, 120 bytes of data and an 8-byte flag, relying on NVLink
#   delivering a line whole.
# - **Simple**: plain data, then a flag after a memory fence, per 512 KiB step: **full**
#   bandwidth, the highest latency.
#
# NCCL's table (`tuning.cc`) for the ring, per protocol: a base latency, a latency per step
# inside a node and across, and the factor on the bus bandwidth:

# %%
FACTOR = {"LL": "x 0.5 (at most llMaxBws)", "LL128": "x 0.92", "Simple": "x 1"}
for p, protocol in enumerate(nccl.PROTOCOLS):
    print(f"{protocol:<7} base {nccl.BASE_LAT['ring'][p]:4.1f} µs, per step NVLink "
          f"{nccl.HW_LAT['nvlink']['ring'][p]:3.1f} µs, network "
          f"{nccl.HW_LAT['net']['ring'][p]:4.1f} µs;"
          f" bandwidth {FACTOR[protocol]}")
print("data per byte on the wire:",
      {p: round(1 / protocols.BY_NAME[p].wire, 3) for p in nccl.PROTOCOLS})
assert [1 / protocols.BY_NAME[p].wire for p in nccl.PROTOCOLS] == [4 / 8, 120 / 128, 1]

# %% [markdown]
# Each protocol forced (`protocol=`, as `NCCL_PROTO`), with NCCL's pick of algorithm for it,
# on one node and on 16:

# %%
SIZES = (KiB, 64 * KiB, MiB, 256 * MiB)
winners = {}
for nodes in (1, 16):
    cluster = systems.cluster("h100", nodes)
    print(f"{nodes:>2} node(s)" + "".join(f"{size_label(s):>27}" for s in SIZES))
    for protocol in nccl.PROTOCOLS:
        row = [nccl.predict("allreduce", s, cluster, protocol=protocol) for s in SIZES]
        print(f"{protocol:<10}" + "".join(f"{p.algorithm:>10} {p.seconds * 1e6:7.0f} µs "
                                         f"{p.busbw:5.1f}" for p in row))
    winners[nodes] = [nccl.predict("allreduce", s, cluster).protocol for s in SIZES]
    print("NCCL picks:", winners[nodes], "\n")
assert winners[1] == ["LL", "LL", "LL", "Simple"] and winners[16] == ["LL", "LL", "LL128", "Simple"]
steps = {p: nccl.BASE_LAT["ring"][i] + 14 * nccl.HW_LAT["nvlink"]["ring"][i]  # 14 ring steps
         for i, p in enumerate(nccl.PROTOCOLS)}
assert round(steps["LL"]) == 15 and round(steps["Simple"]) == 56
ll_cap = nccl.LL_MAX_BWS[0][2]                            # Intel hosts, more than 2 nodes
assert nccl.predict("allreduce", 256 * MiB, cluster, protocol="LL").busbw < ll_cap == 20.4

# %% [markdown]
# (µs, then busbw in GB/s.) Up to 1 MiB on one node LL wins: at 0.6 µs per NVLink step
# against Simple's 3.4, the ring's 14 steps and base latency cost 15 µs instead of 56. At 256 MiB
# the bytes dominate and Simple's full bandwidth wins (there through NVLS). Across 16 nodes the
# tree is NCCL's pick at small sizes; LL128 wins at 1 MiB, near full bandwidth at a middling
# latency; Simple wins large messages. LL's bandwidth across more than two nodes is capped at
# 20.4 GB/s (`llMaxBws`, Intel hosts): its 256 MiB takes 26 ms there.

# %% [markdown]
# ## 6. NCCL's choice by size and node count
#
# `predict` with nothing forced: NCCL's pick and its busbw (GB/s), H100 nodes with 8 x 400 Gb/s
# NICs, no SHARP:

# %%
NODES, CHOICE_SIZES = (1, 2, 16, 128), (KiB, 16 * KiB, 256 * KiB, 4 * MiB, 64 * MiB, GiB)
print(f"{'nodes':>5}" + "".join(f"{size_label(s):>23}" for s in CHOICE_SIZES))
choice = {}
for nodes in NODES:
    cluster = systems.cluster("h100", nodes)
    row = [nccl.predict("allreduce", s, cluster) for s in CHOICE_SIZES]
    choice[nodes] = [f"{p.algorithm}/{p.protocol}" for p in row]
    print(f"{nodes:>5}" + "".join(f"{c:>17} {p.busbw:5.0f}" for c, p in zip(choice[nodes], row)))
assert choice[1][0] == "ring/LL" and choice[1][-1] == "nvls/Simple"
assert all(choice[nodes][0] == "tree/LL" and "tree/LL128" in choice[nodes]
           and choice[nodes][-1] == "nvls_tree/Simple" for nodes in NODES[1:])

# %% [markdown]
# One node: the ring in LL, then NVLS. Across nodes: the tree in LL, then in LL128, then
# **NVLS tree** in Simple (NVLS inside each node, a tree between them). The busbw at
# 1 GiB falls from 473 to about 345 GB/s as the network's share grows.
#
# The NVLS tree is a schedule too, `nvls.tree_allreduce(nodes, 8)`: each node reduces through
# its switch, GPU g's share goes up and down a double binary tree of nodes over its own NIC,
# then is multicast back. jaxcoll's pipelined engine prices it slower than NCCL's model:

# %%
tree16, sixteen = nvls.tree_allreduce(16, 8), systems.cluster("h100", 16)
jaxcoll.verify(tree16)
piped = jaxcoll.simulate(tree16, 256 * MiB, sixteen, runtime="pipelined").seconds
told = nccl.predict("allreduce", 256 * MiB, sixteen, algorithm="nvls_tree").seconds
print(f"256 MiB on 16 nodes: pipelined {piped * 1e3:.2f} ms, NCCL's model {told * 1e3:.2f} ms")
assert 1 < piped / told < 1.5

# %% [markdown]
# The engine's link carries its messages in round order, right for a ring (one connection
# to one peer); a tree node's sends down then wait behind its sends up on the same NIC,
# where NCCL's separate connections interleave. A miss of the model, not of the algorithm.

# %% [markdown]
# ## 7. The model against published curves
#
# bench/published/ holds nccl-tests tables that vendors, clouds and users published (its
# README says where from; bench/MODEL.md, "Published curves against NCCL's model", compares
# all). It is in the repository, not the installed package: this notebook reads it from the
# checkout (`_nccl_curves.PUBLISHED`). Three, described with `systems.cluster` as
# tests/test_nccl_model.py does:

# %%
RUNS = {"nvidia-dgxc-h100-1x8-allreduce": ("1 x 8 H100 (NVIDIA)", systems.cluster("h100")),
        "redhat-dell-h200-2x8-allreduce": ("2 x 8 H200 (Red Hat)", systems.cluster("h200", 2)),
        "gcp-a3mega-h100-2x8-allreduce": ("2 x 8 H100, A3 Mega (GCP)",
                                          systems.cluster("h100", 2, nic_gbps=200))}
curves, compared = {}, {}
for run, (label, cluster) in RUNS.items():
    header, rows = _nccl_curves.published(run)
    rows = [r for r in rows if r[0] >= KiB]
    predicted = [nccl.predict("allreduce", size, cluster) for size, _, _ in rows]
    compared[run] = [(size, time, p.seconds * 1e6, time / (p.seconds * 1e6) - 1)
                     for (size, time, _), p in zip(rows, predicted)]
    sizes = [r[0] for r in rows]
    curves[label] = {"measured": (sizes, [r[2] for r in rows]),
                     "NCCL's model": (sizes, [p.busbw for p in predicted])}
    print(f"{label}; NCCL version: {header['nccl_version']}")
    print("   size   measured   model  error (model busbw / measured − 1)")
    for size, measured, model, error in compared[run]:
        if size in (KiB, 8 * KiB, 64 * KiB, MiB, 16 * MiB, 256 * MiB, GiB, 8 * GiB):
            print(f"{size_label(size):>9} {measured:8.1f} µs {model:7.1f} µs  {error:+6.0%}")
_nccl_curves.plot(curves, "allreduce busbw: published nccl-tests against NCCL's own model");

# %% [markdown]
# **Large messages:** at 1 GiB and above the model is within 10% on all three, on parameters
# taken from NCCL's source and the systems' specifications, none fitted to a curve.
#
# **Small messages:** the measured time is flat (a fixed cost per call), and that cost is
# larger than NCCL's table latency, by an amount that depends on the system, not on the size:

# %%
extra, ratio = {}, {}
for run, (label, _) in RUNS.items():
    measured, table = zip(*[(m, model) for size, m, model, _ in compared[run] if size <= 8 * KiB])
    extra[run] = np.median(np.subtract(measured, table))          # µs beyond NCCL's table
    ratio[run] = np.divide(measured, table)
    big = max(abs(e) for size, _, _, e in compared[run] if size >= GiB)
    print(f"{label:<26} ≤ 8 KiB: measured {min(measured):5.1f}..{max(measured):5.1f} µs, table "
          f"{table[0]:4.1f} µs, extra {extra[run]:5.1f} µs; ≥ 1 GiB: |error| ≤ {big:.0%}")
    assert max(measured) < 1.4 * min(measured) and big < 0.10      # flat: a fixed cost
h100, h200, gcp = RUNS
mid = [e for size, _, _, e in compared[h100] if 2 * MiB <= size <= 64 * MiB]
assert 0.15 < min(mid) and max(mid) < 0.5                          # optimistic, mid sizes
assert extra[h100] < 5 < extra[h200] < 30 < 90 < extra[gcp]
assert 4.9 < min(ratio[gcp]) < max(ratio[gcp]) < 6

# %% [markdown]
# NCCL's table prices the algorithm on the GPUs and the network; it leaves out the kernel
# launch, the host's enqueue and, across nodes, the network plugin's software. On one DGX
# node that is about 2 µs beyond the table's 15; on two H200 nodes over RoCE about 20 µs; on
# GCP's A3 Mega (GPUDirect-TCPXO, TCP through a plugin, says the source's repository,
# unverified) about 100 µs: 5 to 6 times the table. In between, the model is optimistic at
# 2–64 MiB on one node (+19% to +49%): NVLS's table is a flat bandwidth after 25 µs, and the
# measured curve ramps up more slowly. Fitting would hide these misses, not explain them.

# %% [markdown]
# ## Summary
#
# - jaxcoll's executor runs a schedule **lock-step**: R rounds, R α's. NCCL runs it
#   **pipelined**: max(R·S·t + α, R(t + α) + (S − 1)t), one α once (S − 1)·t ≥ α; small
#   messages keep every α, and NCCL answers them with LL.
# - **Channels** run rings side by side; across nodes each leaves by its own NIC (a rail).
# - NCCL's **tree**: a chain inside each node, two binary trees between nodes: 2·log₂(nodes)
#   network hops instead of 2(nodes − 1). The shape is a schedule jaxcoll runs.
# - **NVLS**: the switch adds; about N each way per GPU instead of 2(n−1)/n·N.
# - **LL** (half bandwidth, lowest latency), **LL128** (120 of 128 bytes), **Simple** (full
#   bandwidth, highest latency); NCCL chooses by size and node count.
# - Against published curves: within 10% at ≥ 1 GiB; small messages carry a per-call cost
#   NCCL's table leaves out, from 2 to 100 µs by system.

# %% [markdown]
# ## Try it
#
# On one H100 node with the ring forced, NCCL switches from LL to LL128 at some N. Predict it
# from the table: each protocol's time is latency + N / algbw. Take the latencies from
# `predict(..., 0, ...)` and each algbw from `predict` at 1 GiB.
#
# <details><summary>Answer</summary>
#
# N* = (lat_LL128 − lat_LL) / (1/algbw_LL − 1/algbw_LL128) = 25.6 µs / (1/80.5 − 1/187.9) ns
# per byte: about 3.4 MiB.
# </details>

# %%
my_answer = None          # bytes

lesson.check_size(my_answer, lambda size: nccl.predict(  # NCCL's ring leaves LL
    "allreduce", size, one_node, algorithm="ring").protocol != "LL", KiB, GiB)
