# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 05 · Choosing an algorithm on paper: two bounds, the links, and the crossover
#
# The lecture this project grew from (notebook 01) gives one rule,
# "如果数据量小，Ring 的启动开销反而大。这时候用 Tree AllReduce 更合适" ("if the data is small, the
# ring's start-up cost is what hurts; then a tree is the better fit"), and one warning,
# "Ring 算法对网络带宽要求高" ("the ring needs a lot of network bandwidth"). The rule is half
# right and the warning misleading. This notebook chooses **on paper**, from counts of rounds
# and bytes and models of real links, timing nothing; its second half,
# [05_what_auto_picks](05_what_auto_picks.ipynb), turns to `auto`, Broadcast's pipelined
# chain and the machine at hand.
#
# **What you will learn**
#
# - every AllReduce trades the **rounds** bound (α) against the **bytes** bound (β); the
#   crossover sits near α/β; in-network reduction (NVLS, SHARP);
# - the bidirectional ring and the 2-D torus, priced as *How to Scale Your Model* prices them
#   and checked by `jaxcoll.simulate`;
# - a DGX H100 on links, which published measurement tests the model; the double tree; 1024
#   GPUs in 128 nodes, priced as jaxcoll runs a schedule (lock-step) and as NCCL runs it.
#
# **Prerequisites:** notebooks 02 (section 9), 03 and 04 (section 5).
# **Notation:** n ranks, N bytes per rank; GB/s = 10⁹ bytes per second.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices, even where a GPU is present
os.environ["JAXCOLL_CALIBRATE"] = "0"        # auto: the shipped calibrations, everywhere
import jax
jax.config.update("jax_num_cpu_devices", 8)  # before any JAX work

import collections
import math
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import jaxcoll
from jaxcoll.tools import pictures
from jaxcoll.analysis import nccl, systems
from jaxcoll.analysis.model import ranking       # explain's ranking: [(algorithm, Cost)]
from jaxcoll.analysis.model import schedule_for  # the schedule priced, in its pieces
from jaxcoll.analysis.topology import ring, switch, torus
import lesson                                 # tutorials/lesson.py: the notebooks' plumbing
from lesson import n, size_label

SHIPPED = Path(jaxcoll.analysis.__file__).parent / "calibrations"
cpu = jaxcoll.Calibration.load(SHIPPED / "cpu.json").plain()   # α, β, γ of fake devices, alone
SIZES = 2.0 ** np.arange(8, 33)               # 256 B .. 4 GiB per rank


def terms(algorithm, ranks=n):
    """(messages, bytes on the path, bytes reduced) per byte of N: cost() with only α, β, γ = 1."""
    s = jaxcoll.schedule("allreduce", algorithm, ranks)
    return tuple(jaxcoll.cost(s, 1.0, alpha=a, beta=b, gamma=g).seconds
                 for a, b, g in ((1, 0, 0), (0, 1, 0), (0, 0, 1)))


def table(primitive, ranks, nbytes, calibration=None, topology=None):
    """explain's ranking as a table: [(algorithm, Cost, (α, β, γ terms))], cheapest first.
    On links the α term is the time simulated at N = 0."""
    bound = jaxcoll.bounds(primitive, ranks, nbytes, calibration, topology=topology)
    print(f"{primitive}, n = {ranks}, N = {size_label(nbytes)}; bounds: {bound.rounds} rounds, "
          f"{bound.path_bytes / nbytes:.2f}·N, {bound.seconds * 1e6:.1f} µs\n"
          f"{'algorithm':<19}{'msgs':>5}{'sent/N':>7}{'α term':>9}{'β term':>9}{'γ term':>9}"
          f"{'time':>9}{'x bound':>8}   (µs)")
    rows = []
    for name, c in ranking(primitive, ranks, nbytes, calibration, topology=topology):
        s = schedule_for(primitive, name, ranks, nbytes, calibration, topology)
        if topology is None:
            a, b, g = (jaxcoll.cost(s, nbytes, alpha=x, beta=y, gamma=z).seconds
                       for x, y, z in ((c.alpha, 0, 0), (0, c.beta, 0), (0, 0, c.gamma)))
        else:
            a = jaxcoll.simulate(s, 0, topology).seconds
            b = jaxcoll.simulate(s, nbytes, topology, gamma=0).seconds - a
            g = c.seconds - a - b
        assert np.isclose(a + b + g, c.seconds)          # the terms add up to the time ranked
        rows.append((name, c, (a, b, g)))
        print(f"{name:<19}{c.messages:>5}{c.bytes_sent / nbytes:>7.2f}"
              + "".join(f"{t * 1e6:>9.1f}" for t in (a, b, g, c.seconds))
              + f"{c.seconds / bound.seconds:>8.2f}")
    return rows


