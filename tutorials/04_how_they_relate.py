# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 04 · How the primitives relate, and what none of them can beat
#
# The lecture this project grew from (a lecture in Chinese on the collective primitives of
# distributed training; notebook 01 says what it covers) ends with "最后，我画了一张图，帮你理清这些原语的关系"
# ("Finally, I drew a figure to help you sort out how these primitives relate"), and the figure
# is not there. We draw it here, every arrow a relation checked on the schedules: in jaxcoll an
# algorithm is a *schedule*, plain data that can be concatenated, run backwards and proved
# correct without a device.
#
# **What you will learn**
#
# - three ways to build a collective from others: **concatenation**, **reversal** and **one
#   per root**; which relations hold for n = 1..16 and every root, and four plausible ones
#   that do not;
# - **transposes**: `jax.vjp` of a Broadcast runs a Reduce, of an AllGather a ReduceScatter
#   (checked numerically);
# - the two **lower bounds** no algorithm beats (rounds and bytes), derived, and every
#   algorithm's distance from them;
# - why a round's cost depends on the links: the bidirectional ring halves the ring's
#   bandwidth time where each direction is a link of its own, and equals it on a switch.
#
# **Prerequisites:** notebooks 01-03 (the ring, the trees, the naive algorithms) and notebook
# 02, section 9 (recursive doubling, halving-doubling, Bruck, pairwise, hierarchical).
# **Notation:** n ranks, N bytes per rank.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
os.environ["JAXCOLL_CALIBRATE"] = "0"        # auto: the shipped calibrations, everywhere
import jax
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown

import jaxcoll
from jaxcoll import Schedule, Transfer
from jaxcoll.lowering.execute import after    # after(value, previous): value, after previous
import lesson                                 # tutorials/lesson.py: the notebooks' plumbing
from lesson import AXIS, n, on_every_rank

S = jaxcoll.schedule                           # S(primitive, algorithm, n, root=..., pieces=...)
NS = range(1, 17)                              # relations are checked for n = 1..16 ranks

# %% [markdown]
# ## 1. A schedule is data
#
# A schedule is a list of rounds; a round lists transfers `src->dst [chunks]`, `+` to add into
# the receiver's chunk, `=` to copy. The ring allreduce on 4 ranks:

# %%
print(S("allreduce", "ring", 4))

# %% [markdown]
# Three operations make new collectives out of old ones:
#
# - **concatenation** `a + b`: the rounds of `a`, then those of `b`;
# - **reversal** `s.reversed(name, reduce=...)`: the rounds in reverse order, every transfer
#   turned around; with `reduce=True` every copy becomes an add, so data that fanned out of a
#   root flows back into it, summed on the way;
# - **one per root**: n copies of a rooted collective, copy r rooted at rank r and working on
#   chunk r, one after another.
#
# `same`: the same transfers in the same rounds; `same_rounds`: in any order of rounds; `is_a`:
# `jaxcoll.verify` proves the schedule does what the primitive promises (every rank ends with
# exactly the promised data, each contribution counted once).

# %%
def same(a, b):
    return (a.n_ranks, a.n_chunks, a.rounds) == (b.n_ranks, b.n_chunks, b.rounds)


def same_rounds(a, b):
    def rounds(s):
        return sorted(sorted(map(str, r)) for r in s.rounds)
    return (a.n_ranks, a.n_chunks) == (b.n_ranks, b.n_chunks) and rounds(a) == rounds(b)


def is_a(schedule, primitive, root=0):
    try:
        jaxcoll.verify(dataclasses.replace(schedule, collective=primitive, root=root))
        return True
    except jaxcoll.ScheduleError:
        return False


def on_chunk(schedule, chunk, n_chunks):
    """A one-chunk schedule moved onto chunk `chunk` of an n_chunks buffer."""
    return Schedule.build(schedule.name, schedule.n_ranks, n_chunks=n_chunks, rounds=[
        [Transfer(t.src, t.dst, chunk, t.reduce) for t in r] for r in schedule.rounds])


