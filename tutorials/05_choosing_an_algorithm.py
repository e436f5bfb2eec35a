# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 05 · Choosing an algorithm: two bounds, the links, and the crossover
#
# The lecture this project grew from gives one rule, "如果数据量小，Ring 的启动开销反而大。这时候用
# Tree AllReduce 更合适" ("if the data is small, the ring's start-up cost is what hurts; then a
# tree is the better fit"), and one warning, "Ring 算法对网络带宽要求高" ("the ring needs a lot of
# network bandwidth"). The rule is half right and the warning is backwards. This notebook
# chooses algorithms with the lower bounds of notebook 04, first on fake CPU devices, then on
# models of real machines checked against published measurements.
#
# **What you will learn**
#
# - every algorithm trades the **rounds** bound (α, start-ups) against the **bytes** bound
#   (β, bandwidth); the crossover sits near α/β;
# - what `algorithm="auto"` picks and why (`jaxcoll.explain`), and what its per-algorithm
#   factors are: facts about jaxcoll's executor on this runtime, not about networks;
# - what 8 fake CPU devices can and cannot tell you;
# - pricing on **links** (`jaxcoll.simulate`, `jaxcoll.systems`): NCCL's published ring
#   bandwidths reproduced within 15%; why one NCCL kernel beats a chain of `ppermute`s; the
#   double tree; which allreduce for 1024 GPUs in 128 nodes.
#
# **Prerequisites:** notebook 04, section 5 (the bounds). **Notation:** n ranks, N bytes per
# rank; GB/s = 10⁹ bytes per second.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
import jax
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

import jaxcoll
from jaxcoll import pictures, systems
from jaxcoll.model import ranking             # what explain prints, as data: [(algorithm, Cost)]
import lesson                                 # tutorials/lesson.py: the notebooks' plumbing
from lesson import AXIS, mesh, n, on_every_rank, size_label

cpu = jaxcoll.calibration("cpu").plain()      # α, β, γ measured on these fake devices, alone
SIZES = 2.0 ** np.arange(8, 33)               # 256 B .. 4 GiB per rank


def terms(algorithm, ranks=n):
    """(messages, bytes on the path, bytes reduced on it) per byte of N: cost() with α, then β,
    then γ = 1 alone."""
    s = jaxcoll.schedule("allreduce", algorithm, ranks)
    return tuple(jaxcoll.cost(s, 1.0, alpha=a, beta=b, gamma=g).seconds
                 for a, b, g in ((1, 0, 0), (0, 1, 0), (0, 0, 1)))


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
# Each `ppermute` costs α + (its largest transfer's bytes)·β (+ the bytes added·γ), one after
# another (`jaxcoll.cost`). The bounds of notebook 04 say every allreduce needs at least
# ⌈log₂ n⌉ = 3 rounds and 2(n−1)/n·N = 1.75·N bytes on its path. `jaxcoll.explain` ranks every
# algorithm with a calibration and prints each one's gap to both bounds. With the α, β, γ
# measured on these 8 fake devices:

# %%
print(f"α = {cpu.alpha * 1e6:.0f} µs, β = {cpu.beta:.3g} s/B, γ = {cpu.gamma:.3g} s/B: "
      f"α/β = {size_label(cpu.alpha / cpu.beta)}\n")
small = jaxcoll.explain("allreduce", n, 4 << 10, cpu)
print()
large = jaxcoll.explain("allreduce", n, 16 << 20, cpu)
bound = jaxcoll.bounds("allreduce", n, 1.0)
assert terms(small[0][0])[0] == bound.rounds                   # small N: the fewest rounds wins
assert np.isclose(terms(large[0][0])[1], bound.path_bytes)     # large N: the fewest bytes

# %% [markdown]
# At 4 KiB the time is start-ups, and recursive doubling (3 rounds, at the rounds bound) wins
# although it sends 3·N. At 16 MiB it is bytes, and halving-doubling (1.75·N, at the bytes
# bound) wins in 6 rounds. Setting the two times equal, 3α + 3N(β + γ) = 6α + N(1.75β +
# 0.875γ), gives the crossover
#
# $$N^* = \frac{(6 - 3)\,\alpha}{(3 - 1.75)\,\beta + (3 - 0.875)\,\gamma},$$
#
# a multiple of α/β, the bytes a link moves while one message starts. Halve α and every
# crossover halves. Computed from the schedules' counts and checked against `choose`:

# %%
def crossover(fewer_rounds, fewer_bytes, cal):
    (a1, b1, g1), (a2, b2, g2) = terms(fewer_rounds), terms(fewer_bytes)
    return (a2 - a1) * cal.alpha / ((b1 - b2) * cal.beta + (g1 - g2) * cal.gamma)