def plot_terms(tables, title):
    """Each table's terms as stacked bars, one panel per table."""
    fig, axes = plt.subplots(1, len(tables), figsize=(13, 3.2))
    for ax, (label, rows) in zip(axes, tables.items()):
        left = np.zeros(len(rows))
        for k, term in enumerate("αβγ"):
            widths = np.array([r[2][k] for r in rows]) * 1e6
            ax.barh([r[0] for r in rows], widths, left=left, label=f"{term} term")
            left += widths
        ax.invert_yaxis(), ax.set_xlabel("µs"), ax.set_title(label)
    axes[0].legend(), fig.suptitle(title), plt.tight_layout(), plt.show()


def picks(cheapest):
    """[(first size, name)] where `cheapest(size)` changes, over SIZES."""
    found = []
    for size in SIZES:
        name = cheapest(size)
        if not found or found[-1][1] != name:
            found.append((size, name))
    return found


# %% [markdown]
# ## 1. Two bounds, and which one to miss
#
# Each `ppermute` costs α + (its largest transfer's bytes)·β (+ the bytes added·γ)
# (`jaxcoll.cost`). By notebook 04, every allreduce needs at least ⌈log₂ n⌉ = 3 rounds and
# 2(n−1)/n·N = 1.75·N bytes on its path. `jaxcoll.explain` prints the ranking `auto` chooses
# from; here the same ranking as a table of each time's terms, with the α, β, γ that
# `cpu.json` gives these 8 fake devices:

# %%
print(f"α = {cpu.alpha * 1e6:.0f} µs, β = {cpu.beta:.3g} s/B, γ = {cpu.gamma:.3g} s/B: "
      f"α/β = {size_label(cpu.alpha / cpu.beta)}\n")
small = table("allreduce", n, 4 << 10, cpu)
print()
large = table("allreduce", n, 16 << 20, cpu)
plot_terms({"4 KiB": small, "16 MiB": large}, "allreduce on 8 ranks: each time's terms (cpu.json)")
print("msgs: ppermutes, each paying α; sent/N: all the busiest rank sends; "
      "x bound: the time over the bounds'")
bound = jaxcoll.bounds("allreduce", n, 1.0)
assert terms(small[0][0])[0] == bound.rounds                   # small N: the fewest rounds wins
assert np.isclose(terms(large[0][0])[1], bound.path_bytes)     # large N: the fewest bytes

# %% [markdown]
# The terms `cost` charges (α: messages; β: the busiest link's bytes, summed over rounds; γ:
# bytes a rank adds; lg = log2 n; the tree in one piece), checked for n = 8, 16, 32 (the
# whole cheat-sheet, every collective: tutorials/README.md):
#
# | allreduce | α term | β term | γ term |
# |---|---|---|---|
# | ring | 2(n−1)·α | 2(n−1)/n·N·β | (n−1)/n·N·γ |
# | bidirectional ring | 4(n−1)·α | 2(n−1)/n·N·β | (n−1)/n·N·γ |
# | halving-doubling | 2 lg·α | 2(n−1)/n·N·β | (n−1)/n·N·γ |
# | recursive doubling | lg·α | lg·N·β | lg·N·γ |
# | tree | (4 lg − 4)·α | (4 lg − 4)·N·β | (2 lg − 2)·N·γ |

# %%
for r in (8, 16, 32):
    lg, f = round(math.log2(r)), (r - 1) / r
    cheat = {"ring": (2 * r - 2, 2 * f, f), "bidirectional_ring": (4 * r - 4, 2 * f, f),
             "halving_doubling": (2 * lg, 2 * f, f), "recursive_doubling": (lg, lg, lg),
             "tree": (4 * lg - 4, 4 * lg - 4, 2 * lg - 2)}
    assert all(np.allclose(terms(a, r), row) for a, row in cheat.items()), r
