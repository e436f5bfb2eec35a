# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 05 (second half) · What `auto` picks, and what this machine can show
#
# [05_choosing_an_algorithm](05_choosing_an_algorithm.ipynb) chose on paper, from counts and
# models of links. `algorithm="auto"` must choose for the machine it runs on, at trace time:
# it prices every algorithm with a **calibration** (α, β, γ, and a correction per algorithm)
# and lowers the cheapest's program. This notebook reads that choice on the 8 fake CPU
# devices of a 2-core machine, where the tutorials run, and keeps apart what is counted
# (rounds, bytes, the compiled program: the same on any machine) from what is timed (this
# machine's memory copies, not a network).
#
# **What you will learn**
#
# - what a calibration holds, where `auto` gets one, and why these notebooks fix it;
# - what `auto` picks with it, and that `auto` is exactly `jaxcoll.choose`;
# - Broadcast's pipelined chain: the model's best for large messages, left out of `auto`;
# - what a timing on fake CPU devices measures and what it cannot show; why `lax.psum` beats
#   a chain of `ppermute`s here, from the compiled program.
#
# **Prerequisites:** the first half (sections 1 and 4).
# **Notation:** n ranks, N bytes per rank.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices, even where a GPU is present
os.environ["JAXCOLL_CALIBRATE"] = "0"        # auto: the shipped calibrations, everywhere
import jax
jax.config.update("jax_num_cpu_devices", 8)  # before any JAX work

import math
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from IPython.display import display
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

import jaxcoll
from jaxcoll.tools import pictures
from jaxcoll.analysis.model import ranking       # explain's ranking: [(algorithm, Cost)]
from jaxcoll.analysis.model import schedule_for  # the schedule auto would run, in its pieces
import lesson                                 # tutorials/lesson.py: the notebooks' plumbing
from lesson import AXIS, mesh, n, on_every_rank, size_label

SHIPPED = Path(jaxcoll.analysis.__file__).parent / "calibrations"
full = jaxcoll.Calibration.load(SHIPPED / "cpu.json")   # what auto ranks with on CPU
cpu = full.plain()                                      # its α, β, γ alone
SIZES = 2.0 ** np.arange(8, 33)                         # 256 B .. 4 GiB per rank


def alpha_part(algorithm, nbytes, c=cpu):
    """The plain model's α term: messages x α."""
    return dict(ranking("allreduce", n, nbytes, c))[algorithm].messages * c.alpha


def picks(cal):
    """[(first size, name)] where auto's allreduce choice with `cal` changes, over SIZES."""
    found = []
    for size in SIZES:
        name = jaxcoll.choose("allreduce", n, size, cal)
        if not found or found[-1][1] != name:
            found.append((size, name))
    return found


# %% [markdown]
# ## 1. What `auto` prices with
#
# jaxcoll ships one calibration per backend (`cpu.json`, `gpu.json`, `gloo.json`). By default
# `auto`, the first time it decides a collective on a machine, also *times* the likely winners
# there and caches the times (docs/guide/calibration.md). These notebooks set
# `JAXCOLL_CALIBRATE=0` in their first cell: no measuring, no cache, the shipped numbers, so
# they print the same choices on every machine. `cpu.json`, as fitted:

# %%
print(f"source: {full.source}")
print(f"α = {cpu.alpha * 1e6:.0f} µs, β = {cpu.beta:.3g} s/B, γ = {cpu.gamma:.3g} s/B")
factors = {row[1]: tuple(row[2:4]) for row in full.per_algorithm if row[0] == "allreduce"}
print("allreduce factors (on the α term, on the β and γ terms):", factors)
assert all(full.factors("allreduce", a) == f for a, f in factors.items())

# %% [markdown]
# One α, β, γ for every algorithm (the first half's model) does not fit these devices well:
# a copy between fake devices is a `memcpy` whose speed depends on the sizes and the cores'
# caches, not on a link. `jaxcoll.calibrate` fitted two factors per algorithm on
# its timings, one on its α term and one on the rest. `auto` ranks by
#
# $$t = f_\alpha \cdot (\text{messages}\cdot\alpha) + f_\beta \cdot (\text{the β and γ terms}).$$
#
# The ranking as a table (`jaxcoll.explain` prints the same ranking as long lines):

# %%
for size in (4 << 10, 4 << 20):
    plain, fitted = dict(ranking("allreduce", n, size, cpu)), ranking("allreduce", n, size, full)
    print(f"N = {size_label(size)}  (µs)\n{'algorithm':<19}{'msgs':>5}{'α term':>9}"
          f"{'β+γ terms':>10}{'model':>9}{'factors':>14}{'auto ranks':>11}")
    for name, c in fitted:
        a = alpha_part(name, size)
        fa, fb = full.factors("allreduce", name)
        assert np.isclose(c.seconds, fa * a + fb * (plain[name].seconds - a))
        print(f"{name:<19}{c.messages:>5}{a * 1e6:9.0f}{(plain[name].seconds - a) * 1e6:10.0f}"
              f"{plain[name].seconds * 1e6:9.0f}{f'{fa:.2f}, {fb:.2f}':>14}{c.seconds * 1e6:11.0f}")
    print()

