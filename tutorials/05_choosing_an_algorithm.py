# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 05 · Choosing an algorithm: latency, bandwidth and the crossover
#
# The seed lecture gives one rule for choosing an AllReduce:
#
# > 但有个坑：如果数据量小，Ring 的启动开销反而大。这时候用 Tree AllReduce 更合适。
# >
# > *"But there is a catch: if the data is small, the ring's start-up cost is what hurts. Then
# > a Tree AllReduce is the better fit."*
#
# and one warning: *"Ring 算法对网络带宽要求高，如果节点间跨交换机，延迟会变大"* ("the ring
# needs a lot of network bandwidth; if the nodes sit behind different switches, latency grows").
# This notebook turns both into numbers.
#
# **You will learn**
#
# - the α-β-γ cost model, and why every algorithm is a trade between *how many `ppermute`s*
#   (α) and *how many bytes* (β);
# - where the crossover between latency-optimal and bandwidth-optimal algorithms sits, and why
#   it is proportional to α/β;
# - what the model predicts and what 8 fake CPU devices measure, and where they disagree;
# - what `algorithm="auto"` picks, and how to read `jaxcoll.explain` / `jaxcoll.choose`;
# - how `jaxcoll.calibrate` measures α, β, γ (and where its fit is fragile);
# - what changes on GPUs and across nodes: NCCL's algbw/busbw conventions, published NVLink and
#   InfiniBand figures, and when the two-level `hierarchical` algorithm wins.
#
# **Prerequisites**: Python and numpy. Notebooks 01-04 build the ring, the trees and the other
# primitives step by step; this one explains every term it uses, so it can be read on its own.
#
# **Notation.** The seed writes N for the number of ranks; here **n = number of ranks** and
# **N = bytes per rank** (the size of the buffer each rank allreduces). Sizes are binary (KiB,
# MiB); bandwidths are in GB/s = 10⁹ bytes per second, as nccl-tests and NVIDIA report them.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
import jax
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

import contextlib
import io
import math
import statistics
import tempfile
import time

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from matplotlib.ticker import FuncFormatter

import jaxcoll
from jaxcoll.bench import busbw_factor, time_alternating

n_ranks = 8
AXIS = "i"
mesh = Mesh(np.array(jax.devices()), (AXIS,))


def on_every_rank(fn):
    """jit(shard_map(fn)): rank r runs fn on row r of the input; its result is row r of the output."""
    return jax.jit(jax.shard_map(lambda rows: fn(rows[0])[None],   # rows: (1, ...) on each rank
                                 mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)))


def priced(n, nbytes, calibration):
    """{algorithm: jaxcoll.Cost} of an allreduce of nbytes per rank on n ranks, priced as auto
    prices them: the ranking jaxcoll.explain returns, with its printout thrown away."""
    with contextlib.redirect_stdout(io.StringIO()):
        return dict(jaxcoll.explain("allreduce", n, nbytes, calibration))