print("the table: as cost() prices the schedules for n = 8, 16, 32")

# %% [markdown]
# At 4 KiB start-ups dominate: recursive doubling (3 rounds, the rounds bound) wins though it
# sends 3·N. At 16 MiB bytes do: halving-doubling (1.75·N, the bytes bound) wins in 6 rounds.
# Setting the two times equal, 3α + 3N(β + γ) = 6α + N(1.75β + 0.875γ), gives the crossover
#
# $$N^* = \frac{(6 - 3)\,\alpha}{(3 - 1.75)\,\beta + (3 - 0.875)\,\gamma},$$
#
# a multiple of α/β, the bytes a link moves while one message starts: halve α and every
# crossover halves. From the schedules' counts, checked against `choose`:

# %%
def crossover(fewer_rounds, fewer_bytes, cal):
    (a1, b1, g1), (a2, b2, g2) = terms(fewer_rounds), terms(fewer_bytes)
    return (a2 - a1) * cal.alpha / ((b1 - b2) * cal.beta + (g1 - g2) * cal.gamma)


star = crossover("recursive_doubling", "halving_doubling", cpu)
assert jaxcoll.choose("allreduce", n, 0.99 * star, cpu) == "recursive_doubling"
assert jaxcoll.choose("allreduce", n, 1.01 * star, cpu) == "halving_doubling"
print(f"N* = {size_label(star)} = {star / (cpu.alpha / cpu.beta):.2f} α/β")

PLOTTED = ("recursive_doubling", "halving_doubling", "ring", "tree", "double_tree")
curves = {name: np.array([dict(ranking("allreduce", n, s, cpu))[name].seconds for s in SIZES])
          for name in PLOTTED}
bounds = np.array([jaxcoll.bounds("allreduce", n, s, cpu).seconds for s in SIZES])
assert all((t >= bounds * (1 - 1e-9)).all() for t in curves.values())   # nothing beats the bound
pictures.over_sizes(SIZES, curves, bound=bounds,
                    picks=picks(lambda s: jaxcoll.choose("allreduce", n, s, cpu)),
                    title=f"allreduce on {n} ranks, α-β-γ model with the CPU calibration")

# %% [markdown]
# ## 2. The lecture's rule and warning, corrected
#
# **"Small messages: use a tree."** A tree beats the ring at small N (8 rounds against 14), but
# on 8 ranks it is never the best: recursive doubling has fewer rounds, halving-doubling fewer
# bytes. MPI libraries pick those two (Thakur, Rabenseifner and Gropp,
# [2005](https://doi.org/10.1177/1094342005051521)). NCCL uses trees across many nodes, where
# the ring's 2(n−1) rounds hurt most (section 5).
#
# **"The ring needs a lot of bandwidth."** Its bandwidth term is 2(n−1)/n·N·β: every rank sends
# and receives 2(n−1)/n·N, the fewest an allreduce can when the ranks add (`sent/N` 1.75 above,
# the bound), so it needs no more bandwidth than any other. What the claim gets right: for
# large N that term is almost all its time, so it runs at its links' rate, and its slowest
# link (one hop between nodes) paces every round, as every round waits for all n transfers.

# %%
best = np.min(list(curves.values()), axis=0)
assert (curves["tree"][:4] < curves["ring"][:4]).all() and not (curves["tree"] == best).any()
ring_terms = terms("ring")
assert ring_terms[0] == 2 * (n - 1) and np.isclose(ring_terms[1], bound.path_bytes)
print(f"tree beats ring up to {size_label(SIZES[curves['tree'] < curves['ring']].max())}; "
      f"the fastest at no size. ring: {ring_terms[0]:g} rounds, {ring_terms[1]:g}·N bytes "
      f"(the bound: {bound.rounds}, {bound.path_bytes:g}·N)")