def one_per_root(primitive, algorithm, n):
    parts = [on_chunk(S(primitive, algorithm, n, root=r), r, n) for r in range(n)]
    return sum(parts[1:], parts[0])


def transfers(schedule):
    return sorted(str(t) for r in schedule.rounds for t in r)


# %% [markdown]
# ## 2. The relations, checked
#
# `check` tries a relation for every n in 1..16 (and every root), fails if it does not hold,
# and keeps it for the figure.

# %%
CONCAT, EVERY_ROOT, REVERSED = "concatenation", "n of them", "reversed"
verified = []


def check(kind, parts, target, label, holds, ns=NS, rooted=False):
    cases = [(m, r) for m in ns for r in (range(m) if rooted else [None])]
    failed = [case for case in cases if not (holds(*case) if rooted else holds(case[0]))]
    assert not failed, f"{kind} {parts} -> {target} ({label}) fails at (n, root) = {failed[0]}"
    verified.append((kind, parts, target, label))
    said = {CONCAT: f"{target} = {' + '.join(parts)}", EVERY_ROOT: f"{target} = n x {parts[0]}",
            REVERSED: f"{parts[0]} reversed is a{'n' * (target[0] == 'a')} {target}"}[kind]
    where = ", ".join(map(str, ns)) if ns != NS else "1..16"
    print(f"holds for n = {where}{' and every root' if rooted else ''}: {said:<38} "
          f"({label.replace(chr(10), ' ')})")


def split_allreduce(algorithm, gather_with=None, shape=lambda n: n):
    """Is the allreduce the reduce_scatter + allgather of `algorithm` (on n, or shape(n))?"""
    return lambda n: same(S("allreduce", algorithm, shape(n)),
                          S("reduce_scatter", algorithm, shape(n))
                          + S("allgather", gather_with or algorithm, shape(n)))


both = ("reduce_scatter", "allgather")
for name in ("ring", "bidirectional_ring"):
    check(CONCAT, both, "allreduce", name, split_allreduce(name))
check(CONCAT, both, "allreduce", "halving_doubling (n = 2^k)",
      split_allreduce("halving_doubling", "recursive_doubling"), ns=[1, 2, 4, 8, 16])