def human(nbytes):
    """A byte count for people: '64 B', '1 KiB', '187 KiB', '4.09 MiB'."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


print(jax.devices()[:2], "...", len(jax.devices()), "devices")

# %% [markdown]
# ## 1. The model in two numbers
#
# jaxcoll runs every algorithm as rounds of `ppermute`s. In one `ppermute` all ranks send at
# once, each at most one message (and each receives at most one); a round of a schedule is
# usually one `ppermute` (the bidirectional ring's rounds are two, one each way round). The
# **α-β-γ model** prices each `ppermute` by its *largest* transfer, since it finishes when
# that one does:
#
# $$ t = \alpha + (\text{bytes of the largest transfer})\cdot\beta \;\bigl(+\; \text{the same bytes}\cdot\gamma \text{ if the receivers add them in}\bigr) $$
#
# - **α** (seconds per `ppermute`): the start-up cost: launching the transfer, synchronising
#   with the partner. The seed's 启动开销 ("start-up cost").
# - **β** (seconds per byte): 1 / link bandwidth.
# - **γ** (seconds per byte): the cost of adding the received bytes in.
#
# An algorithm's time is the sum over its `ppermute`s, one after another. So it is summed up by
# three counts, which `jaxcoll.cost` reads off the schedule: how many `ppermute`s (each pays α),
# and how many bytes the β and γ terms charge: the largest transfer of each `ppermute`, summed,
# i.e. the bytes **on the critical path**. That is not what the busiest rank sends in total:
# in a tree, most ranks wait while one level sends, and the waiting costs time too. The last
# column gives that per-rank total for comparison (it is what `jaxcoll.explain` prints as
# "B sent"; it is not the β term). Here they are for an allreduce of N bytes per rank on 8 ranks:

# %%
N = 1 << 20  # bytes per rank; any size will do: every count below is a multiple of it
ALGORITHMS = ["naive", "ring", "tree", "double_tree", "recursive_doubling", "halving_doubling"]

print(f"allreduce on n = {n_ranks} ranks, N bytes per rank")
print(f"{'algorithm':<20} {'ppermutes':>9} {'β term':>8} {'γ term':>8} {'busiest rank sends':>19}")
print(f"{'':<20} {'(x α)':>9} {'(x N·β)':>8} {'(x N·γ)':>8} {'(x N)':>19}")
counts = {}  # name -> {"ppermutes", "beta_bytes", "gamma_bytes", "busiest_sends"}
for name in ALGORITHMS + ["bidirectional_ring"]:
    schedule = jaxcoll.schedule("allreduce", name, n_ranks)
    counts[name] = {
        "ppermutes": jaxcoll.cost(schedule, N, alpha=1, beta=0, gamma=0).messages,
        "beta_bytes": jaxcoll.cost(schedule, N, alpha=0, beta=1, gamma=0).seconds,   # β = 1: seconds = bytes
        "gamma_bytes": jaxcoll.cost(schedule, N, alpha=0, beta=0, gamma=1).seconds,  # γ = 1: likewise
        "busiest_sends": jaxcoll.cost(schedule, N, alpha=0, beta=0).bytes_sent,      # one rank's total
    }
    c = counts[name]
    print(f"{name:<20} {c['ppermutes']:>9} {c['beta_bytes'] / N:>8.3f} {c['gamma_bytes'] / N:>8.3f} "
          f"{c['busiest_sends'] / N:>19.3f}")

# The textbook formulas, checked against the schedules (n = 8, log2 n = 3):
n, log_n = n_ranks, int(math.log2(n_ranks))
ring, rd, hd, tree = (counts[a] for a in ["ring", "recursive_doubling", "halving_doubling", "tree"])
assert (ring["ppermutes"], ring["beta_bytes"], ring["gamma_bytes"]) == (2 * (n - 1), 2 * (n - 1) / n * N, (n - 1) / n * N)
assert (rd["ppermutes"], rd["beta_bytes"], rd["gamma_bytes"]) == (log_n, log_n * N, log_n * N)
assert (hd["ppermutes"], hd["beta_bytes"]) == (2 * log_n, 2 * (n - 1) / n * N)
assert counts["naive"]["ppermutes"] == 2 * (n - 1)
assert counts["bidirectional_ring"]["ppermutes"] == 2 * ring["ppermutes"]  # two ppermutes a round
assert tree["beta_bytes"] == tree["ppermutes"] * N     # every ppermute of the tree moves a whole buffer
assert tree["busiest_sends"] < tree["beta_bytes"]      # ... but no rank sends in all of them
# ... and the time they add up to, for arbitrary α, β, γ (ring: 2(n-1)α + 2(n-1)/n·Nβ + (n-1)/n·Nγ)
a, b, g = 3e-5, 2e-10, 5e-11
ring_seconds = jaxcoll.cost(jaxcoll.schedule("allreduce", "ring", n), N, alpha=a, beta=b, gamma=g).seconds
assert math.isclose(ring_seconds, 2 * (n - 1) * a + 2 * (n - 1) / n * N * b + (n - 1) / n * N * g)
rd_seconds = jaxcoll.cost(jaxcoll.schedule("allreduce", "recursive_doubling", n), N, alpha=a, beta=b, gamma=g).seconds
assert math.isclose(rd_seconds, log_n * (a + N * b + N * g))

# %% [markdown]
# Read the table as a menu of trade-offs:
#
# - **ring** sends the least any allreduce can send, 2(n-1)/n·N per rank (nccl-tests derives
#   this lower bound in [doc/PERFORMANCE.md](https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md)),
#   and all ranks send at once, so its β term is that too; but it takes 2(n-1) = 14
#   `ppermute`s one after another (only naive and the bidirectional ring have as many or more).
# - **recursive doubling** needs only log₂ n = 3 `ppermute`s: in round k every rank swaps its
#   *whole* buffer with the rank 2^k away and adds. Fewest α, but log₂ n·N bytes: the largest
#   β term among the good ones.
# - **halving-doubling** (Rabenseifner) gets ring's bytes in 2 log₂ n = 6 `ppermute`s at
#   powers of two: a reduce-scatter by recursive halving, then an allgather by doubling.
# - **tree** and **double_tree** sit between in α: 8 `ppermute`s here, 4 up the tree and 4 down
#   (a parent hears from its two children one after the other). Each moves the whole buffer
#   (tree) or half of it (double_tree, whose two trees each carry one half), so the β term is
#   8·N or 4·N, although no rank sends more than 3·N or 2·N: while one level of the tree sends,
#   the other levels wait.
# - **naive** (the seed's "Reduce then Broadcast") has ring's 14 `ppermute`s *and* the largest
#   β term: the root receives 7 whole buffers one after another, then sends 7.
# - **bidirectional_ring** sends half the data each way round the ring: the same bytes as ring,
#   but two `ppermute`s per round, so twice ring's α. It pays off where a rank can drive its
#   links to both neighbours at once, which this model, pricing one `ppermute` after another,
#   does not describe.
#
# Here is recursive doubling, the latency-optimal one, drawn (rows are ranks, a cell's stripes
# are the ranks whose data it holds, dashed arrows add into the receiver):

# %%
pictures = tempfile.mkdtemp()
path = jaxcoll.draw(jaxcoll.schedule("allreduce", "recursive_doubling", 8), f"{pictures}/rd.png")
Image(filename=str(path))

# %% [markdown]
# ## 2. Predicted time against message size: the crossover
#
# Put numbers on α, β, γ and each algorithm becomes a line `time(N)`. jaxcoll ships a
# calibration measured on 8 fake CPU devices of a shared 2-core machine
# (`jaxcoll.calibration("cpu")`). Sections 2 and 3 use its α, β, γ alone
# (`.plain()`: the textbook model); section 4 shows what `auto` adds to it. On log-log axes every line is flat
# (α-bound) at small N and rises with slope 1 (β-bound) at large N. The left panel shows the times; the right one each algorithm's time
# divided by the fastest's at that size, which makes the crossovers easy to see.

# %%
cpu = jaxcoll.calibration("cpu").plain()  # α, β, γ alone, without per-algorithm factors
print(f"shipped CPU calibration: α = {cpu.alpha * 1e6:.0f} µs, β = {cpu.beta:.3g} s/B "
      f"({1 / cpu.beta / 1e9:.2f} GB/s), γ = {cpu.gamma:.3g} s/B\n  source: {cpu.source}")

COLORS = {"naive": "tab:gray", "ring": "tab:blue", "tree": "tab:green",
          "double_tree": "tab:olive", "recursive_doubling": "tab:red",
          "halving_doubling": "tab:purple", "hierarchical": "black", "xla": "black"}
sizes = 2.0 ** np.arange(6, 28.01, 0.125)  # 64 B .. 256 MiB per rank


def predicted_curves(n, calibration, names=ALGORITHMS):
    """{algorithm: predicted seconds at each of `sizes`}, as auto prices them."""
    at_each_size = [priced(n, size, calibration) for size in sizes]
    return {name: np.array([costs[name].seconds for costs in at_each_size]) for name in names}


def auto_regions(n, calibration):
    """[(first size, algorithm auto picks from there on)] over `sizes`."""
    regions = []
    for size in sizes:
        pick = jaxcoll.choose("allreduce", n, size, calibration)
        if not regions or regions[-1][1] != pick:
            regions.append((size, pick))
    return regions


bytes_axis = FuncFormatter(lambda x, _: human(x))


def label_regions(ax, regions):
    """A dotted line where the fastest algorithm changes, and its name, written upwards."""
    for i, (start, pick) in enumerate(regions):
        if i:
            ax.axvline(start, color="k", ls=":", lw=1)
        ax.text(start * 1.15, 0.97, pick, transform=ax.get_xaxis_transform(), rotation=90,
                va="top", ha="left", fontsize=8, color=COLORS[pick])


RATIO_TOP = 5  # the right panel's y limit


def plot_curves(fig, ax_time, ax_ratio, curves, regions, title):
    best = np.min(list(curves.values()), axis=0)
    for name, t in curves.items():
        ax_time.loglog(sizes, t * 1e6, color=COLORS[name], label=name, lw=2)
        ax_ratio.semilogx(sizes, t / best, color=COLORS[name], lw=2)
    label_regions(ax_ratio, regions)
    for ax in (ax_time, ax_ratio):
        ax.xaxis.set_major_formatter(bytes_axis)
        ax.set_xticks([4.0 ** k for k in range(3, 15)])
        ax.tick_params(axis="x", labelrotation=45)
        ax.set_xlabel("bytes per rank (N)")
        ax.grid(True, which="major", alpha=0.3)
    ax_time.set_ylabel("predicted time (µs)")
    ax_ratio.set_ylabel("time / fastest algorithm's time")
    ax_ratio.set_ylim(0.9, RATIO_TOP)
    ax_time.set_title(title)
    ax_ratio.set_title("relative to the fastest; dotted: where auto switches to the named one")
    # the lines that leave the top of the right panel, said in words
    off_top = [f"{name} leaves the top:\n{(t / best).min():.1f}x to {(t / best).max():.1f}x the fastest"
               for name, t in curves.items() if (t / best).max() > RATIO_TOP]
    if off_top:
        ax_ratio.text(0.06, 0.6, "\n".join(off_top), transform=ax_ratio.transAxes,
                      va="center", fontsize=9,
                      bbox=dict(facecolor="white", edgecolor="gray", alpha=0.9))
    fig.legend(*ax_time.get_legend_handles_labels(), loc="lower center", ncol=len(curves),
               fontsize=10, frameon=False)


cpu_curves = predicted_curves(n_ranks, cpu)
cpu_regions = auto_regions(n_ranks, cpu)
fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
plot_curves(fig, left, right, cpu_curves, cpu_regions,
            f"allreduce on {n_ranks} ranks, model with the shipped CPU calibration")
plt.tight_layout(rect=(0, 0.06, 1, 1))  # room for the shared legend at the bottom
plt.show()

for (start, pick), nxt in zip(cpu_regions, cpu_regions[1:] + [(sizes[-1] * 2, None)]):
    print(f"auto picks {pick:<20} from {human(start):>10} to {human(nxt[0]):>10}")

# %% [markdown]
# (The steps in the tree lines from 16 MiB on are pipelining: above 16 MiB `auto` cuts a tree's
# message into pieces, one more per 16 MiB, up to 8.)
#
# The picture is the lecture's rule made precise, with one correction. **Small messages want
# few `ppermute`s; large messages want few bytes.** At the small end the winner is the
# algorithm with the fewest `ppermute`s; at the large end, the one with the smallest β term
# (with the fewest `ppermute`s among those). Checked:

# %%
small_winner = cpu_regions[0][1]
large_winner = cpu_regions[-1][1]
fewest_ppermutes = min(counts[a]["ppermutes"] for a in ALGORITHMS)
fewest_bytes = min(counts[a]["beta_bytes"] for a in ALGORITHMS)
assert counts[small_winner]["ppermutes"] == fewest_ppermutes
assert counts[large_winner]["beta_bytes"] == fewest_bytes
assert counts[large_winner]["ppermutes"] == min(counts[a]["ppermutes"] for a in ALGORITHMS
                                                if counts[a]["beta_bytes"] == fewest_bytes)
print(f"small messages: {small_winner} ({counts[small_winner]['ppermutes']} ppermutes)")
print(f"large messages: {large_winner} (β term {counts[large_winner]['beta_bytes'] / N:.3f}·N bytes, "
      f"{counts[large_winner]['ppermutes']} ppermutes)")

# %% [markdown]
# **Where is the crossover?** Set the two times equal. Recursive doubling costs
# 3(α + Nβ + Nγ), halving-doubling 6α + 1.75·Nβ + 0.875·Nγ; they meet at
#
# $$ N^* = \frac{3\alpha}{1.25\,\beta + 2.125\,\gamma} $$
#
# of the order of **α/β**: the number of bytes a link moves in the time one `ppermute` starts
# up. Every crossover of this model has that form (a difference in `ppermute` counts times α,
# over a difference in β and γ terms), so *halve α and all the crossovers move down by half*.
# Checked on the shipped calibration:

# %%
def rd_hd_crossover(calibration):
    return 3 * calibration.alpha / (1.25 * calibration.beta + 2.125 * calibration.gamma)


crossing = rd_hd_crossover(cpu)
assert jaxcoll.choose("allreduce", 8, 0.99 * crossing, cpu) == "recursive_doubling"
assert jaxcoll.choose("allreduce", 8, 1.01 * crossing, cpu) == "halving_doubling"
print(f"α/β = {human(cpu.alpha / cpu.beta)}; recursive doubling -> halving-doubling at "
      f"N* = {human(crossing)} = {crossing / (cpu.alpha / cpu.beta):.2f} α/β")

# %% [markdown]
# **And the seed's tree?** The lecture says to switch from ring to *tree* for small messages.
# The model agrees that tree beats ring below some size, since a tree needs fewer `ppermute`s
# than a ring (8 against 14 here; O(log n) against 2(n-1) in general). But on 8 ranks the tree
# is never the *best* allreduce in this model: recursive doubling needs fewer `ppermute`s
# still, and halving-doubling moves fewer bytes. Computed:

# %%
fastest_time = np.min(list(cpu_curves.values()), axis=0)  # at each size
tree_beats_ring = sizes[cpu_curves["tree"] < cpu_curves["ring"]]
tree_best = sizes[cpu_curves["tree"] == fastest_time]
assert len(tree_beats_ring) > 0 and sizes[0] in tree_beats_ring  # the seed is right about ring
print(f"tree is faster than ring for N up to {human(tree_beats_ring.max())} per rank")
print(f"sizes (of {len(sizes)}) at which tree is the fastest allreduce: {len(tree_best)}")
assert len(tree_best) == 0

# %% [markdown]
# So the seed's rule is right against the ring and incomplete as a rule: MPI libraries pick
# recursive doubling for short allreduces and Rabenseifner's halving-doubling for long ones
# (Thakur, Rabenseifner and Gropp, [*Optimization of Collective Communication Operations in
# MPICH*](https://doi.org/10.1177/1094342005051521), IJHPCA 19(1), 2005). NCCL uses trees for a different
# reason: across *many nodes*, a tree's latency grows with log n while a ring's grows with n,
# and its *double* binary tree keeps the full bandwidth
# ([NCCL 2.4 blog](https://developer.nvidia.com/blog/massively-scale-deep-learning-training-nccl-2-4/)).
# The pairs of recursive doubling and halving-doubling also talk to partners n/2 ranks away,
# which on a real network may sit behind another switch, exactly the seed's warning; a ring
# only ever talks to its neighbours, but a ring that spans nodes always has a neighbour pair
# across a node boundary, so every one of its 2(n−1) steps runs at network speed (section 7).
# The one-α-one-β model cannot see any of that. Section 7 adds a second link type to it.

# %% [markdown]
# ## 3. Measured on the fake CPU devices
#
# Now the algorithms run on the 8 fake devices, at four sizes on both sides of the predicted
# crossover (double_tree is left out to keep the notebook quick). Each algorithm is one jitted
# program holding one allreduce (`on_every_rank`, defined at the top: row r of the input is rank
# r's buffer). One collective per program also keeps clear of a CPU-only jaxlib 0.10 bug, in
# which independent collectives of one program can crash it (the README's
# [sharp bit](../README.md#sharp-bit-jaxlib-010-on-cpu-runs-independent-collectives-into-each-other)).
# Each result, and `lax.psum`'s (`algorithm="xla"`), is checked bit for bit against the exact
# sum, on integer-valued inputs whose sums are exact in any order. Then the programs are timed
# in alternation (`jaxcoll.bench.time_alternating`: every round calls each program once, the
# first one rotating, so drift hits all alike), and we keep medians.

# %%
MEASURED = ["xla", "ring", "tree", "recursive_doubling", "halving_doubling"]
MEASURE_SIZES = [1 << 10, 1 << 15, 1 << 19, 1 << 22]  # bytes per rank: 1 KiB, 32 KiB, 512 KiB, 4 MiB
ITERS = 5  # few: each size compiles one program per algorithm, which is most of the time


def allreduce_program(algorithm):
    """One allreduce on every rank: (n_ranks, count) -> (n_ranks, count), each row the sum."""
    return on_every_rank(lambda v: jaxcoll.allreduce(v, AXIS, algorithm=algorithm))


programs = {name: allreduce_program(name) for name in MEASURED}
rng = np.random.default_rng(0)
measured = {}  # (algorithm, size) -> median seconds
began = time.perf_counter()
for size in MEASURE_SIZES:
    count = size // 4  # float32 elements per rank
    values = rng.integers(-8, 9, size=(n_ranks, count)).astype(np.float32)  # (n_ranks, count): exact sums
    x = jax.device_put(values, NamedSharding(mesh, P(AXIS)))
    expected = np.tile(values.sum(axis=0), (n_ranks, 1))  # (n_ranks, count): every rank gets the sum
    for name, program in programs.items():  # compiles, and checks every result bit for bit
        np.testing.assert_array_equal(np.asarray(program(x)), expected)
    times = time_alternating(programs, x, iters=ITERS)
    for name in MEASURED:
        measured[name, size] = statistics.median(times[name])
print(f"{len(MEASURED)} algorithms x {len(MEASURE_SIZES)} sizes checked against the exact sum "
      f"and timed in {time.perf_counter() - began:.1f} s")

print(f"\n{'bytes/rank':>10} " + " ".join(f"{name:>18}" for name in MEASURED) + "   (median ms)")
for size in MEASURE_SIZES:
    print(f"{human(size):>10} " + " ".join(f"{measured[name, size] * 1e3:>18.2f}"
                                                 for name in MEASURED))

# %%
fig, ax = plt.subplots(figsize=(10, 5.5))
for name in MEASURED:
    if name != "xla":
        ax.loglog(sizes, cpu_curves[name] * 1e3, color=COLORS[name], lw=1.5, alpha=0.6)
    ax.loglog(MEASURE_SIZES, [measured[name, s] * 1e3 for s in MEASURE_SIZES], "o" if
              name != "xla" else "s--", color=COLORS[name], ms=7, label=f"{name} (measured)")
ax.set_xlim(2 ** 9, 2 ** 23)
ax.set_ylim(0.1, 200)
ax.set_xticks(MEASURE_SIZES, [human(s) for s in MEASURE_SIZES])  # ticks at the measured sizes
ax.minorticks_off()
ax.set_xlabel("bytes per rank (N)")
ax.set_ylabel("time per allreduce (ms)")
ax.set_title(f"allreduce on {n_ranks} fake CPU devices: measured (markers) vs model (lines)\n"
             "xla = lax.psum, one XLA op, no model line")
ax.grid(True, which="major", alpha=0.3)
ax.legend(fontsize=9, ncol=2)
plt.tight_layout()
plt.show()

# %% [markdown]
# What the measurement says, size by size (every sentence below is computed from the numbers
# above, so it stays true when you re-run the notebook):

# %%
ours = [name for name in MEASURED if name != "xla"]
agree = agree_auto = 0
print(f"{'bytes/rank':>10} {'measured fastest':>20} {'model picks':>20} {'pick / fastest':>15} "
      f"{'pick / xla':>11}   {'auto (section 4) picks':>24}")
for size in MEASURE_SIZES:
    fastest = min(ours, key=lambda name: measured[name, size])
    pick = jaxcoll.choose("allreduce", n_ranks, size, cpu)
    auto_pick = jaxcoll.choose("allreduce", n_ranks, size)  # with the measured factors
    agree += fastest == pick
    agree_auto += fastest == auto_pick
    print(f"{human(size):>10} {fastest:>20} {pick:>20} "
          f"{measured[pick, size] / measured[fastest, size]:>15.2f} "
          f"{measured[pick, size] / measured['xla', size]:>11.2f}   "
          f"{auto_pick:>18} {measured[auto_pick, size] / measured[fastest, size]:5.2f}x")
print(f"\nThe model's pick was the measured fastest at {agree} of {len(MEASURE_SIZES)} sizes; "
      f"auto's, with the per-algorithm factors of section 4, at {agree_auto}.")

predicted = {size: priced(n_ranks, size, cpu) for size in MEASURE_SIZES}
ratios = {name: [measured[name, s] / predicted[s][name].seconds for s in MEASURE_SIZES]
          for name in ours}
print("measured / predicted, per algorithm, from the smallest size to the largest:")
for name in ours:
    print(f"  {name:<20} " + "  ".join(f"{r:5.2f}" for r in ratios[name]))

big = MEASURE_SIZES[-1]
predicted_ratio = predicted[big]["ring"].seconds / predicted[big]["halving_doubling"].seconds
measured_ratio = measured["ring", big] / measured["halving_doubling", big]
assert (cpu_curves["halving_doubling"] < cpu_curves["ring"]).all()  # the model, at every size
print(f"\nAt {human(big)}: the model says ring takes {predicted_ratio:.2f}x halving-doubling's "
      f"time; measured, it takes {measured_ratio:.2f}x.")
small = MEASURE_SIZES[0]
small_pick = jaxcoll.choose("allreduce", n_ranks, small, cpu)
psum_factor = measured[small_pick, small] / measured["xla", small]
print(f"At {human(small)}, the model's pick ({small_pick}, {counts[small_pick]['ppermutes']} ppermutes) "
      + (f"takes {psum_factor:.1f}x the time of lax.psum (one XLA operation)." if psum_factor >= 1 else
         f"takes {psum_factor:.2f}x the time of lax.psum: faster, this run."))

# %% [markdown]
# ### Where the model and the fake devices disagree
#
# Fake CPU devices are threads of one process sharing one memory system, not GPUs on wires.
# What that does to the comparison (see also
# [bench/MODEL.md](../bench/MODEL.md), which swept 64 B to 64 MiB):
#
# - **Small messages are ranked right.** Time is α-bound there, and the ranking by `ppermute`
#   count (recursive doubling < halving-doubling < trees < ring) typically shows up in the
#   measurement. The absolute level moves with the machine's load: on fake devices α is a
#   thread rendezvous, calibrated on a shared 2-core machine, and the first column of
#   measured / predicted ratios shows how far the machine that ran this notebook is from that
#   calibration.
# - **`lax.psum` typically beats every jaxcoll schedule at small sizes** (the last line above
#   gives the factor for this run), because it is *one* XLA operation, whatever n is, while the
#   best jaxcoll schedule is 3 `ppermute`s, each paying α. The model has no line for it; on
#   GPUs, NCCL likewise runs a whole allreduce in one kernel launch.
# - **Large messages are where they part.** β was measured with all 8 ranks sending at once
#   through the same memory. A round in which only a few ranks send (the trees) moves its bytes
#   faster than β says, and large single messages (halving-doubling's first round sends N/2,
#   recursive doubling sends all of N every round) run slower per byte than ring's N/8 chunks:
#   the same effect as the README's
#   [training benchmark](../README.md#training-buckets-mixed-precision-gradients-zero), where
#   one 25 MiB leaf took longer than ten 2.5 MiB ones. Where that happens, the measured fastest
#   at the largest sizes is the ring, although the model prices halving-doubling below it at
#   every size (same bytes, fewer `ppermute`s). We have not profiled it further; treat it as a property of fake devices,
#   not of the algorithms.
#
# On a real network each link has its own bandwidth, and the per-link β is the right model:
# that is what sections 6 and 7 use.

# %% [markdown]
# ## 4. What `auto` picks, and why
#
# `algorithm="auto"` (the default of every jaxcoll collective) prices every algorithm with the
# current calibration and runs the cheapest. It decides **at trace time**, from the static size
# of each buffer (each bucket, for a pytree), so it costs nothing when the program runs.
#
# The shipped calibration holds one more thing than α, β, γ: for each algorithm, two
# *measured factors*, one on its α part and one on its β-γ part
# (`jaxcoll.calibrate(n, primitives=...)` times every algorithm at 2 KiB, 128 KiB and 8 MiB
# and fits them). They carry what the schedule alone cannot see: on fake devices a round in
# which one rank sends (naive, tree) moves its bytes faster than β says, because the
# "links" are one shared memory; and rounds the executor cannot put in a loop copy the whole
# buffer, which the model does not charge. `auto` ranks with the factors; the textbook model of
# sections 2-3 is the same calibration with factors 1 (`.plain()`). `jaxcoll.explain` prints
# the ranking `auto` chooses from, with each algorithm's factors:

# %%
small_ranking = jaxcoll.explain("allreduce", n_ranks, 4 << 10)
print()
large_ranking = jaxcoll.explain("allreduce", n_ranks, 16 << 20)
assert small_ranking[0][0] == jaxcoll.choose("allreduce", n_ranks, 4 << 10)

# %% [markdown]
# Each line gives the predicted time, its ratio to the fastest, the `ppermute`s ("messages"),
# and what the *busiest rank* sends and reduces over the whole schedule ("B sent", "B
# reduced"): the last column of section 1's table, not the bytes the β term charges. For the
# tree, for instance, "B sent" is 3·N while the time counts 8·N·β.
#
# Proof that `auto` *is* that choice: a program with `algorithm="auto"` lowers to exactly the
# same program as one with the algorithm `choose` names (lowering traces it; nothing is
# compiled or run):

# %%
for size in (4 << 10, 16 << 20):
    spec = jax.ShapeDtypeStruct((n_ranks, size // 4), jnp.float32,  # (n_ranks, count)
                                sharding=NamedSharding(mesh, P(AXIS)))
    chosen = jaxcoll.choose("allreduce", n_ranks, size)
    auto_text = allreduce_program("auto").lower(spec).as_text()
    assert auto_text == allreduce_program(chosen).lower(spec).as_text()
    assert auto_text != allreduce_program("ring" if chosen != "ring" else "tree").lower(spec).as_text()
    print(f"{human(size):>8} per rank: auto lowers to the same program as {chosen!r}")

# %% [markdown]
# `auto` never picks `hierarchical` (it needs a two-level axis and the model has one α and one
# β for every link; section 7 shows when you should pick it yourself), and it never picks `xla`:
# `auto` chooses among jaxcoll's schedules. If you only want the fastest allreduce on fake
# devices, `lax.psum` is it; jaxcoll is for seeing, checking and changing what an allreduce does.

# %% [markdown]
# ## 5. Calibrating on the devices at hand
#
# `jaxcoll.calibrate(n)` measures α and β with a ring of `ppermute`s over a sweep of sizes
# (8 steps in a `fori_loop`, so Python's dispatch cost is spread over them) and γ with a local
# add, then fits `time = a + b·size` to the *relative* errors (each point weighted by
# 1/time). The sizes span four decades; a plain least-squares line would be decided by the
# largest points, whose timing noise (milliseconds) dwarfs α (a fraction of a millisecond).
# Weighted, the small sizes decide α and the large ones β. We run it twice: over the default
# sweep, and over small sizes only. It compiles two small programs per size, so check its cost
# too:

# %%
began = time.perf_counter()
fresh = jaxcoll.calibrate(n_ranks, repeats=3)  # default sizes: 256 B .. 4 MiB
calibrate_seconds = time.perf_counter() - began
began = time.perf_counter()
alpha_only = jaxcoll.calibrate(n_ranks, sizes=(256, 1024, 4096), repeats=3)  # small sizes: α only
alpha_seconds = time.perf_counter() - began

print(f"jaxcoll.calibrate({n_ranks}, repeats=3) took {calibrate_seconds:.1f} s; small sizes only: {alpha_seconds:.1f} s")
print(f"{'':<26} {'α (µs)':>8} {'β (s/B)':>10} {'γ (s/B)':>10}")
for label, c in [("shipped cpu.json", cpu), ("calibrate() now", fresh),
                 ("calibrate(256 B..4 KiB)", alpha_only)]:
    print(f"{label:<26} {c.alpha * 1e6:>8.1f} {c.beta:>10.3g} {c.gamma:>10.3g}")

print(f"\nα: the full sweep gives {fresh.alpha / alpha_only.alpha:.2f}x the small sizes' value, "
      f"{fresh.alpha / cpu.alpha:.2f}x the shipped one.")
print(f"β: the full sweep gives {fresh.beta / cpu.beta:.2f}x the shipped value. The small sizes "
      f"cannot see β: at 4 KiB the β term is {4096 * fresh.beta * 1e6:.1f} µs next to "
      f"α = {fresh.alpha * 1e6:.0f} µs, so their β ({alpha_only.beta:.3g} s/B) is noise.")
print(f"auto's switch from recursive doubling to halving-doubling: shipped {human(rd_hd_crossover(cpu))}, "
      f"this calibration {human(rd_hd_crossover(fresh))}")

# %% [markdown]
# **Reading a calibration.** A fit is only as good as its sweep:
#
# - α comes from the small sizes and β from the large ones, so a sweep of small sizes alone
#   pins α and says nothing about β (the third line's β is whatever the noise made it);
# - on fake devices, large messages run slower per byte (section 3), so β also depends on
#   where the sweep ends: calibrate over the range of sizes you will actually send;
# - fake devices share a machine with everything else on it, so α and β move from run to run
#   with its load; compare with the shipped numbers before trusting a new calibration;
# - then make `auto` use it, and keep it:
#
# ```python
# jaxcoll.set_calibration(fresh)          # auto uses it from now on, for fresh.backend
# fresh.save("my_cluster.json")           # and jaxcoll.Calibration.load(...) later
# ```
#
# We do not call `set_calibration` here, so the rest of the notebook uses the shipped numbers.

# %% [markdown]
# ## 6. On GPUs: busbw, and what the hardware can do
#
# GPU benchmarks of collectives are reported the way
# [nccl-tests](https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md) does:
#
# - **algbw** = S / t: the buffer size over the time.
# - **busbw** = algbw × a factor per collective: 2(n-1)/n for allreduce, (n-1)/n for
#   reduce-scatter, allgather and alltoall, 1 for broadcast and reduce. The factor is the
#   fraction of the data every rank must send at the least, so busbw is the rate at which the
#   busiest link was actually driven, comparable to the hardware's link bandwidth whatever n is.
#
# In the α-β-γ model this has a neat consequence: for the ring allreduce,
# t → N·(2(n-1)/n·β + (n-1)/n·γ) at large N, so **busbw → 1/(β + γ/2)**: the link bandwidth,
# less the time spent adding. Here is the model's nccl-tests table for the ring and for auto's
# pick on one 8-GPU node with the GPU numbers jaxcoll ships (`gpu.json`, an *estimate*, not a
# measurement):

# %%
gpu = jaxcoll.calibration("gpu")
print(f"shipped GPU estimate: α = {gpu.alpha * 1e6:.0f} µs, 1/β = {1 / gpu.beta / 1e9:.0f} GB/s, "
      f"1/γ = {1 / gpu.gamma / 1e9:.0f} GB/s\n  source: {gpu.source}\n")
factor = busbw_factor("allreduce", n_ranks)
print(f"{'size':>10} {'algorithm':>20} {'time (µs)':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}")
for size in [1 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 28, 1 << 32]:
    for name in dict.fromkeys(["ring", jaxcoll.choose("allreduce", n_ranks, size, gpu)]):
        t = priced(n_ranks, size, gpu)[name].seconds
        print(f"{human(size):>10} {name:>20} {t * 1e6:>10.1f} {size / t / 1e9:>11.2f} "
              f"{size / t * factor / 1e9:>11.2f}")

ceiling = 1 / (gpu.beta + gpu.gamma / 2)
ring_busbw = (1 << 36) / priced(n_ranks, 1 << 36, gpu)["ring"].seconds * factor
assert math.isclose(ring_busbw, ceiling, rel_tol=1e-3)
assert gpu.alpha / gpu.beta > cpu.alpha / cpu.beta  # used in the text below
assert gpu.alpha == 15e-6                            # likewise
print(f"\nring busbw at 64 GiB: {ring_busbw / 1e9:.1f} GB/s; the model's ceiling 1/(β + γ/2) = "
      f"{ceiling / 1e9:.1f} GB/s")
print(f"GPU estimate: α/β = {human(gpu.alpha / gpu.beta)} (CPU: {human(cpu.alpha / cpu.beta)}); "
      f"recursive doubling -> halving-doubling at {human(rd_hd_crossover(gpu))} "
      f"(CPU: {human(rd_hd_crossover(cpu))})")

# %% [markdown]
# What gpu.json's α = 15 µs stands for: jaxcoll's cost per `ppermute` (one XLA
# collective-permute) under XLA:GPU, launch plus hop, an estimate. It is not NCCL's internal
# per-hop latency, which NCCL's own tuning model puts at a few µs or less over NVLink, on top
# of a base latency per collective (the `hwLat` and `baseLat` tables in
# [src/graph/tuning.cc](https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc)):
# NCCL runs a whole collective in one kernel, while jaxcoll launches every `ppermute`.
#
# Relative to its bandwidth, a GPU link has a *larger* α than a fake CPU device (α/β above), so
# on GPUs the latency-optimal algorithms win up to much bigger messages: the crossover moves
# up by the ratio of the two α/β.
#
# **Published figures, for context** (not measured here):
#
# - H100 SXM: NVLink 4 at 900 GB/s per GPU, counting both directions
#   ([NVIDIA H100 page](https://www.nvidia.com/en-us/data-center/h100/)), i.e. 450 GB/s each
#   way. An NCCL maintainer explains that with protocol overhead (about 20%) NCCL gets about
#   **370 GB/s busbw** over NVLink with the ring, and about **480 GB/s** for allreduce on 8 GPUs
#   with NVLink SHARP, where the NVSwitch does the additions, so busbw can exceed the wire rate
#   ([nccl-tests #212](https://github.com/NVIDIA/nccl-tests/issues/212)).
# - Between nodes, a DGX H100/H200 has eight single-port ConnectX-7 NICs of up to 400 Gb/s for
#   the compute fabric ([DGX BasePOD reference architecture](https://docs.nvidia.com/dgx-basepod/reference-architecture-infrastructure-foundation-enterprise-ai/latest/core-components.html)),
#   one per GPU; an NVIDIA engineer gives **48-49 GB/s** per NIC as what NDR 400 Gb/s achieves
#   ([nccl-tests #267](https://github.com/NVIDIA/nccl-tests/issues/267)).
#
# So the shipped `gpu.json` (about 150 GB/s) is a cautious estimate of the NVLink β, and a link
# between nodes is roughly an order of magnitude slower than NVLink, which is what the next
# section is about.

# %% [markdown]
# ## 7. Across nodes: two kinds of link, and `hierarchical`
#
# The one-β model treats every pair of ranks alike. Real clusters have fast links inside a
# node and slow ones between nodes. We extend the model with a second link type: a `ppermute`
# in which *any* transfer crosses a node boundary is priced at the slow link's α and β (it
# finishes when its slowest transfer does), the others at the fast link's. Each rank sends at
# most one message per `ppermute`, so with one NIC per GPU every crossing transfer has a NIC to
# itself.
#
# **The cluster below is an assumption, for illustration:** 4 nodes × 8 GPUs; inside a node
# α = 15 µs (jaxcoll's GPU estimate) and 370 GB/s (the NCCL ring figure above); between
# nodes α = 30 µs (our guess: a network hop costs more than an NVLink one) and 48 GB/s per GPU
# (the NDR figure above); γ from the GPU estimate. The model is jaxcoll's, one `ppermute`
# after another, with nothing else competing for the links.

# %%
from jaxcoll.schedules import split_round  # how jaxcoll.cost cuts a round into ppermutes

NODES, GPUS_PER_NODE = 4, 8
NVLINK = jaxcoll.Calibration(alpha=15e-6, beta=1 / 370e9, gamma=gpu.gamma, backend="gpu",
                             source="ASSUMED: NVLink inside a node")
NETWORK = jaxcoll.Calibration(alpha=30e-6, beta=1 / 48e9, gamma=gpu.gamma, backend="gpu",
                              source="ASSUMED: one 400 Gb/s NIC per GPU between nodes")


def two_level_seconds(schedule, nbytes, gpus_per_node, intra, inter):
    """jaxcoll.cost's α-β-γ sum, but a ppermute with a transfer between nodes pays `inter`."""
    chunk = nbytes / schedule.n_chunks
    seconds = 0.0
    for round_ in schedule.rounds:
        for matching in split_round(round_):  # one ppermute
            crosses = any(t.src // gpus_per_node != t.dst // gpus_per_node for t in matching)
            link = inter if crosses else intra
            moved = max(len(t.chunks) for t in matching) * chunk
            seconds += link.alpha + moved * link.beta + (moved * link.gamma if matching[0].reduce else 0)
    return seconds


def cluster_schedule(name, nodes, gpus_per_node, nbytes):
    n = nodes * gpus_per_node
    if name == "hierarchical":
        return jaxcoll.schedule("allreduce", "hierarchical", (nodes, gpus_per_node))
    pieces = min(8, max(1, math.ceil(nbytes / (16 << 20)))) if "tree" in name else 1  # as auto does
    return jaxcoll.schedule("allreduce", name, n, pieces=pieces)


# With one kind of link, this is exactly jaxcoll.cost:
for name in ALGORITHMS + ["hierarchical"]:
    sched = cluster_schedule(name, NODES, GPUS_PER_NODE, 1 << 20)
    assert math.isclose(two_level_seconds(sched, 1 << 20, GPUS_PER_NODE, NVLINK, NVLINK),
                        jaxcoll.cost(sched, 1 << 20, alpha=NVLINK.alpha, beta=NVLINK.beta,
                                     gamma=NVLINK.gamma).seconds)
print("two_level_seconds == jaxcoll.cost when both links are the same: checked")

# %%
def cluster_curves(nodes, gpus_per_node, names):
    return {name: np.array([two_level_seconds(cluster_schedule(name, nodes, gpus_per_node, s),
                                              s, gpus_per_node, NVLINK, NETWORK)
                            for s in sizes])
            for name in names}


def winners(curves):
    """[(first size, fastest algorithm from there on)] over `sizes`."""
    names = list(curves)
    best = np.argmin(np.array([curves[name] for name in names]), axis=0)
    return [(sizes[i], names[best[i]]) for i in range(len(sizes)) if i == 0 or best[i] != best[i - 1]]


# On one node, hierarchical with (1, 8) is just the ring (the same line): left out there.
one_node = cluster_curves(1, 8, ALGORITHMS)      # 8 GPUs, all on NVLink
four_nodes = cluster_curves(NODES, GPUS_PER_NODE, ALGORITHMS + ["hierarchical"])
fig, axes = plt.subplots(1, 2, figsize=(14, 5.5), sharey=True)
for ax, curves, title in [(axes[0], one_node, "1 node x 8 GPUs (NVLink only)"),
                          (axes[1], four_nodes, f"{NODES} nodes x {GPUS_PER_NODE} GPUs (NVLink + network)")]:
    for name, t in curves.items():
        ax.loglog(sizes, t * 1e6, color=COLORS[name], lw=2.5 if name == "hierarchical" else 1.8,
                  ls="--" if name == "hierarchical" else "-", label=name)
    label_regions(ax, winners(curves))
    ax.xaxis.set_major_formatter(bytes_axis)
    ax.set_xticks([4.0 ** k for k in range(3, 15)])
    ax.tick_params(axis="x", labelrotation=45)
    ax.set_xlabel("bytes per rank (N)")
    ax.set_title(f"allreduce, ASSUMED cluster: {title}\ndotted: where the fastest changes (to the named one)", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
axes[0].text(0.1, 0.6, "hierarchical is not drawn here:\non one node it is the ring",
             transform=axes[0].transAxes, va="center", fontsize=9,
             bbox=dict(facecolor="white", edgecolor="gray", alpha=0.9))
axes[0].set_ylabel("predicted time (µs)")
fig.legend(*axes[1].get_legend_handles_labels(), loc="lower center", ncol=len(four_nodes),
           fontsize=10, frameon=False)
plt.tight_layout(rect=(0, 0.06, 1, 1))  # room for the shared legend at the bottom
plt.show()

for label, curves in [("1 node x 8", one_node), (f"{NODES} nodes x {GPUS_PER_NODE}", four_nodes)]:
    print(label + ": " + ", then ".join(f"{name} from {human(start)}"
                                       for start, name in winners(curves)))
assert winners(four_nodes)[-1][1] == "hierarchical"   # big messages across nodes: hierarchical
assert winners(four_nodes)[0][1] == "recursive_doubling"  # tiny ones: fewest ppermutes still wins
hierarchical_one_node = cluster_curves(1, 8, ["hierarchical"])["hierarchical"]
np.testing.assert_allclose(hierarchical_one_node, one_node["ring"], rtol=1e-12)  # why it is not drawn

# On one node, where does recursive doubling hand over to halving-doubling?
one_node_switch = next(start for start, name in winners(one_node) if name == "halving_doubling")
assert rd_hd_crossover(NVLINK) <= one_node_switch < rd_hd_crossover(NVLINK) * 2 ** 0.125  # grid step
print(f"\none node: recursive doubling -> halving-doubling at {human(rd_hd_crossover(NVLINK))} with "
      f"1/β = {1 / NVLINK.beta / 1e9:.0f} GB/s; section 6, with gpu.json's {1 / gpu.beta / 1e9:.0f} GB/s: "
      f"{human(rd_hd_crossover(gpu))}")

# %% [markdown]
# On one node the curves are what `auto` would rank with the NVLink numbers. The switch from
# recursive doubling to halving-doubling sits at a larger size than in section 6 (last line
# above), although α is the same 15 µs: this cluster assumes 370 GB/s instead of gpu.json's
# (about 150), so β is smaller and α/β larger. α/β again.
#
# Across nodes the ranking changes. At large sizes `hierarchical`
# wins by a wide margin, and the reason is in **how many bytes cross the slow links**. It
# reduce-scatters inside each node, so each GPU holds 1/8 of its node's sum, runs the
# allreduce across nodes on that 1/8 only (the 8 GPUs of a node do this at once, each over
# its own NIC), and allgathers inside the node again. Count the bytes each GPU's NIC carries:

# %%
def bytes_between_nodes(schedule, nbytes, gpus_per_node):
    """The most bytes any one rank sends to another node."""
    chunk = nbytes / schedule.n_chunks
    sent = np.zeros(schedule.n_ranks)
    for round_ in schedule.rounds:
        for t in round_:
            if t.src // gpus_per_node != t.dst // gpus_per_node:
                sent[t.src] += len(t.chunks) * chunk
    return sent.max()


M = 1 << 20
n_all = NODES * GPUS_PER_NODE
print(f"N = {human(M)} per GPU, {NODES} nodes x {GPUS_PER_NODE} GPUs:")
between_nodes = {name: bytes_between_nodes(cluster_schedule(name, NODES, GPUS_PER_NODE, M), M, GPUS_PER_NODE)
                 for name in ["ring", "recursive_doubling", "halving_doubling", "hierarchical"]}
for name, sent in between_nodes.items():
    print(f"  {name:<20} the busiest NIC sends {sent / M:.3f} N")
assert between_nodes["hierarchical"] == 2 * (NODES - 1) / n_all * M   # 2(nodes-1)/n of the data
assert between_nodes["ring"] == 2 * (n_all - 1) / n_all * M            # every ring step crosses somewhere

# %% [markdown]
# The flat ring is the seed's warning in numbers: every one of its 2(n−1) steps has some
# transfer crossing a node boundary, so every step runs at network speed, and a single ring
# drives only one NIC per node. This is the jaxcoll flat ring, not what NCCL does: NCCL runs
# many rings at once ("channels"), each leaving the node through a different NIC, so all eight
# NICs work. An NVIDIA engineer reports 192 GB/s allreduce busbw between DGX A100 nodes with
# 8 × 200 Gb/s NICs, about eight NICs' worth
# ([quoted in nccl #1576](https://github.com/NVIDIA/nccl/issues/1576)). With `ppermute`s, the
# two-level `hierarchical` schedule is how you keep every NIC busy.
#
# `hierarchical` runs on a mesh with two axes, `(node, gpu)`; you pass it explicitly, since
# `auto` never picks it. On the fake devices, 2 "nodes" × 4 "GPUs" (correctness only: every
# fake link is the same):

# %%
mesh2 = Mesh(np.array(jax.devices()).reshape(2, 4), ("node", "gpu"))  # (2 nodes, 4 GPUs each)
hier = jax.jit(jax.shard_map(
    lambda x: jaxcoll.allreduce(x, ("node", "gpu"), algorithm="hierarchical"),
    mesh=mesh2, in_specs=P(("node", "gpu")), out_specs=P(("node", "gpu"))))
values = rng.integers(-8, 9, size=8 * 12).astype(np.float32)  # 12 values per rank
result = np.asarray(hier(jax.device_put(values, NamedSharding(mesh2, P(("node", "gpu"))))))
np.testing.assert_array_equal(result, np.tile(values.reshape(8, 12).sum(axis=0), 8))
print("hierarchical allreduce on a 2 x 4 mesh == the exact sum on every rank")
print(jaxcoll.schedule("allreduce", "hierarchical", (2, 4)))

# %% [markdown]
# In the printed schedule, rounds 3 and 4 are the only ones in which ranks talk across nodes
# (0↔4, 1↔5, ...), and each of those moves one chunk of 1/8 of the buffer.
#
# ## Summary
#
# - Every algorithm is a point on a line between **few `ppermute`s** (recursive doubling:
#   log₂ n, each the whole buffer) and **few bytes** (ring, halving-doubling: 2(n-1)/n·N).
#   The model charges each `ppermute` α plus its largest transfer, so the bytes that count
#   are those on the critical path, not what the busiest rank sends.
#   Small messages are α-bound and want the first; large ones are β-bound and want the second.
# - The crossover sits at α/β times a small factor. The seed's "ring for big, tree for small" is
#   right about the ring; on 8 ranks recursive doubling beats the tree at small sizes, which is
#   what MPI libraries use; NCCL's trees pay off at the scale of many nodes.
# - On fake CPU devices the model ranks small messages well and misprices large ones (shared
#   memory is not a network); never read GPU performance off fake devices.
# - `auto` is the model's cheapest schedule, chosen at trace time; `explain` shows why;
#   `calibrate` measures α, β, γ (small sizes give α, large ones β: sweep the sizes you send).
# - Across nodes, what matters is the bytes on the slow links: `hierarchical` sends
#   2(nodes-1)/n of the data between nodes, a flat ring all of it through one NIC.

# %% [markdown]
# ## Try it
#
# On the assumed 4 × 8 cluster, recursive doubling wins for tiny messages and `hierarchical`
# for large ones. **Below what message size (bytes per GPU) does recursive doubling still beat
# `hierarchical`?** Predict it first: recursive doubling on 32 ranks is 5 rounds, 2 of them
# across nodes, each sending the whole buffer; `hierarchical` is 2·7 + 2·3 = 20 rounds, 6 of
# them across nodes with N/32 each. Then compute it.
#
# *Hint*: `two_level_seconds(cluster_schedule(name, 4, 8, s), s, 8, NVLINK, NETWORK)` for
# both names over `sizes`, and find where the difference changes sign. Then try a slower
# network, 100 Gb/s:
# `rd_vs_hierarchical_crossover(jaxcoll.Calibration(alpha=30e-6, beta=1 / 12e9, gamma=gpu.gamma, backend="gpu"))`
# (the function is defined below), and see which way the crossover moves, and why (α/β again).

# %%
my_answer = None  # your answer in bytes per GPU, e.g. 200 << 10


def rd_vs_hierarchical_crossover(network):
    """The first of `sizes` at which hierarchical beats recursive doubling on the 4 x 8
    cluster, with `network` (a Calibration) between nodes and NVLINK inside them."""
    diff = [two_level_seconds(cluster_schedule("recursive_doubling", 4, 8, s), s, 8, NVLINK, network)
            - two_level_seconds(cluster_schedule("hierarchical", 4, 8, s), s, 8, NVLINK, network)
            for s in sizes]
    return sizes[np.argmax(np.array(diff) > 0)]  # the first size where hierarchical is faster


if my_answer is not None:
    answer = rd_vs_hierarchical_crossover(NETWORK)
    assert answer / 2 <= my_answer <= answer * 2, f"not quite: try again (within 2x of the answer)"
    print(f"Right: hierarchical takes over at about {human(answer)} per GPU.")