# %% [markdown]
# **The bytes bound assumes the ranks add.** Notebook 04 derived 2(n−1)/n·N from "each rank's
# n − 1 foreign blocks must leave it, and the sums must come back". With **in-network
# reduction** the network adds: NVLS (NVLink SHARP: an H100 node's NVSwitch sums what the GPUs
# send it) and InfiniBand SHARP (switches between nodes). Each rank sends
# N and receives the sum: N each way, not 2(n−1)/n·N. nccl-tests reports
# **busbw** = algbw·2(n−1)/n, with algbw = N / time: for a ring, the rate each rank's link is
# driven at. So the ring's busbw is at most the link rate; with the switch adding, at most
# 2(n−1)/n times it. NCCL's developers quote, on 8 H100s
# ([nccl-tests#212](https://github.com/NVIDIA/nccl-tests/issues/212)), ~370 GB/s for the ring
# (`NCCL_ALGO=Ring`) and ~480 GB/s (algbw ~275 GB/s) for NVLS:

# %%
link = systems.GPUS["h100"][0]                       # GB/s each way: NCCL's effective NVLink rate
quoted = {"ring": 370, "NVLS": 480}                  # busbw, GB/s (nccl-tests#212)
limit = {"ranks add (ring)": link, "the switch adds (NVLS)": 2 * (n - 1) / n * link}
print({k: f"busbw <= {v:.0f} GB/s" for k, v in limit.items()}, "\nquoted:", quoted)
assert quoted["ring"] <= limit["ranks add (ring)"] < quoted["NVLS"] < limit["the switch adds (NVLS)"]

# %% [markdown]
# NVLS beats what any endpoint-only allreduce can reach, below its own limit. "2(n−1)/n·N"
# bounds reduction at the endpoints, as `ppermute` programs and `jaxcoll.bounds` do it.
#
# ## 3. Both directions, two axes: the ring on a torus
#
# *How to Scale Your Model* (notebook 09) prices collectives on TPU tori: a full-duplex link
# to each neighbour. Its **bidirectional ring** runs two rings, one each way, on N/2 each.
# Per directed link:

# %%
for name, links, each in (("ring", n, 2 * (n - 1) / n), ("bidirectional_ring", 2 * n, (n - 1) / n)):
    s = jaxcoll.schedule("allreduce", name, n)
    load = collections.Counter()                 # N's over each directed link (src, dst)
    for t in (t for round_ in s.rounds for t in round_):
        load[t.src, t.dst] += len(t.chunks) / s.n_chunks
    sent = lesson.traffic(s, 1.0)[0]
    assert len(load) == links and np.allclose(list(load.values()), each)
    assert np.allclose(sent, 2 * (n - 1) / n)
    print(f"{name:<18} {s.n_rounds} rounds, {len(load):>2} directed links with {each:.3f}·N "
          f"each; every rank sends {sent.max():.2f}·N")

# %% [markdown]
# Each ring allreduces N/2 in 2(n−1) steps of N/(2n), (n−1)/n·N per directed link, so
#
# $$T_\text{ring} = 2(n-1)\Big(\alpha + \frac{N}{n}\beta\Big), \qquad
#   T_\text{bidirectional} = 2(n-1)\Big(\alpha + \frac{N}{2n}\beta\Big)$$
#
# where each direction has its own link and both run at once: the β term halves. Through one
# switch port both directions share it: the ring's time. And jaxcoll's executor runs a
# round's two directions as two `ppermute`s, one after the other (`concurrent=False`):
# 4(n−1) start-ups and the ring's β term. `simulate` on 8 ranks, with round numbers
# (α = 1 µs per hop, 1 GB/s links, 16 MiB):

# %%
ALPHA, BETA, N = 1e-6, 1e-9, 16 << 20
formula = {"ring": 2 * (n - 1) * (ALPHA + N / n * BETA),
           "bidirectional_ring": 2 * (n - 1) * (ALPHA + N / (2 * n) * BETA)}