star = crossover("recursive_doubling", "halving_doubling", cpu)
assert jaxcoll.choose("allreduce", n, 0.99 * star, cpu) == "recursive_doubling"
assert jaxcoll.choose("allreduce", n, 1.01 * star, cpu) == "halving_doubling"
print(f"N* = {size_label(star)} = {star / (cpu.alpha / cpu.beta):.2f} α/β")

curves = {name: np.array([dict(ranking("allreduce", n, s, cpu))[name].seconds for s in SIZES])
          for name in ("recursive_doubling", "halving_doubling", "ring", "tree", "double_tree")}
bounds = np.array([jaxcoll.bounds("allreduce", n, s, cpu).seconds for s in SIZES])
assert all((t >= bounds * (1 - 1e-9)).all() for t in curves.values())   # nothing beats the bound
pictures.over_sizes(SIZES, curves, bound=bounds,
                    picks=picks(lambda s: jaxcoll.choose("allreduce", n, s, cpu)),
                    title=f"allreduce on {n} ranks, α-β-γ model with the CPU calibration")

# %% [markdown]
# ## 2. The lecture's rule and warning, corrected
#
# **"Small messages: use a tree."** A tree beats the ring at small N (8 rounds against 14), but
# on 8 ranks it is never the best: recursive doubling has fewer rounds still, halving-doubling
# fewer bytes. MPI libraries pick those two (Thakur, Rabenseifner and Gropp,
# [2005](https://doi.org/10.1177/1094342005051521)). NCCL uses trees across many nodes, where
# the ring's 2(n−1) rounds hurt most (section 5).
#
# **"The ring needs a lot of bandwidth."** The opposite: the ring sends the *fewest* bytes an
# allreduce can (its bytes gap above is x1.00), the bandwidth optimum. What it pays is
# 2(n−1) start-ups, and, on real links, its slowest link: every round waits for all n
# transfers, so one slow hop (a link between nodes) sets the pace of every round.

# %%
best = np.min(list(curves.values()), axis=0)
assert (curves["tree"][:4] < curves["ring"][:4]).all() and not (curves["tree"] == best).any()
ring_terms = terms("ring")
assert ring_terms[0] == 2 * (n - 1) and np.isclose(ring_terms[1], bound.path_bytes)
print(f"tree beats ring up to {size_label(SIZES[curves['tree'] < curves['ring']].max())}; "
      f"the fastest at no size. ring: {ring_terms[0]:g} rounds, {ring_terms[1]:g}·N bytes "
      f"(the bound: {bound.rounds}, {bound.path_bytes:g}·N)")

# %% [markdown]
# ## 3. On the fake CPU devices
#
# Three allreduces and `lax.psum` (`xla`) at 4 KiB and 4 MiB per rank, each one jitted program,
# checked bit for bit against the exact sum, then timed in alternation (medians):

# %%
MEASURED = ["xla", "recursive_doubling", "halving_doubling", "ring"]
programs = {name: on_every_rank(lambda v, a=name: jaxcoll.allreduce(v, AXIS, algorithm=a))
            for name in MEASURED}