# %% [markdown]
# ## 2. What `auto` picks, and that it is `choose`
#
# Over sizes, the plain model's choices and `auto`'s (with the factors):

# %%
choices = {label: [(size_label(s), a) for s, a in picks(c)]
           for label, c in (("plain model", cpu), ("auto", full))}
print(*(f"{label:<11}: {found}" for label, found in choices.items()), sep="\n")
assert choices["plain model"] == [("256 B", "recursive_doubling"), ("512 KiB", "halving_doubling")]
assert choices["auto"] == [("256 B", "recursive_doubling"), ("8 MiB", "ring"), ("128 MiB", "tree")]
at_128m = ranking("allreduce", n, 128 << 20, cpu)                 # the plain model, by counts
sent = {name: c.bytes_sent / (128 << 20) for name, c in at_128m}
assert at_128m[-2][0] == "tree" and (sent["tree"], sent["ring"]) == (3, 1.75)
assert factors["tree"][1] < factors["ring"][1]
print("plain model at 128 MiB, slowest first:", [name for name, _ in at_128m[::-1][:3]])
SHOWN = ("recursive_doubling", "halving_doubling", "ring", "tree")
pictures.over_sizes(SIZES, {a: [dict(ranking("allreduce", n, s, full))[a].seconds for s in SIZES]
                            for a in SHOWN}, picks=picks(full),
                    title="allreduce on 8 fake CPU devices: what auto ranks (cpu.json, factors)")

# %% [markdown]
# From 8 MiB the factors move `auto` to the ring, and from 128 MiB to the **tree**, which the
# plain model, counting bytes, ranks second slowest there (it sends 3·N per rank, the ring
# 1.75·N): its fitted factor on the bytes (0.77) is under the ring's (2.03). That describes
# how fast this machine copied each program's buffers, not what crosses a link.
#
# **`auto` is `choose`**: at trace time it prices every algorithm and lowers the cheapest's
# exact program, the same text:

# %%
spec = jax.ShapeDtypeStruct((n, (4 << 20) // 4), jnp.float32,
                            sharding=NamedSharding(mesh, P(AXIS)))
chosen = jaxcoll.choose("allreduce", n, 4 << 20)
lowered = {a: on_every_rank(lambda v, a=a: jaxcoll.allreduce(v, AXIS, algorithm=a))
           .lower(spec).as_text() for a in ("auto", chosen)}
assert lowered["auto"] == lowered[chosen]
print(f"4 MiB: auto lowers to the program of {chosen!r} (plain model: "
      f"{jaxcoll.choose('allreduce', n, 4 << 20, cpu)!r})")

# %% [markdown]
# ## 3. Broadcast: the model's best, and what `auto` runs
#
# Notebook 03's trees send the whole message each round: binomial costs ceil(log2 n)·(α + N·β).
# No broadcast beats ceil(log2 n) rounds (the holders at most double) and N·β (the root sends
# every byte once; `jaxcoll.bounds`). Two algorithms send pieces instead:
#
# - **scatter + allgather** ([van de Geijn; Chan et al. 2007](https://doi.org/10.1002/cpe.1206)):
#   the root scatters n chunks down a binomial tree ((n−1)/n·N), then a ring allgather
#   ((n−1)/n·N more): ceil(log2 n) + n − 1 rounds and about 2(n−1)/n·N·β: within 2x of the
#   bound, never at it;
# - the pipelined **chain** (`algorithm="chain"`, NCCL's broadcast for large messages): a line of
#   ranks from the root passes on each of k pieces as soon as it has it. n − 2 + k rounds of N/k
#   bytes: (n − 2 + k)(α + N/k·β), approaching N·β as k grows. jaxcoll takes the minimising k,
#   sqrt((n−2)·N·β/α), at most 64 (`jaxcoll.analysis.model.chain_pieces`).
#
# The chain on 4 ranks in 3 pieces: in round 2 all three links work at once.

# %%
chain = jaxcoll.schedule("broadcast", "chain", 4, pieces=3)
print(chain)
display(lesson.show(chain))


def bytes_in_turn(schedule):                      # the β coefficient, in units of N
    return jaxcoll.cost(schedule, 1.0, alpha=0, beta=1).seconds


for pieces in range(1, 65):
    piped = jaxcoll.schedule("broadcast", "chain", n, pieces=pieces)
    assert piped.n_rounds == n - 2 + pieces
    assert math.isclose(bytes_in_turn(piped), (n - 2 + pieces) / pieces)
assert bytes_in_turn(jaxcoll.schedule("broadcast", "scatter_allgather", n)) == 2 * (n - 1) / n
gpu = jaxcoll.calibration("gpu")                  # an estimate for 8 H100s (notebook 01, section 8)
pieces = jaxcoll.analysis.model.chain_pieces(n, 2**30, gpu)
assert pieces == min(range(1, 65), key=lambda j: (n - 2 + j) * (gpu.alpha + 2**30 / j * gpu.beta))
print(f"gpu.json, 1 GiB: the chain's k = {pieces} minimises (n - 2 + k)(α + N/k·β)")

# %% [markdown]
# Each algorithm's gap to the bounds as jaxcoll runs it (the chain in the model's k pieces; the
# heap tree pipelined too above 16 MiB), and the model's time with `gpu.json` (assumed):

# %%
BROADCASTS = ["naive", "tree", "binomial", "scatter_allgather", "chain"]
for nbytes in (2**10, 2**30):
    bcast_bound = jaxcoll.bounds("broadcast", n, nbytes, gpu)
    print(f"N = {size_label(nbytes)}: bounds {bcast_bound.rounds} rounds, N bytes; "
          f"at best {bcast_bound.seconds * 1e6:.0f} µs")
    model = {}
    for a in BROADCASTS:
        s = schedule_for("broadcast", a, n, nbytes, gpu)
        model[a] = lesson.predicted("broadcast", a, n, nbytes, gpu)
        print(f"  {a:<18} rounds x{s.n_rounds / bcast_bound.rounds:5.2f}, "
              f"bytes x{bytes_in_turn(s) * nbytes / bcast_bound.path_bytes:4.2f}"
              f"   {model[a] * 1e6:9.0f} µs   ({s.n_chunks} chunks)")
    assert min(model, key=model.get) == ("binomial" if nbytes < 2**20 else "chain")

sizes = 2.0 ** np.arange(10, 31)
pictures.over_sizes(sizes, {a: [lesson.predicted("broadcast", a, n, s, gpu) for s in sizes]
                            for a in BROADCASTS},
                    bound=[jaxcoll.bounds("broadcast", n, s, gpu).seconds for s in sizes],
                    title="Broadcast on 8 ranks: the α-β model with gpu.json (an estimate)")

# %% [markdown]
# In the model the binomial tree wins small messages and the chain large ones. What does
# `auto` pick on 8 GPUs, with `gpu.json`?

# %%
picked = {size_label(s): jaxcoll.choose("broadcast", n, s, gpu) for s in (2**10, 2**30)}
model_1g = {a: lesson.predicted("broadcast", a, n, 2**30, gpu) for a in BROADCASTS}
off = model_1g[picked["1 GiB"]] / min(model_1g.values())
assert picked == {"1 KiB": "binomial", "1 GiB": "scatter_allgather"} and off > 1
print(f"auto on 8 GPUs (gpu.json): {picked}; at 1 GiB {off:.2f}x the model's best")

# %% [markdown]
# Not the chain, though the model ranks it first: the chain is left out of `auto` on *every*
# backend (`auto=False` in its registry entry, `jaxcoll/ir/families/__init__.py`) because on
# these fake devices it ran 2.3x *slower* than scatter_allgather at 16 MiB per rank
# (bench/RESULTS.md, section 8): a timing of memory copies on a 2-core machine, which says
# nothing about links. A rule drawn from one machine's timing, applied to every machine: on
# GPUs ask for `algorithm="chain"` by name. Both run here, from any root:

# %%
x = lesson.small_integers(n, 6)
for a in ("scatter_allgather", "chain"):
    program = on_every_rank(lambda v, a=a: jaxcoll.broadcast(v, AXIS, root=5, algorithm=a))
    np.testing.assert_array_equal(program(x), np.broadcast_to(x[5], x.shape), err_msg=a)
print("scatter_allgather and chain from root 5: every rank holds row 5")

# %% [markdown]
# ## 4. On the fake CPU devices: what a timing measures
#
# Three allreduces and `lax.psum` (`xla`) at 4 KiB and 4 MiB per rank, each jitted, checked
# bit for bit against the exact sum and timed in alternation (medians):

# %%
MEASURED = ["xla", "recursive_doubling", "halving_doubling", "ring"]
programs = {name: on_every_rank(lambda v, a=name: jaxcoll.allreduce(v, AXIS, algorithm=a))
            for name in MEASURED}
measured = {}
for size in (4 << 10, 4 << 20):
    x = lesson.small_integers(n, size // 4)
    for name, program in programs.items():
        np.testing.assert_array_equal(program(x), np.tile(x.sum(0), (n, 1)))
    measured[size] = lesson.median_seconds(programs, x, iters=3)

print(f"{'':>8} {'algorithm':<19} {'measured':>9} {'model':>9} {'auto ranks':>11}   (ms)")
for size, times in measured.items():
    plain = dict(ranking("allreduce", n, size, cpu))
    fitted = dict(ranking("allreduce", n, size, full))
    for name, t in times.items():
        model = (f"{plain[name].seconds * 1e3:9.2f} {fitted[name].seconds * 1e3:11.2f}"
                 if name != "xla" else "")
        print(f"{size_label(size):>8} {name:<19} {t * 1e3:9.2f} {model}")
    pick, fastest = jaxcoll.choose("allreduce", n, size, full), min(MEASURED[1:], key=times.get)
    print(f"{'':>8} auto picks {pick!r}: {times[pick] / times[fastest]:.2f}x the fastest of the "
          f"three in this run ({fastest!r})")

# %% [markdown]
# **What these timings measure:** one process copying buffers between 8 fake devices on 2
# cores (notebook 01, section 8): how fast XLA's CPU runtime runs each compiled program here,
# with everything else the machine did meanwhile. **What they cannot show:** anything about
# links (there are none: no bandwidth, no contention, no NIC), or which algorithm wins on
# GPUs; and a rerun can order them differently, so the last line is one more timing, not a
# check of `auto` (nothing above asserts a measured order). The factors were fitted on
# another run of this kind: fixed numbers, so `auto`'s choice is the same every run.
#
# What holds on any machine is counted: each algorithm's rounds and bytes (the first half)
# and the compiled program. **`lax.psum` against a chain of `ppermute`s**, read from it:
#
# 1. **One operation.** `psum` compiles to one `all-reduce`; jaxcoll's ring to
#    `collective-permute`s run 14 times, each starting up and copying between ranks' buffers on
#    its own. NCCL runs the whole allreduce in one kernel, a few µs per step.
# 2. **Lock-step rounds.** A `ppermute` ends when its slowest transfer does, on every rank;
#    in NCCL's kernel each rank goes on as soon as its own data arrives.
# 3. **No pipelining inside a round.** NCCL forwards each slice of a step as it arrives; with
#    `ppermute`s, pipelining means more rounds, each paying α again.

# %%
x = lesson.small_integers(n, 1024)
psum_ops = lesson.collectives_in(on_every_rank(lambda v: lax.psum(v, AXIS)), x)
ring_ops = lesson.collectives_in(programs["ring"], x)
assert psum_ops == {"all-reduce": 1} and set(ring_ops) == {"collective-permute"}
assert jaxcoll.schedule("allreduce", "ring", n).n_rounds == 2 * (n - 1)
small_times = measured[4 << 10]
print(f"compiled: psum {dict(psum_ops)}; ring {dict(ring_ops)} (in loops, run {2 * (n - 1)} "
      f"times); this run at 4 KiB: ring / psum = {small_times['ring'] / small_times['xla']:.1f}")

# %% [markdown]
# The counts (one operation against 14 rounds of permutes, each starting up on its own) hold
# on every run and machine; the ratio printed is what this run on this machine made of them.
#
# ## Summary
#
# - `auto` ranks with a calibration: the shipped one here (`JAXCOLL_CALIBRATE=0`), else
#   timings it takes on the machine; per-algorithm factors correct the α-β-γ model.
# - `auto` lowers exactly `choose`'s program. Its choices with `cpu.json` describe how these
#   fake devices copied memory, not a network.
# - Broadcast: binomial tree small, pipelined chain large, on paper; `auto` leaves the chain
#   out, so ask for it by name on GPUs.
# - A 2-core timing measures XLA's CPU runtime on this machine; rounds, bytes and the compiled
#   program are what carry to other machines.

# %% [markdown]
# ## Try it
#
# With the fitted factors, at what N does `auto` switch from recursive doubling to the ring?
# Predict it: set the two fitted times equal, each f_α·(messages·α) + f_β·(its β and γ terms
# at N), with the counts from the first half's table (recursive doubling: 3, 3·N, 3·N; the
# ring: 14, 1.75·N, 0.875·N).
#
# <details><summary>Answer</summary>
#
# `(14 * fa_ring - 3 * fa_rd) * α / (fb_rd * 3 * (β + γ) - fb_ring * (1.75 * β + 0.875 * γ))`
# with `fa_rd, fb_rd = factors["recursive_doubling"]` and the same for the ring: about 6 MiB.
# </details>

# %%
my_answer = None          # bytes per rank

lesson.check_size(my_answer, lambda size: jaxcoll.choose(  # auto with the factors leaves
    "allreduce", n, size, full) != "recursive_doubling")   # recursive doubling