on_ring, on_switch = ring(n, alpha=ALPHA, beta=BETA), switch(n, alpha=ALPHA, beta=BETA)
print(f"{'(ms)':<19}{'formula':>8}{'ring of links':>15}{'switch':>8}{'one ppermute at a time':>24}")
for a, t in formula.items():
    s = jaxcoll.schedule("allreduce", a, n)
    sim = [jaxcoll.simulate(s, N, on_ring).seconds, jaxcoll.simulate(s, N, on_switch).seconds,
           jaxcoll.simulate(s, N, on_ring, concurrent=False).seconds]
    print(f"{a:<19}{t * 1e3:8.3f}{sim[0] * 1e3:15.3f}{sim[1] * 1e3:8.3f}{sim[2] * 1e3:24.3f}")
    assert np.isclose(sim[0], t) and np.isclose(sim[1], formula["ring"])
    assert np.isclose(sim[2], formula["ring"] + (a != "ring") * 2 * (n - 1) * ALPHA)

# %% [markdown]
# **A 2-D torus, k × k.** The scaling book reduces over one axis, then the other: a ring
# reduce-scatter along each row (k ranks, on N: (k−1)/k·N, each rank left with N/k), then an
# allreduce along each column *on N/k* (2(k−1)/k·N/k), then the allgather along the rows
# ((k−1)/k·N). Per axis pass 2(k−1)/k of what it works on, the second on N/k:
#
# $$T_{k\times k} = 4(k-1)\,\alpha + \frac{2(k-1)}{k}\Big(N + \frac{N}{k}\Big)\beta
#   = 4(k-1)\,\alpha + \frac{2(n-1)}{n}N\beta \quad (n = k^2),$$
#
# each step one hop. The bytes are the flat ring's (the bound); the gain is rounds: 4(k−1)
# against 2(n−1), where a flat ring in row order crosses two links (α twice) as a row ends.
# jaxcoll's `hierarchical` AllReduce on levels (k, k) is that schedule:

# %%
k = 4
grid = torus(k, k, alpha=ALPHA, beta=BETA)
two_axes = jaxcoll.schedule("allreduce", "hierarchical", (k, k))
flat = jaxcoll.schedule("allreduce", "ring", k * k)
assert np.isclose(2 * (k - 1) / k * (1 + 1 / k), 2 * (k * k - 1) / (k * k))
for size in (1 << 10, N):
    by_formula = {"two axes": 4 * (k - 1) * ALPHA + 2 * (k - 1) / k * (size + size / k) * BETA,
                  "flat ring": 2 * (k * k - 1) * (2 * ALPHA + size / (k * k) * BETA)}
    by_simulate = {"two axes": jaxcoll.simulate(two_axes, size, grid),
                   "flat ring": jaxcoll.simulate(flat, size, grid)}
    step = [ALPHA + size / k * BETA] * (k - 1)           # a row pass: one hop, N/k per step
    assert np.allclose(by_simulate["two axes"].round_seconds,         # the column pass on N/k:
                       step + [ALPHA + size / k**2 * BETA] * (2 * (k - 1)) + step)  # N/k² a step
    for name, t in by_formula.items():
        s = by_simulate[name]
        assert np.isclose(s.seconds, t)
        print(f"{size_label(size):>6}: {name:<9} on the {k}x{k} torus, {len(s.round_seconds):>2} "
              f"rounds: formula {t * 1e3:7.3f} ms, simulate {s.seconds * 1e3:7.3f} ms")
    assert (by_formula["flat ring"] / by_formula["two axes"] > 4) == (size < 1 << 20)

# %% [markdown]
# Formula and `simulate` agree, round by round. At 16 MiB the two schemes are within 0.2%:
# the bytes dominate, and they are equal; at 1 KiB the 2-D one is over 4x faster: 12
# start-ups against 30 rounds that each wait for a two-hop transfer.

# %% [markdown]
# ## 4. On links: a DGX H100, and what checks the model
#
# `jaxcoll.analysis.systems.dgx` builds nodes of 8 GPUs on an NVSwitch, NICs between nodes,
# with link parameters from NCCL's topology model (the module cites each). Its NVLink α, 3.4 µs,
# is NCCL's step inside one kernel. `jaxcoll.simulate` prices a schedule on them, links shared
# in a round splitting their bandwidth. The H100 numbers used from here on, and the simulated
# ring's busbw (section 2) against three published measurements:

# %%
h100 = systems.dgx("h100")
print(textwrap.fill(h100.assumptions, 96))
print(f"\n{'system':<46} {'published busbw':>16} {'predicted':>10} {'error':>7}")
for published, predicted, error in systems.validation():
    print(f"{published.system:<46} {published.busbw:>11.0f} GB/s {predicted:>10.0f} {error:>+7.1%}")
    assert abs(error) <= 0.15
    if published.topology.n == 8:   # one node: busbw is the NVLink rate put in
        gpu_kind = "a100" if "A100" in published.system else "h100"
        assert abs(predicted / systems.GPUS[gpu_kind][0] - 1) < 0.01
print("\nsources:", *(f"  {p.source}" for p, _, _ in systems.validation()), sep="\n")

# %% [markdown]
# **Which rows test the simulator?** On one node a large ring's predicted busbw is the link
# rate 1/β put in (checked above): NCCL's effective-bandwidth constants, 18 x 20.6 = 370.8 GB/s
# for H100, 12 x 20 = 240 for A100. So the H100 row is a fit (NCCL's developer quotes the same
# number) and the A100 row checks the constant (+4%). Only the **3-node row** is a validation:
# 24 ranks, 8 channels crossing NICs whose parameters (25 GB/s, an assumed α of 10 µs) were not
# fitted to it: 85 GB/s predicted, 96 measured (−12%).
#
# Every algorithm on these links (pipelined ones in the model's best number of pieces):

# %%
on_h100 = {}
for size in (64 << 10, 256 << 20):
    on_h100[size] = table("allreduce", n, size, topology=h100)
    print()
plot_terms({size_label(s): rows for s, rows in on_h100.items()},
           "allreduce on 1 x DGX H100, simulated: α term (N = 0) and the rest")
costs = {name: c for name, c, _ in on_h100[256 << 20]}
assert np.isclose(costs["bidirectional_ring"].seconds, costs["ring"].seconds)  # one port

# %% [markdown]
# On one NVSwitch every GPU pair is one hop: halving-doubling gets the ring's bytes in 6
# rounds and wins large messages, recursive doubling small ones. The crossover moved to a few
# MiB: α/β is larger here (3.4 µs at 370 GB/s).
#
# **The double tree.** NCCL presents its double binary tree as full bandwidth at a latency
# that grows with log n ([NCCL 2.4][nccl24]), yet section 1's CPU model ranks it 2.25x the
# fastest at 16 MiB (one piece). On links, pipelined, it approaches **2N·β** (each rank hears
# two children through one port; the ring: 1.75·N·β), and only at large sizes:
#
# [nccl24]: https://developer.nvidia.com/blog/massively-scale-deep-learning-training-nccl-2-4/

# %%
beta_nvlink = 1 / (systems.GPUS["h100"][0] * 1e9)
on_links = {s: dict(ranking("allreduce", n, s, topology=h100)) for s in SIZES}
ratios = {s: on_links[s]["double_tree"].seconds / (s * beta_nvlink)
          for s in (16 << 20, 256 << 20, 4 << 30)}
assert list(ratios.values()) == sorted(ratios.values(), reverse=True) and 2 < ratios[4 << 30] < 2.15
cpu_tree = {name: c for name, c, _ in large}["double_tree"].seconds / large[0][1].seconds
assert 2.2 < cpu_tree < 2.3                                          # section 1, 16 MiB
cheapest = {s: min(on_links[s], key=lambda a: on_links[s][a].seconds) for s in SIZES}
moved = min(s for s in SIZES if cheapest[s] != "recursive_doubling")
assert star < 1 << 20 < moved <= 8 << 20                             # up to a few MiB
print(f"double tree on the CPU model: {cpu_tree:.2f}x the fastest at 16 MiB; crossover: "
      f"{size_label(star)} there, {size_label(moved / 2)}..{size_label(moved)} here")
for s, r in ratios.items():
    print(f"{size_label(s):>8}: double tree ({on_links[s]['double_tree'].messages:>3} rounds) "
          f"{r:.2f}·N·β, ring {on_links[s]['ring'].seconds / (s * beta_nvlink):.2f}·N·β")

curves = {name: np.array([on_links[s][name].seconds for s in SIZES]) for name in PLOTTED}
pictures.over_sizes(SIZES, curves, bound=[jaxcoll.bounds("allreduce", n, s, topology=h100).seconds
                                          for s in SIZES],
                    picks=picks(cheapest.get),
                    title="allreduce on 1 x DGX H100 (8 GPUs on NVSwitch), on paper")