check(CONCAT, both, "allreduce", "hierarchical (every outer x inner)",
      lambda n: all(split_allreduce("hierarchical", shape=lambda _: (o, n // o))(n)
                    for o in range(1, n + 1) if n % o == 0))
check(CONCAT, ("reduce", "broadcast"), "allreduce", "naive",
      lambda n: same(S("allreduce", "naive", n),
                     S("reduce", "naive", n) + S("broadcast", "naive", n)))
check(CONCAT, ("reduce", "broadcast"), "allreduce", "tree (1-3 pieces)",
      lambda n: all(same(S("allreduce", "tree", n, pieces=k),
                         S("reduce", "tree", n, pieces=k) + S("broadcast", "tree", n, pieces=k))
                    for k in (1, 2, 3)))
check(CONCAT, ("scatter", "allgather"), "broadcast", "scatter_allgather",
      lambda n, r: same(S("broadcast", "scatter_allgather", n, root=r),
                        S("scatter", "binomial", n, root=r) + S("allgather", "ring", n)),
      rooted=True)
check(CONCAT, ("reduce_scatter", "gather"), "reduce", "reduce_scatter_gather",
      lambda n, r: same(S("reduce", "reduce_scatter_gather", n, root=r),
                        S("reduce_scatter", "ring", n) + S("gather", "binomial", n, root=r)),
      rooted=True)

# %% [markdown]
# The first is the lecture's "AllReduce 是大哥，ReduceScatter 和 AllGather 是它的左右手"
# ("AllReduce is the big brother; ReduceScatter and AllGather are its left and right hands"),
# round for round. It also settles the bytes: the concatenation *is* the ring allreduce, so
# splitting an allreduce saves none (notebook 02).
#
# **One per root.** AllGather is n Broadcasts (the lecture: "AllGather 就是 Broadcast
# 的'全员版'", "the all-hands version of Broadcast"), ReduceScatter n Reduces. AllToAll is n
# Scatters; its buffer has 2n chunks (chunk c of the input is for rank c, chunk n + r receives
# from rank r), so the scatter from rank r writes into chunk n + r (`into=`).

# %%
def scatters_into_alltoall(n):
    parts = [Schedule.build("", n, n_chunks=2 * n, rounds=[
        [Transfer(r, t.dst, t.chunks, False, into=n + r) for t in rnd]
        for rnd in S("scatter", "naive", n, root=r).rounds]) for r in range(n)]
    return sum(parts[1:], parts[0])


for prim, target in [("broadcast", "allgather"), ("reduce", "reduce_scatter")]:
    check(EVERY_ROOT, (prim,), target, "naive, tree, binomial",
          lambda n, p=prim, t=target: all(is_a(one_per_root(p, a, n), t)
                                          for a in ("naive", "tree", "binomial")))
check(EVERY_ROOT, ("scatter",), "alltoall", "naive",
      lambda n: is_a(scatters_into_alltoall(n), "alltoall")
      and transfers(scatters_into_alltoall(n)) == transfers(S("alltoall", "naive", n)))

# %% [markdown]
# **Reversal.** A fan-out run backwards with adds is a fan-in: Broadcast into Reduce,
# AllGather into ReduceScatter; without the adds Scatter turns into Gather.

# %%
def reversed_is(source, target, algorithms, reduce, exactly=same, rooted=True):
    if rooted:
        return lambda n, r: all(exactly(S(target, a, n, root=r),
                                        S(source, a, n, root=r).reversed("", reduce=reduce))
                                for a in algorithms)
    return lambda n: all(is_a(S(source, a, n).reversed("", reduce=reduce), target)
                         for a in algorithms)


check(REVERSED, ("broadcast",), "reduce", "tree, binomial, chain",
      reversed_is("broadcast", "reduce", ("tree", "binomial", "chain"), True), rooted=True)
check(REVERSED, ("broadcast",), "reduce", "naive (rounds reordered)",
      reversed_is("broadcast", "reduce", ("naive",), True, same_rounds), rooted=True)
check(REVERSED, ("scatter",), "gather", "binomial",
      reversed_is("scatter", "gather", ("binomial",), False), rooted=True)
FOUR = {"allgather": ("ring", "recursive_doubling", "bruck", "bidirectional_ring"),
        "reduce_scatter": ("ring", "halving_doubling", "naive", "bidirectional_ring")}
for source, target, adds in [("allgather", "reduce_scatter", True),
                             ("reduce_scatter", "allgather", False)]:
    check(REVERSED, (source,), target, "{}, {},\n{}, {}".format(*FOUR[source]),
          reversed_is(source, target, FOUR[source], adds, rooted=False))

# %% [markdown]
# ### Plausible, but false
#
# Each check below must fail somewhere; we print where, and check the reason.

# %%
FALSE = {
    "halving_doubling allreduce = its two halves, for every n":
        split_allreduce("halving_doubling", "recursive_doubling"),
    "naive reduce = the naive broadcast reversed, round for round":
        lambda n: same(S("reduce", "naive", n),
                       S("broadcast", "naive", n).reversed("", reduce=True)),
    "the naive allgather reversed with adds is a reduce_scatter":
        lambda n: is_a(S("allgather", "naive", n).reversed("", reduce=True), "reduce_scatter"),
    "the ring allgather reversed = the ring reduce_scatter":
        lambda n: same(S("allgather", "ring", n).reversed("", reduce=True),
                       S("reduce_scatter", "ring", n)),
}
for statement, holds in FALSE.items():
    first = next((m for m in NS if not holds(m)), None)
    assert first is not None, statement
    print(f"FALSE at n = {first:<3} {statement}")

# the reasons:
for m in (3, 5, 6, 7):   # not a power of two: each half folds the extra ranks in and out itself
    halves = S("reduce_scatter", "halving_doubling", m) + S("allgather", "recursive_doubling", m)
    assert halves.n_rounds == S("allreduce", "halving_doubling", m).n_rounds + 2
backwards = S("broadcast", "naive", 4).reversed("", reduce=True)
assert [r.transfers[0].src for r in backwards.rounds] == [3, 2, 1]   # the reduce: 1, 2, 3
try:
    twice = S("allgather", "naive", 3).reversed("naive allgather reversed", reduce=True)
    jaxcoll.verify(dataclasses.replace(twice, collective="reduce_scatter"))
    raise AssertionError("expected a ScheduleError")
except jaxcoll.ScheduleError as error:
    print(error)
assert is_a(S("allgather", "ring", 8).reversed("", reduce=True), "reduce_scatter")  # the other way

# %% [markdown]
# Why: at n not a power of two the allreduce folds the extra ranks in once, while each half
# run alone folds and unfolds them itself (two more rounds); the naive broadcast reversed
# collects from ranks 3, 2, 1, jaxcoll's reduce from 1, 2, 3; the naive allgather sends each
# rank its own chunk back, a harmless copy that, reversed with adds, counts a chunk twice
# (`verify` says where); the ring allgather reversed is a correct reduce_scatter that turns
# the other way round.
#
# ## 3. Transposes, checked with `jax.vjp`
#
# A collective is a linear map from all ranks' inputs to all ranks' outputs, and for linear
# `f`, `jax.vjp(f, x)[1](ct)` is its transpose applied to `ct`. The transpose of "copy the
# root's x to everyone" is "add everyone's ct into the root": broadcastᵀ = reduce, scatterᵀ =
# gather, allgatherᵀ = reduce_scatter; allreduce and alltoall are their own. jaxcoll's
# transpose rules run the *dual* schedule (the reversal above). We compute `vjp` of A, run B
# on the same `ct` (8 ranks, root 5) and compare both with numpy. (`after` orders the two
# collectives of one program: docs/guide/typing.md, on jaxlib 0.10's CPU runtime.)

# %%
ROOT, m = 5, 3                                  # m values per block
rng = np.random.default_rng(0)


def ints(*shape):
    return rng.integers(-8, 9, size=shape).astype(np.float32)  # exact sums in any order


def at_root(values, shape):
    out = np.zeros(shape, np.float32)
    out[ROOT] = values
    return out


DUALS = [  # (A, B = Aᵀ, A's input, the cotangent, Aᵀ·ct in numpy)
    ("broadcast", "reduce", ints(n, m), ints(n, m), lambda ct: at_root(ct.sum(0), (n, m))),
    ("scatter", "gather", ints(n, n, m), ints(n, m), lambda ct: at_root(ct, (n, n, m))),
    ("allgather", "reduce_scatter", ints(n, m), ints(n, n * m), lambda ct: ct.sum(0).reshape(n, m)),
    ("alltoall", "alltoall", ints(n, n * m), ints(n, n * m),
     lambda ct: ct.reshape(n, n, m).transpose(1, 0, 2).reshape(n, n * m)),
    ("allreduce", "allreduce", ints(n, m), ints(n, m),
     lambda ct: np.broadcast_to(ct.sum(0), (n, m))),
]
CALLS = {"broadcast": lambda x: jaxcoll.broadcast(x, AXIS, root=ROOT),
         "reduce": lambda x: jaxcoll.reduce(x, AXIS, root=ROOT),
         "scatter": lambda x: jaxcoll.scatter(x, AXIS, root=ROOT),
         "gather": lambda x: jaxcoll.gather(x, AXIS, root=ROOT),
         "allgather": lambda x: jaxcoll.allgather(x, AXIS, tiled=True),
         "reduce_scatter": lambda x: jaxcoll.reduce_scatter(x, AXIS, tiled=True),
         "alltoall": lambda x: jaxcoll.alltoall(x, AXIS, split_dim=0, concat_dim=0, tiled=True),
         "allreduce": lambda x: jaxcoll.allreduce(x, AXIS)}
transposes = []
for a, b, x, ct, expected in DUALS:
    def program(x, ct, a=a, b=b):
        y, pullback = jax.vjp(on_every_rank(CALLS[a]), x)
        (transposed,) = pullback(after(ct, y))
        return transposed, on_every_rank(CALLS[b])(after(ct, transposed))
    transposed, dual = jax.jit(program)(x, ct)
    np.testing.assert_array_equal(transposed, expected(ct), err_msg=f"vjp of {a}")
    np.testing.assert_array_equal(dual, expected(ct), err_msg=b)
    transposes.append((a, b))
    print(f"jax.vjp of {a:<10} = {b} (exactly, on {n} ranks)")

# %% [markdown]
# ## 4. The figure
#
# Drawn from `verified` and `transposes` only (`lesson.relation_figure`), nothing added by
# hand, in three pictures. First the concatenations: each colour is one recipe, its arrows
# marked 1st and 2nd, the algorithms it holds for written under the picture.

# %%
recipes = {}                                    # (first, second, target) -> algorithms
for kind, parts, target, label in verified:
    if kind == CONCAT:
        recipes.setdefault((*parts, target), []).append(label.replace("\n", " "))
colours = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
lesson.relation_figure(
    [arrow for colour, (first, second, target) in zip(colours, recipes)
     for arrow in ((first, target, colour, "1st", "-|>"), (second, target, colour, "2nd", "-|>"))],
    title="Built by concatenation (checked for n = 1..16; halving_doubling: powers of 2)",
    legend=[(colour, f"{target} = {first} + {second}: {', '.join(recipes[first, second, target])}")
            for colour, (first, second, target) in zip(colours, recipes)])
plt.show()

# %% [markdown]
# Then "n of them, one per root" (dotted), and the mirror images: orange arrows are schedules
# run backwards, green double arrows transposes (`jax.vjp`).

# %%
lesson.relation_figure(
    [(parts[0], target, "tab:purple", f"×n: {label}", ":")
     for kind, parts, target, label in verified if kind == EVERY_ROOT],
    title="n of them, one per root (rank r's on chunk r)")
backwards = {}                                  # (source, target) -> algorithms
for kind, parts, target, label in verified:
    if kind == REVERSED:
        backwards.setdefault((parts[0], target), []).append(label)
lesson.relation_figure(
    [(a, b, "tab:green", "transposes", "<|-|>") for a, b in transposes if a != b]
    + [(a, b, "tab:orange", "reversed: " + ",\n".join(labels), "-|>")
       for (a, b), labels in backwards.items()],
    title="Mirror images: run backwards, and transposes", places=lesson.MIRROR_PLACES,
    notes={a: "its own transpose" for a, b in transposes if a == b})
plt.show()

# %% [markdown]
# AllReduce has two recipes. ReduceScatter + AllGather is the lecture's pair of hands.
# Reduce + Broadcast is its "Reduce then Broadcast", which it says nobody uses; the recipe is
# fine (down a pipelined binary tree it is NCCL's tree allreduce); the naive one is slow
# because all the traffic goes through one root. Every fan-in primitive has algorithms that
# are a fan-out run backwards (not every algorithm: the naive allgather above), and the same
# pairs are transposes.
#
# ## 5. What no algorithm can beat
#
# Count a schedule two ways: its **rounds**, each of which pays a start-up α, and its
# **bytes on the critical path** (per round, the largest transfer, summed), each paying β. Two
# lower bounds follow from what the primitive promises, whatever the algorithm, if each rank
# sends at most one message and receives at most one per round:
#
# - **Rounds ≥ ⌈log₂ n⌉.** A value known to k ranks is known to at most 2k after one more
#   round (each of the k sends it to at most one other). A broadcast must reach all n; in an
#   allreduce every result depends on all n inputs, and the inputs a rank has heard from
#   likewise at most double per round.
# - **Bytes ≥ what some rank must send.** In a reduce_scatter rank r's input holds n − 1
#   blocks that count towards other ranks' results, and additions only combine equal blocks,
#   so each must leave r: (n−1)/n·N. An allgather is the same backwards. An allreduce must do
#   both: 2(n−1)/n·N ([Patarasuk and Yuan, 2009](https://doi.org/10.1016/j.jpdc.2008.09.002)).
#   A broadcast's root must send all N bytes at least once (a reduce's root receive them).
#
# `jaxcoll.bounds(primitive, n, N)` gives both. The table puts every algorithm against them
# at n = 8 (the bytes in units of N; `hierarchical` on 2 x 4):

# %%
rows = ["| primitive | bound: rounds, bytes | algorithm: rounds, bytes on the path |",
        "|---|---|---|"]
for primitive in ["allreduce", "reduce_scatter", "allgather", "alltoall", "broadcast", "reduce",
                  "gather", "scatter"]:
    bound = jaxcoll.bounds(primitive, n, 1.0)
    found = {}
    for algorithm in sorted(set(jaxcoll.algorithms(primitive)) - {"auto", "xla"}):
        s = S(primitive, algorithm, (2, 4) if algorithm == "hierarchical" else n)
        path = jaxcoll.cost(s, 1.0, alpha=0, beta=1).seconds      # β = 1: seconds are bytes
        assert s.n_rounds >= bound.rounds and path >= bound.path_bytes - 1e-12, algorithm
        found[algorithm] = (s.n_rounds, path)
    assert min(r for r, _ in found.values()) == bound.rounds     # the rounds bound is met ...
    met = [a for a, (_, p) in found.items() if np.isclose(p, bound.path_bytes)]
    assert bool(met) == (primitive not in ("broadcast", "reduce"))  # ... the bytes bound mostly
    cells = ", ".join(f"{'**' if a in met else ''}{a}: {r}, {p:g}{'**' if a in met else ''}"
                      for a, (r, p) in sorted(found.items(), key=lambda item: item[1]))
    rows.append(f"| {primitive} | {bound.rounds}, {bound.path_bytes:g} | {cells} |")
    if primitive == "allreduce":
        assert not any(r == bound.rounds and np.isclose(p, bound.path_bytes)
                       for r, p in found.values())
Markdown("\n".join(rows))

# %% [markdown]
# (Bold: at the bytes bound.) Every primitive has an algorithm at the rounds bound, all but
# broadcast and reduce one at the bytes bound, and for allreduce none is at both: recursive
# doubling has the fewest rounds and 3·N, the ring and halving-doubling the fewest bytes in 14
# and 6 rounds. Choosing an algorithm is choosing which bound to miss, by how much
# (05_choosing_an_algorithm, section 1). Broadcast and reduce meet their bytes bound only in the
# limit: the chain cut into k pieces takes (n − 2 + k)·N/k, which tends to N:

# %%
for k in (1, 8, 64):
    chain = S("broadcast", "chain", n, pieces=k)
    path = jaxcoll.cost(chain, 1.0, alpha=0, beta=1).seconds
    assert np.isclose(path, (n - 2 + k) / k)
    print(f"chain broadcast in {k:>2} pieces: {path:.3f}·N on the path, {chain.n_rounds} rounds")

# %% [markdown]
# ## 6. A round's cost depends on the links: the bidirectional ring
#
# `jaxcoll.cost` prices a schedule as jaxcoll's executor runs it: one `ppermute` per
# *matching* (each rank sends at most one message and receives at most one), one after
# another. The bidirectional ring sends half the data each way round, so its rounds are two
# matchings each, and `cost` charges it 28 start-ups to the ring's 14, for the same bytes.
#
# `jaxcoll.simulate(schedule, N, topology)` prices a schedule on **links**: all transfers of a
# round at once (what one fused kernel can do), links shared in a round splitting their
# bandwidth; `concurrent=False` runs the matchings one after another, as jaxcoll's executor
# does. We compare three sets of links with the same α and β per link: a **ring** of
# full-duplex links (each direction its own link, as NVLink and TPU links are), a **2 x 4
# torus**, and a **switch** (one full-duplex port per rank). The α part and the β part are
# priced apart (β = 0, then α = 0):

# %%
alpha, beta, N = 5e-6, 1 / 100e9, 64 << 20   # assumed: 5 µs, 100 GB/s per link each way; 64 MiB
TOPOLOGIES = {"ring of links": jaxcoll.analysis.topology.ring(n, alpha=alpha, beta=beta),
              "2x4 torus": jaxcoll.analysis.topology.torus(2, 4, alpha=alpha, beta=beta),
              "switch": jaxcoll.analysis.topology.switch(n, alpha=alpha, beta=beta)}


def parts(algorithm, topology, concurrent=True):
    """(α part, β part) in µs of the allreduce on `topology`."""
    s = S("allreduce", algorithm, n)
    return tuple(jaxcoll.simulate(s, N, t, concurrent=concurrent).seconds * 1e6 for t in (
        dataclasses.replace(topology, beta=0 * topology.beta),
        dataclasses.replace(topology, alpha=0 * topology.alpha)))


print(f"allreduce of {N >> 20} MiB on {n} ranks: (α part, β part) in µs")
priced, one_by_one = {}, {}
for name, topology in TOPOLOGIES.items():
    for algorithm in ("ring", "bidirectional_ring"):
        priced[name, algorithm] = parts(algorithm, topology)
        one_by_one[name, algorithm] = parts(algorithm, topology, concurrent=False)
        print(f"  {name:<14} {algorithm:<19} all at once {priced[name, algorithm][0]:5.0f} + "
              f"{priced[name, algorithm][1]:6.0f}   one matching at a time "
              f"{one_by_one[name, algorithm][0]:5.0f} + {one_by_one[name, algorithm][1]:6.0f}")
    ring_, bidir = one_by_one[name, "ring"], one_by_one[name, "bidirectional_ring"]
    assert np.isclose(bidir[1], ring_[1]) and np.isclose(bidir[0], 2 * ring_[0])  # no gain

ring_, bidir = priced["ring of links", "ring"], priced["ring of links", "bidirectional_ring"]
assert np.isclose(bidir[0], ring_[0]) and np.isclose(bidir[1], ring_[1] / 2)  # half the β part
assert np.allclose(priced["switch", "bidirectional_ring"], priced["switch", "ring"])  # one port
assert sum(priced["2x4 torus", "bidirectional_ring"]) < sum(priced["2x4 torus", "ring"])
started = {}
for algorithm in ("ring", "bidirectional_ring"):      # one matching at a time on a switch = cost()
    s = S("allreduce", algorithm, n)
    c = jaxcoll.cost(s, N, alpha=alpha, beta=beta)
    assert np.isclose(jaxcoll.simulate(s, N, TOPOLOGIES["switch"], concurrent=False).seconds,
                      c.seconds)
    started[algorithm] = c.messages
assert started["bidirectional_ring"] == 2 * started["ring"] == 4 * (n - 1)
print("on the ring of links, the choice on paper:",
      jaxcoll.choose("allreduce", n, N, topology=TOPOLOGIES["ring of links"]))

torus = TOPOLOGIES["2x4 torus"]                       # rank = row·4 + column
hops = [len(torus.route(r, (r + 1) % n)) for r in range(n)]
assert hops == [1, 1, 1, 2, 1, 1, 1, 2], hops         # 3 -> 4 and 7 -> 0: two links each
print("3 -> 4 crosses", torus.route(3, 4), "; 7 -> 0 crosses", torus.route(7, 0))
snake = [0, 1, 2, 3, 7, 6, 5, 4]                      # a ring of neighbours on the torus


ring8 = S("allreduce", "ring", n)                     # rank r's part played by snake[r]:
snake_ring = Schedule.build("snake ring", n, n_chunks=n, rounds=[
    [Transfer(snake[t.src], snake[t.dst], t.chunks, t.reduce) for t in r] for r in ring8.rounds])
assert is_a(snake_ring, "allreduce")
snake_parts = tuple(jaxcoll.simulate(snake_ring, N, dataclasses.replace(torus, **{k: 0 * getattr(torus, k)})).seconds * 1e6
                    for k in ("beta", "alpha"))
assert np.isclose(snake_parts[0], priced["ring of links", "ring"][0])          # α part: 70, not 140
assert np.isclose(snake_parts[1], priced["2x4 torus", "ring"][1])
print(f"ring in the order {snake} on the torus: {snake_parts[0]:.0f} + {snake_parts[1]:.0f} µs")

# %% [markdown]
# **Why the torus doubles the ring's α part.** The ring sends r → r + 1, and on a 2 x 4
# torus (rank = row·4 + column) two of those steps are not neighbours: 3 → 4 and 7 → 0 change
# row *and* column, so their messages cross two links and pay α twice. Every round waits for
# its slowest transfer, so every round pays 2α: 140 µs instead of 70. The bytes still cross
# each link once, so the β part is unchanged. Laid along a cycle of neighbours,
# 0-1-2-3-7-6-5-4, the same ring pays α once per round again (the last line above).
#
# On the ring of links the bidirectional ring's bandwidth time is **half** the ring's: the
# ring leaves every link's reverse direction idle. On a switch both directions leave a rank by
# one port, and the two take the same time. Run one matching at a time, as jaxcoll's executor
# does, the gain is gone on every set of links: the same β part, twice the start-ups (on a
# switch that is exactly `jaxcoll.cost`). So the bidirectional ring is the better algorithm
# wherever each direction is a link of its own (TPU torus links, GPUs joined by direct NVLink
# links), if both directions run at once (notebook 07 does that with `allgather_matmul`).
#
# ## Summary
#
# - Every arrow of the figures is checked on the schedules; fan-ins are fan-outs reversed,
#   and the same pairs are transposes (`jax.vjp`).
# - Every algorithm needs ⌈log₂ n⌉ rounds and the bytes some rank must send; no allreduce
#   meets both at n = 8 (at n = 2 recursive doubling does).
# - A round's cost depends on the links: how many each message crosses (the torus) and
#   whether both directions of a link work at once (the bidirectional ring).
#
# ## Try it
#
# AllToAll is n Scatters, one from each rank. Is it also n **Gathers**, one into each rank?
# Write `gathers_into_alltoall(n)` the way `scatters_into_alltoall` is written; the check
# asks `is_a(..., "alltoall")` for n = 1..16 and compares the transfers with the naive
# alltoall's.
#
# *Hint:* start from `S("gather", "naive", n, root=r)`. Its transfer `t` carries rank `t.src`'s
# chunk for r; in the alltoall buffer that is chunk r of rank `t.src`, and rank r keeps it in
# chunk n + `t.src`.
#
# <details><summary>Answer</summary>
#
# ```python
# def gathers_into_alltoall(n):
#     parts = [Schedule.build("", n, n_chunks=2 * n, rounds=[
#         [Transfer(t.src, r, r, False, into=n + t.src) for t in rnd]
#         for rnd in S("gather", "naive", n, root=r).rounds]) for r in range(n)]
#     return sum(parts[1:], parts[0])
# ```
# It holds, with the same transfers: n Gathers are an AllToAll too. Add it with
# `check(EVERY_ROOT, ("gather",), "alltoall", "naive", ...)` and redraw the figure.
# </details>

# %%
def gathers_into_alltoall(n):
    raise NotImplementedError("your code here")


try:
    for m in NS:
        built = gathers_into_alltoall(m)
        assert is_a(built, "alltoall"), f"n={m}: not an alltoall"
        assert transfers(built) == transfers(S("alltoall", "naive", m)), f"n={m}: other transfers"
    print("right: n gathers, one into each rank, make an alltoall (the naive one's transfers)")
except NotImplementedError:
    print("not done yet: fill in gathers_into_alltoall")