measured = {}
for size in (4 << 10, 4 << 20):
    x = lesson.small_integers(n, size // 4)                   # (n, floats per rank)
    for name, program in programs.items():
        np.testing.assert_array_equal(program(x), np.tile(x.sum(0), (n, 1)))
    measured[size] = lesson.median_seconds(programs, x, iters=3)

full = jaxcoll.calibration("cpu")                           # with the per-algorithm factors
factors = {a: full.factors("allreduce", a) for a in MEASURED[1:]}
print(f"{'':>8} {'algorithm':<19} {'measured':>9} {'α-β-γ':>9} {'with factors':>13}   (ms)")
against_fastest = {}
for size, times in measured.items():
    plain = dict(ranking("allreduce", n, size, cpu))
    fitted = dict(ranking("allreduce", n, size, full))
    for name, t in times.items():
        model = (f"{plain[name].seconds * 1e3:9.2f} {fitted[name].seconds * 1e3:13.2f}"
                 if name != "xla" else f"{'':>9} {'':>13}")
        print(f"{size_label(size):>8} {name:<19} {t * 1e3:9.2f} {model}")
    for name, (fa, fb) in factors.items():   # factors x (α part, the rest) of the plain model
        a_part = terms(name)[0] * cpu.alpha
        assert np.isclose(fitted[name].seconds, fa * a_part + fb * (plain[name].seconds - a_part))
    pick, fastest = jaxcoll.choose("allreduce", n, size, full), min(factors, key=times.get)
    against_fastest[size] = (f"auto picks {pick!r}, measured {times[pick] / times[fastest]:.2f}x "
                             f"the fastest of the three ({fastest!r})")
assert jaxcoll.choose("allreduce", n, 4 << 20, full) != jaxcoll.choose("allreduce", n, 4 << 20, cpu)
print("\nfactors fitted for allreduce (α part, β-γ part):", factors)
print(*(f"{size_label(size)}: {line}" for size, line in against_fastest.items()), sep="\n")

# %% [markdown]
# What this can and cannot show. Fake devices are threads of one process sharing one memory
# on a busy 2-core machine: the numbers move from run to run by 10-30%, "bandwidth" is memory
# copying, and no link is slower than another. At 4 KiB the time is start-ups and the model's
# ranking usually shows; at 4 MiB the order of the two bandwidth-optimal algorithms can go
# either way. Nothing here says anything about GPUs.
#
# **The per-algorithm factors** are what `auto` ranks with: `jaxcoll.calibrate(n,
# primitives=...)`, in another run, timed every algorithm at 2 KiB, 128 KiB and 8 MiB and
# fitted each a factor on its α part and one on its β-γ part. They describe the executor's
# program on *this runtime*: α and β come from a loop of `ppermute`s of a whole buffer, but
# the ring's and halving-doubling's rounds also copy the parts they send and receive, which on
# shared memory costs about what a send does (β factors of 2 or more; recursive doubling,
# sending its whole buffer, stays near 1). Fitted elsewhere, they need not fit this run, and
# `auto` may choose otherwise than the plain model, as at 4 MiB, and lose: the lines above
# print its pick's time against the fastest (bench/MODEL.md, over many sizes).
#
# **`auto` is `choose`**: at trace time it prices every algorithm and lowers exactly the
# program of the cheapest:

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
# **Why `lax.psum` wins at small sizes**, and why NCCL's one kernel beats a chain of
# `ppermute`s on GPUs too:
#
# 1. **One launch.** `psum` is one operation; jaxcoll's best allreduce is 3 `ppermute`s, the
#    ring 14, and each starts up on its own. NCCL runs the whole allreduce in one kernel, with a
#    few µs per step inside it.
# 2. **Lock-step rounds.** A `ppermute` ends when its slowest transfer does, and the next
#    starts only then, on every rank. Inside NCCL's kernel each rank goes on as soon as its own
#    data arrives.
# 3. **No pipelining inside a round.** NCCL cuts each step into slices and forwards a slice as
#    soon as it arrives, so start-ups overlap transfers. With `ppermute`s, pipelining means
#    more rounds (the chain broadcast in pieces), and every round pays α again.

# %%
x = lesson.small_integers(n, 1024)
psum_ops = lesson.collectives_in(on_every_rank(lambda v: lax.psum(v, AXIS)), x)
ring_ops = lesson.collectives_in(programs["ring"], x)
assert psum_ops == {"all-reduce": 1} and set(ring_ops) == {"collective-permute"}
small_times = measured[4 << 10]
print(f"compiled: psum {dict(psum_ops)}; ring {dict(ring_ops)} (in loops, run {2 * (n - 1)} "
      f"times); measured at 4 KiB: ring / psum = {small_times['ring'] / small_times['xla']:.1f}")

# %% [markdown]
# ## 4. On links: a DGX H100, checked against published numbers
#
# `jaxcoll.systems.dgx` builds nodes of 8 GPUs on an NVSwitch with NICs between nodes, with
# link parameters from NCCL's own topology model (the module documents each source). Its
# NVLink α, 3.4 µs, is NCCL's step inside one kernel; `gpu.json` assumes 15 µs per jaxcoll
# round, a `ppermute` launched on its own (point 1 above).
# `jaxcoll.simulate` prices a schedule on them, all transfers of a round at once, links shared
# in a round splitting their bandwidth. The one set of H100 numbers used from here on:

# %%
h100 = systems.dgx("h100")
print(h100.assumptions)
print(f"\n{'system':<46} {'published busbw':>16} {'predicted':>10} {'error':>7}")
for published, predicted, error in systems.validation():
    print(f"{published.system:<46} {published.busbw:>11.0f} GB/s {predicted:>10.0f} {error:>+7.1%}")
    assert abs(error) <= 0.15
print("\nsources:", *(f"  {p.source}" for p, _, _ in systems.validation()), sep="\n")

# %% [markdown]
# The busbw of nccl-tests is the algorithm bandwidth (N over the time) times 2(n−1)/n for
# allreduce, the rate each link was driven at. The simulated ring reproduces all three
# measurements within 15%. With those links, every algorithm on paper (`topology=`; pipelined
# ones cut into as many pieces as the model finds best):

# %%
jaxcoll.explain("allreduce", n, 64 << 10, topology=h100)
print()
on_h100 = jaxcoll.explain("allreduce", n, 256 << 20, topology=h100)
costs = dict(on_h100)
assert np.isclose(costs["bidirectional_ring"].seconds, costs["ring"].seconds)  # one port (04)

# %% [markdown]
# On one NVSwitch every pair of GPUs is one hop, so halving-doubling gets the ring's bytes in 6
# rounds and wins large messages; recursive doubling wins small ones. The crossover moved from
# section 1's size to a few MiB: α/β is larger here (3.4 µs at 370 GB/s).
#
# **The double tree.** NCCL presents its double binary tree as full bandwidth at a latency
# that grows with log n ([NCCL 2.4][nccl24]), yet the CPU model of section 1 ranks it near the
# bottom (2.25x the fastest at 16 MiB, in one piece). On links, pipelined into k pieces, it
# approaches **2N·β**: each rank is inside one of the two trees and hears from its two
# children one after the other through one port. The ring takes 2(n−1)/n·N·β = 1.75·N·β at
# n = 8, so in this schedule the double tree stays 14% behind, a gap that closes as n grows; and
# it gets near 2N·β only at large sizes, as every piece adds rounds:
#
# [nccl24]: https://developer.nvidia.com/blog/massively-scale-deep-learning-training-nccl-2-4/

# %%
beta_nvlink = 1 / (systems.GPUS["h100"][0] * 1e9)
on_links = {s: dict(ranking("allreduce", n, s, topology=h100)) for s in SIZES}  # size: {name: Cost}
ratios = {s: on_links[s]["double_tree"].seconds / (s * beta_nvlink)
          for s in (16 << 20, 256 << 20, 4 << 30)}
assert list(ratios.values()) == sorted(ratios.values(), reverse=True) and 2 < ratios[4 << 30] < 2.15
cpu_tree = dict(large)["double_tree"].seconds / large[0][1].seconds
assert 2.2 < cpu_tree < 2.3                                          # section 1, 16 MiB
cheapest = {s: min(on_links[s], key=lambda a: on_links[s][a].seconds) for s in SIZES}
moved = min(s for s in SIZES if cheapest[s] != "recursive_doubling")
assert star < 1 << 20 < moved <= 8 << 20                             # up to a few MiB
print(f"double tree on the CPU model: {cpu_tree:.2f}x the fastest at 16 MiB; crossover: "
      f"{size_label(star)} there, {size_label(moved / 2)}..{size_label(moved)} here")
for s, r in ratios.items():
    print(f"{size_label(s):>8}: double tree ({on_links[s]['double_tree'].messages:>3} rounds) "
          f"{r:.2f}·N·β, ring {on_links[s]['ring'].seconds / (s * beta_nvlink):.2f}·N·β")

curves = {name: np.array([on_links[s][name].seconds for s in SIZES])
          for name in ("recursive_doubling", "halving_doubling", "ring", "tree", "double_tree")}
pictures.over_sizes(SIZES, curves, bound=[jaxcoll.bounds("allreduce", n, s, topology=h100).seconds
                                          for s in SIZES],
                    picks=picks(cheapest.get),
                    title="allreduce on 1 x DGX H100 (8 GPUs on NVSwitch), on paper")

# %% [markdown]
# ## 5. 1024 GPUs in 128 nodes of 8: which allreduce?
#
# On paper, with the same H100 numbers: 128 DGX nodes, 8 NICs each at 50 GB/s, a
# non-blocking fabric, one ring (channel). Building the 1024-rank ring schedules (2 million
# transfers each) takes tens of seconds, so the ring is priced by its formula instead: every
# one of its 2(n−1) rounds has a transfer crossing a NIC, so each round takes α_NIC + N/n·β_NIC,
# checked against `simulate` on 4 nodes.

# %%
big = systems.dgx("h100", 128)
print(big.assumptions)
nic_alpha, nic_beta = systems.NIC_ALPHA, 1 / (systems.GPUS["h100"][1] * 1e9)


def ring_seconds(ranks, size):
    return 2 * (ranks - 1) * (nic_alpha + size / ranks * nic_beta)


four_nodes = jaxcoll.simulate(jaxcoll.schedule("allreduce", "ring", 32), 256 << 20,
                              systems.dgx("h100", 4))
assert np.isclose(four_nodes.seconds, ring_seconds(32, 256 << 20))

CANDIDATES = {"recursive_doubling": 1024, "halving_doubling": 1024, "hierarchical": (128, 8)}
nic0 = big.link_names.index("node0.nic0->fabric")          # GPU 0 of node 0's way out
for size in (64 << 10, 256 << 20):
    bound = jaxcoll.bounds("allreduce", 1024, size, topology=big)
    runs = {a: jaxcoll.simulate(jaxcoll.schedule("allreduce", a, shape), size, big)
            for a, shape in CANDIDATES.items()}
    times = {a: run.seconds for a, run in runs.items()} | {"ring": ring_seconds(1024, size)}
    print(f"\n{size_label(size)} per GPU; bounds: {bound.rounds} rounds, "
          f"{bound.path_bytes / size:.2f}·N through {bound.limit}: {bound.seconds * 1e6:.0f} µs")
    for a, t in sorted(times.items(), key=lambda item: item[1]):
        through = (f"; {runs[a].link_bytes()[nic0] / size:.3f}·N out through one NIC"
                   if a in runs else "")
        print(f"  {a:<19} {t * 1e6:9.0f} µs  x{t / bound.seconds:<6.1f} the bound{through}")
    assert min(times, key=times.get) == ("recursive_doubling" if size < 1 << 20 else "hierarchical")
through_nic = {a: run.link_bytes()[nic0] for a, run in runs.items()}
assert np.isclose(through_nic["hierarchical"], 2 * 127 / 128 * size / 8)
assert np.isclose(through_nic["halving_doubling"], 8 * through_nic["hierarchical"])
print(f"\nthe ring's 2046 start-ups alone: {ring_seconds(1024, 0) * 1e3:.1f} ms")

# %% [markdown]
# Small messages: **recursive doubling**, 10 rounds, at the rounds bound. Large ones:
# **hierarchical**: a reduce-scatter ring inside each node, then each GPU's 1/8 allreduced
# across the nodes through its own NIC, then an allgather inside the node. Each NIC carries
# 2·127/128·N/8. Halving-doubling sends eight times that through each NIC: it halves with the
# farthest partner first, so its largest transfers (N/2, N/4, ...) are the ones that cross
# nodes. The flat ring pays 2046 start-ups of a NIC, 20 ms before any byte, and drives one NIC
# per node (NCCL runs several rings at once, "channels", each leaving by another NIC, as
# `systems.validation` does for 3 nodes). NCCL also switches to its trees across many nodes,
# whose rounds grow with log n; `ranking(..., topology=big)` prices every algorithm, the trees
# included, given a minute.
#
# ## Summary
#
# - Small messages want the fewest rounds (⌈log₂ n⌉: recursive doubling), large ones the
#   fewest bytes (the ring's 2(n−1)/n·N, in fewer rounds by halving-doubling); the crossover is
#   a multiple of α/β.
# - The ring is the bandwidth optimum; it pays 2(n−1) start-ups and the pace of its slowest
#   link. A tree is never the best allreduce on 8 ranks.
# - The per-algorithm factors in `cpu.json` describe jaxcoll's executor on fake CPU devices;
#   on links, price with `simulate`/`topology=`, which reproduces NCCL's published ring
#   bandwidths within 15%.
# - One NCCL kernel beats a chain of `ppermute`s: one launch, no lock-step, pipelining inside.
# - 1024 GPUs in 128 nodes: recursive doubling for small messages, hierarchical for large.
#
# ## Try it
#
# On the DGX H100, at what N does the choice on paper switch from recursive doubling to
# halving-doubling? Predict it with section 1's formula, using one NVLink message's α
# (`systems.NVLINK_ALPHA`) and β (`beta_nvlink`), and γ = 0.
#
# <details><summary>Answer</summary>
#
# `3 * systems.NVLINK_ALPHA / (1.25 * beta_nvlink)`: about 2.9 MiB. On a switch a message
# crosses two links at α/2 each, so the one-β model and the links agree.
# </details>

# %%
my_answer = None          # bytes per rank


def switch_point(low=1 << 10, high=1 << 30):
    """Bisect for the N at which choose(topology=h100) leaves recursive doubling."""
    for _ in range(30):
        middle = (low * high) ** 0.5
        if jaxcoll.choose("allreduce", n, middle, topology=h100) == "recursive_doubling":
            low = middle
        else:
            high = middle
    return high


if my_answer is None:
    print("not done yet: set my_answer")
else:
    truth = switch_point()
    assert abs(my_answer / truth - 1) < 0.05, f"not quite: {size_label(truth)}"
    print(f"right: {size_label(truth)}")