# %% [markdown]
# ## 5. 1024 GPUs in 128 nodes of 8: which allreduce, run how?
#
# 128 DGX nodes, 8 NICs each at 50 GB/s, a non-blocking fabric. Two runtimes price the same
# ring differently:
#
# - **Lock-step**, as jaxcoll's executor runs a schedule (`simulate`'s default): a round
#   starts when the one before has ended everywhere and lasts as long as its slowest transfer.
#   Each of the flat ring's 2(n−1) = 2046 rounds has a transfer crossing a NIC, so pays the
#   NIC's α. **Channels** (several rings at once, each on N/c, each leaving a node by another
#   NIC) divide the bytes' time, not those α's.
# - **Pipelined**, as NCCL runs it: one kernel, each step starting as its data arrives. NCCL's
#   tuner (`jaxcoll.analysis.nccl.predict` repeats NCCL 2.28's model) charges network latency
#   on the 2(nodes − 1) = 254 steps that cross nodes only, and prices its tree in
#   2·log₂(nodes) network hops.
#
# Lock-step first, jaxcoll's double tree in its best pieces:

# %%
big = systems.dgx("h100", 128)
print(textwrap.fill(big.assumptions, 96))
flat_ring = jaxcoll.schedule("allreduce", "ring", 1024)
CANDIDATES = {"recursive_doubling": 1024, "halving_doubling": 1024, "hierarchical": (128, 8)}
node0_nics = [i for i, name in enumerate(big.link_names)         # node 0's 8 NICs, outwards
              if name.startswith("node0.nic") and name.endswith("->fabric")]
lockstep = {}
for size in (64 << 10, 256 << 20):
    bound = jaxcoll.bounds("allreduce", 1024, size, topology=big)
    runs = {a: jaxcoll.simulate(jaxcoll.schedule("allreduce", a, shape), size, big)
            for a, shape in CANDIDATES.items()}
    runs["double_tree"] = jaxcoll.simulate(
        schedule_for("allreduce", "double_tree", 1024, size, topology=big), size, big)
    runs["ring, 1 channel"] = jaxcoll.simulate(flat_ring, size, big)
    runs["ring, 8 channels"] = jaxcoll.simulate(flat_ring, size, big, channels=8)
    times = lockstep[size] = {a: run.seconds for a, run in runs.items()}
    print(f"\n{size_label(size)} per GPU; bounds: {bound.rounds} rounds, "
          f"{bound.path_bytes / size:.2f}·N through {bound.limit}: {bound.seconds * 1e6:.0f} µs")
    for a, t in sorted(times.items(), key=lambda item: item[1]):
        print(f"  {a:<19} {t * 1e6:9.0f} µs  x{t / bound.seconds:<6.1f} the bound; "
              f"{runs[a].link_bytes()[node0_nics].max() / size:.3f}·N out through its busiest NIC")
    assert min(times, key=times.get) == ("recursive_doubling" if size < 1 << 20 else "hierarchical")
    assert times["ring, 8 channels"] < times["ring, 1 channel"]
    assert (times["double_tree"] < times["ring, 8 channels"]) == (size < 1 << 20)
through_nic = {a: run.link_bytes()[node0_nics].max() for a, run in runs.items()}
assert np.isclose(through_nic["ring, 1 channel"], 8 * through_nic["ring, 8 channels"])
assert np.isclose(through_nic["hierarchical"], 2 * 127 / 128 * size / 8)
assert np.isclose(through_nic["halving_doubling"], 8 * through_nic["hierarchical"])
alphas = jaxcoll.simulate(flat_ring, 0, big).seconds
assert np.isclose(alphas, 2046 * systems.NIC_ALPHA)
print(f"\nlock-step ring at N = 0: 2046 rounds x α_NIC {systems.NIC_ALPHA * 1e6:g} µs "
      f"= {alphas * 1e3:.1f} ms")

# %% [markdown]
# Lock-step, small messages want **recursive doubling** (10 rounds, the rounds bound), large
# ones **hierarchical**: a reduce-scatter ring inside each node, each GPU's 1/8 allreduced
# across the nodes through its own NIC, an allgather inside the node; each NIC carries
# 2·127/128·N/8. Halving-doubling sends eight times that through each NIC; the one-channel
# ring sends 2·1023/1024·N through one NIC of a node, eight channels spread it over all eight.
# In lock-step the flat ring spends 20.5 ms on α alone, so the double tree beats it at 64 KiB,
# but the 8-channel ring beats the double tree at 256 MiB.
#
# Now the ring and the tree as NCCL runs them, forced with `algorithm=` as `NCCL_ALGO` would,
# and the tuner's own pick. `cluster` takes NCCL's NIC latency (14 µs) where `dgx` assumed 10:

# %%
fabric = systems.cluster("h100", 128)
print(fabric.name)
as_nccl = {}
for size in (64 << 10, 256 << 20):
    print(f"\n{size_label(size)} per GPU")
    for forced in ("ring", "tree", None):
        p = nccl.predict("allreduce", size, fabric, algorithm=forced)
        as_nccl[size, forced] = p.seconds
        print(f"  NCCL {forced or 'tuner':<6} {p.algorithm:>10} {p.protocol:>7} "
              f"{p.channels:>3} channels {p.seconds * 1e6:8.0f} µs  busbw {p.busbw:6.1f} GB/s")
    print(f"  lock-step: double tree {lockstep[size]['double_tree'] * 1e6:.0f} µs, "
          f"ring in 8 channels {lockstep[size]['ring, 8 channels'] * 1e6:.0f} µs")
    assert as_nccl[size, "tree"] < as_nccl[size, "ring"]     # NCCL: the tree, at both sizes
tiny = nccl.predict("allreduce", 64, fabric, algorithm="ring", protocol="LL").seconds
latency = nccl.BASE_LAT["ring"][0] + 1792 * 1.0 + 254 * nccl.HW_LAT["net"]["ring"][0]  # µs
assert np.isclose(tiny * 1e6, latency, rtol=1e-3)
print(f"\nNCCL's ring latency (LL): 6.6 + 1792 x 1.0 + 254 x 2.7 µs = {latency:.0f} µs")

# %% [markdown]
# The ranking at 1,024 GPUs depends on the runtime priced. As NCCL runs them the **tree**
# beats the ring at both sizes (the tuner takes it, with NVLS inside nodes at 256 MiB);
# lock-step, the 8-channel ring beats the double tree at 256 MiB. The 20.5 ms of α is
# jaxcoll's executor, not NCCL's ring: NCCL's model charges 254 network steps, 0.7 ms with
# LL, the other 1792 steps 1 µs each (the last line). jaxcoll's double tree spans all 1024
# ranks as if flat; NCCL's runs a chain inside each node. For jaxcoll's own programs, read
# the lock-step numbers; for what NCCL will do, `nccl.predict`.

# %% [markdown]
# ## Summary
#
# - Small messages want the fewest rounds, large ones the fewest bytes; the crossover is a
#   multiple of α/β. The ring: 2(n−1)/n·N·β, the bytes optimum, in 2(n−1) start-ups.
# - Bidirectional ring: (n−1)/n·N·β where each direction has its own link, run at once; the
#   k × k torus: 4(k−1) rounds, the same bytes.
# - 1024 GPUs: lock-step, recursive doubling small and hierarchical large; as NCCL runs them,
#   its tree beats its ring at both sizes. Say which runtime a number assumes.

# %% [markdown]
# ## Try it
#
# On the DGX H100, at what N does the choice on paper switch from recursive doubling to
# halving-doubling? Predict it with section 1's formula, one NVLink message's α
# (`systems.NVLINK_ALPHA`), β (`beta_nvlink`) and γ = 0.
#
# <details><summary>Answer</summary>
#
# `3 * systems.NVLINK_ALPHA / (1.25 * beta_nvlink)`: about 2.9 MiB. On a switch a message
# crosses two links at α/2 each, so the one-β model and the links agree.
# </details>

# %%
my_answer = None          # bytes per rank

lesson.check_size(my_answer, lambda size: jaxcoll.choose(  # choose on the H100 node leaves
    "allreduce", n, size, topology=h100) != "recursive_doubling")   # recursive doubling
