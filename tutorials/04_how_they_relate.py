# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 04 · How the primitives relate: the seed's missing figure, drawn from the schedules
#
# The seed lecture ends with "最后，我画了一张图，帮你理清这些原语的关系" ("Finally, I drew a
# figure to help you sort out how these primitives relate"). The figure is not there. What
# follows is "AllReduce 是大哥，ReduceScatter 和 AllGather 是它的左右手" ("AllReduce is the big
# brother; ReduceScatter and AllGather are its left and right hands").
#
# This notebook draws that figure. We do not draw it by hand: every arrow is a relation that
# code has checked. That is possible because in jaxcoll every algorithm is a *schedule*, plain
# data that can be compared, concatenated, run backwards and proved correct without a device.
#
# **What you will learn**
#
# - three ways to build a collective from others: **concatenation** (`a + b`), **reversal**
#   (`Schedule.reversed`) and **one per root** (n rooted collectives, one from each rank);
# - which relations between the 8 primitives hold, for n = 1..16 and every root, and which
#   plausible ones do not;
# - the **duality** pairs: Broadcast/Reduce, Scatter/Gather and AllGather/ReduceScatter are
#   each other's *transposes*, so `jax.vjp` of one runs the other (checked numerically);
# - the cost of every algorithm at n = 8 (rounds, bytes, reductions) next to the textbook α-β-γ
#   formulas, with an assert for each.
#
# **Prerequisites:** Python and numpy. Tutorials 01-03 help, but they are not needed: every
# schedule is printed where it is used, and the algorithms are listed below.
#
# **Notation.** The seed writes N for the number of ranks; here **n = the number of ranks** and
# **N = the bytes per rank** (section 5 says exactly which buffer).
#
# **The algorithms, one line each** (the README has a paragraph on each):
#
# - `naive`: everything goes through one root, one rank at a time.
# - `ring`: every rank sends to its right-hand neighbour, one chunk per round, n - 1 rounds per
#   half (reduce_scatter, then allgather).
# - `bidirectional_ring`: half of the data goes round the ring each way at once.
# - `tree`: the seed's binary heap tree (the parent of rank r is (r - 1) // 2).
#   `double_tree`: NCCL's two trees, each carrying half of the data.
# - `binomial`: a tree in which every rank that holds the data passes it on in every round,
#   ceil(log2 n) rounds.
# - `recursive_doubling`: partners at distance 1, 2, 4, ... swap data (log2 n rounds).
#   `halving_doubling` (Rabenseifner): a reduce_scatter by recursive halving, then an allgather
#   by recursive doubling.
# - `bruck`: an allgather or alltoall in ceil(log2 n) rounds for any n.
# - `hierarchical`: for ranks laid out as (outer, inner), such as (nodes, GPUs per node): rings
#   inside each node and across nodes. Its schedule takes the pair `(o, n // o)` instead of n.
# - `scatter_allgather` (van de Geijn) and `reduce_scatter_gather` (Rabenseifner): a broadcast
#   and a reduce for large messages, built from the other primitives (section 2).

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
import jax
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

# %%
import dataclasses
import math
from collections import defaultdict

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch

import jaxcoll
from jaxcoll import Schedule, Transfer
from jaxcoll.execute import after     # after(value, previous): value, made to wait for previous

S = jaxcoll.schedule                   # S(primitive, algorithm, n, root=...) -> a Schedule
NS = range(1, 17)                      # every relation is checked for n = 1..16 ranks
PRIMITIVES = ["allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "gather",
              "scatter", "alltoall"]

# %% [markdown]
# ## 1. A schedule is data
#
# A schedule lists rounds; a round lists transfers `src->dst [chunks]`, with `=` for a copy and
# `+` for "add into the receiver's chunk" (a *chunk* is one of the equal pieces a schedule cuts
# the buffer into). All transfers of a round happen at the same time. Here are the ring
# allreduce on 4 ranks and its two halves:

# %%
print(S("reduce_scatter", "ring", 4))
print(S("allgather", "ring", 4))
print(S("allreduce", "ring", 4))

# %% [markdown]
# Three operations on schedules build new collectives out of old ones:
#
# - **Concatenation** `a + b`: the rounds of `a`, then the rounds of `b`.
# - **Reversal** `s.reversed(name, reduce=...)`: the rounds in reverse order, every transfer
#   turned around (dst sends to src). With `reduce=True` each copy becomes an add, so data that
#   fanned out of a root now flows back into it, summed on the way.
# - **One per root**: n copies of a rooted collective, copy r rooted at rank r and working on
#   chunk r of an n-chunk buffer, run one after another. `on_chunk` moves a one-chunk schedule
#   onto chunk r.
#
# What counts as "the same"? `same` asks for the same transfers in the same rounds. `same_rounds`
# allows the rounds in another order. That is enough where the order cannot change what anyone
# ends with, as in the naive algorithms, where each round moves a different rank's data to or
# from the root. (For a reduce the order of the additions changes, which only matters for
# floating-point rounding.) `is_a` asks jaxcoll's symbolic checker
# (`jaxcoll.verify`) whether a schedule does what a primitive promises: every rank must end with
# exactly the promised data, every contribution counted once.

# %%
def same(a, b):
    """The same transfers in the same rounds."""
    return (a.n_ranks, a.n_chunks, a.rounds) == (b.n_ranks, b.n_chunks, b.rounds)


def round_set(schedule):
    """The rounds as a sorted list of sorted transfer strings (order forgotten)."""
    return sorted(tuple(sorted(map(str, round_))) for round_ in schedule.rounds)


def same_rounds(a, b):
    """The same rounds, possibly in another order."""
    return (a.n_ranks, a.n_chunks) == (b.n_ranks, b.n_chunks) and round_set(a) == round_set(b)


def is_a(schedule, primitive, root=0):
    """True if jaxcoll.verify proves that `schedule` does what `primitive` promises."""
    try:
        jaxcoll.verify(dataclasses.replace(schedule, primitive=primitive, root=root))
        return True
    except jaxcoll.ScheduleError:
        return False


def on_chunk(schedule, chunk, n_chunks):
    """A one-chunk schedule moved onto chunk `chunk` of an n_chunks buffer."""
    rounds = [[Transfer(t.src, t.dst, chunk, t.reduce) for t in round_]
              for round_ in schedule.rounds]
    return Schedule.build(schedule.name, schedule.n_ranks, n_chunks=n_chunks, rounds=rounds)


def whole_buffer(schedule, n_chunks):
    """A one-chunk schedule moving all n_chunks chunks wherever it moved its one chunk."""
    rounds = [[Transfer(t.src, t.dst, range(n_chunks), t.reduce) for t in round_]
              for round_ in schedule.rounds]
    return Schedule.build(schedule.name, schedule.n_ranks, n_chunks=n_chunks, rounds=rounds)


def one_per_root(primitive, algorithm, n):
    """n rooted schedules, the one rooted at r working on chunk r, one after another."""
    parts = [on_chunk(S(primitive, algorithm, n, root=r), r, n) for r in range(n)]
    return sum(parts[1:], parts[0])                     # parts[0] + parts[1] + ...


print(one_per_root("broadcast", "binomial", 4))

# %% [markdown]
# Printed above: four binomial broadcasts, each from a different rank and each on its own
# chunk. Every rank ends with every rank's chunk, which is an allgather. The seed says as much in
# words: "AllGather 就是 Broadcast 的'全员版'" ("AllGather is just the all-hands version of
# Broadcast").
#
# ## 2. The relations, checked
#
# Each relation we expect is written below as a `Relation`: a statement, the check as code, how
# the figure draws it (`CONCAT`: `target` = `parts[0] + parts[1]`; `EVERY_ROOT`: `target` = n
# of `parts[0]`, one per root; `REVERSED`: `parts[0]` run backwards is a `target`), the
# algorithms it holds for, and the ranks it must hold for. Checks of rooted primitives take the
# root and are run for every root. `check` runs a list of relations, prints a verdict for each,
# and collects the ones that hold for the figure in section 4. There are four lists:
# concatenations, one per root, reversals, and four plausible relations that are false.

# %%
CONCAT, EVERY_ROOT, REVERSED = "concatenation", "n of them", "reversed"


@dataclasses.dataclass
class Relation:
    statement: str
    check: object              # check(n) -> bool, or check(n, root) -> bool if rooted
    kind: str = ""             # CONCAT, EVERY_ROOT or REVERSED: how the figure draws it
    parts: tuple = ()          # what it is built from (CONCAT: first part, second part)
    target: str = ""           # what it builds
    label: str = ""            # the algorithms it holds for, written in the figure
    rooted: bool = False
    ns: object = NS
    expect_false: bool = False
    drawn: bool = True         # False: listed here, left out of the figure


def first_failure(relation):
    """The first n (or (n, root)) where the relation's check fails; None if it never does."""
    for n in relation.ns:
        for root in (range(n) if relation.rooted else [None]):
            holds = relation.check(n, root) if relation.rooted else relation.check(n)
            if not holds:
                return n if root is None else (n, root)
    return None


verified = []          # the relations that hold and are drawn in section 4


def check(relations):
    """Check each relation, print its verdict, and keep the true ones for the figure."""
    for relation in relations:
        failure = first_failure(relation)
        if relation.expect_false:
            assert failure is not None, f"expected a counterexample: {relation.statement}"
            where = f"n = {failure}" if not relation.rooted else "n, root = %d, %d" % failure
            verdict = f"FALSE at {where}"
        else:
            assert failure is None, f"{relation.statement}: fails at {failure}"
            if relation.drawn:
                verified.append(relation)
            ns = "n = 1..16" if relation.ns == NS else "n = " + ", ".join(map(str, relation.ns))
            verdict = f"holds, {ns}" + (", all roots" if relation.rooted else "")
        print(f"{verdict:<30} {relation.statement}")


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def power_of_two(n):
    return n & (n - 1) == 0


# %% [markdown]
# ### 2a. Concatenation: one collective, then another
#
# AllReduce = ReduceScatter + AllGather (the seed's "left and right hands") and AllReduce =
# Reduce + Broadcast (the seed's "Reduce then Broadcast"). Broadcast and Reduce for large
# messages are built the same way, from Scatter + AllGather and ReduceScatter + Gather. The last
# two are the naive allgather and reduce_scatter, which push the *whole* buffer through rank 0
# (`whole_buffer`); they hold, but the figure leaves them out, since nobody would build an
# allgather that way.

# %%
CONCATENATIONS = [
    Relation("ring allreduce = ring reduce_scatter + ring allgather",
             lambda n: same(S("allreduce", "ring", n),
                            S("reduce_scatter", "ring", n) + S("allgather", "ring", n)),
             CONCAT, ("reduce_scatter", "allgather"), "allreduce", "ring"),
    Relation("bidirectional_ring allreduce = its reduce_scatter + its allgather",
             lambda n: same(S("allreduce", "bidirectional_ring", n),
                            S("reduce_scatter", "bidirectional_ring", n)
                            + S("allgather", "bidirectional_ring", n)),
             CONCAT, ("reduce_scatter", "allgather"), "allreduce", "bidirectional_ring"),
    Relation("halving_doubling allreduce = halving reduce_scatter + doubling allgather, n = 2^k",
             lambda n: same(S("allreduce", "halving_doubling", n),
                            S("reduce_scatter", "halving_doubling", n)
                            + S("allgather", "recursive_doubling", n)),
             CONCAT, ("reduce_scatter", "allgather"), "allreduce", "halving_doubling (n = 2^k)",
             ns=[n for n in NS if power_of_two(n)]),
    Relation("hierarchical allreduce = its reduce_scatter + its allgather, every (outer, inner)",
             lambda n: all(same(S("allreduce", "hierarchical", (o, n // o)),
                                S("reduce_scatter", "hierarchical", (o, n // o))
                                + S("allgather", "hierarchical", (o, n // o)))
                           for o in divisors(n)),
             CONCAT, ("reduce_scatter", "allgather"), "allreduce", "hierarchical"),
    Relation("naive allreduce = naive reduce + naive broadcast (the seed's Reduce then Broadcast)",
             lambda n: same(S("allreduce", "naive", n),
                            S("reduce", "naive", n) + S("broadcast", "naive", n)),
             CONCAT, ("reduce", "broadcast"), "allreduce", "naive"),
    Relation("tree allreduce = tree reduce + tree broadcast, with 1, 2 or 3 pipeline pieces",
             lambda n: all(same(S("allreduce", "tree", n, pieces=k),
                                S("reduce", "tree", n, pieces=k)
                                + S("broadcast", "tree", n, pieces=k))
                           for k in (1, 2, 3)),
             CONCAT, ("reduce", "broadcast"), "allreduce", "tree"),
    Relation("scatter_allgather broadcast = binomial scatter + ring allgather (van de Geijn)",
             lambda n, root: same(S("broadcast", "scatter_allgather", n, root=root),
                                  S("scatter", "binomial", n, root=root)
                                  + S("allgather", "ring", n)),
             CONCAT, ("scatter", "allgather"), "broadcast", "scatter_allgather", rooted=True),
    Relation("reduce_scatter_gather reduce = ring reduce_scatter + binomial gather (Rabenseifner)",
             lambda n, root: same(S("reduce", "reduce_scatter_gather", n, root=root),
                                  S("reduce_scatter", "ring", n)
                                  + S("gather", "binomial", n, root=root)),
             CONCAT, ("reduce_scatter", "gather"), "reduce", "reduce_scatter_gather",
             rooted=True),
    Relation("naive allgather = naive gather + naive broadcast of the whole buffer",
             lambda n: same(S("allgather", "naive", n),
                            S("gather", "naive", n) + whole_buffer(S("broadcast", "naive", n), n)),
             CONCAT, ("gather", "broadcast"), "allgather", "naive", drawn=False),
    Relation("naive reduce_scatter = naive reduce of the whole buffer + naive scatter",
             lambda n: same(S("reduce_scatter", "naive", n),
                            whole_buffer(S("reduce", "naive", n), n) + S("scatter", "naive", n)),
             CONCAT, ("reduce", "scatter"), "reduce_scatter", "naive", drawn=False),
]
check(CONCATENATIONS)

# %% [markdown]
# ### 2b. One per root
#
# n rooted collectives, the one rooted at rank r working on chunk r. For AllToAll one more
# detail is needed. An alltoall buffer has 2n chunks: chunks 0..n-1 hold the rank's input
# (chunk c is for rank c) and chunk n + r receives what rank r sends. So the scatter from rank r
# writes into chunk n + r, not over the receiver's input (`into=n + r`).

# %%
def scatters_into_alltoall(n):
    """n naive scatters, the one from rank r sending its chunk c to rank c, into chunk n + r
    (the alltoall buffer: chunks 0..n-1 are the input, chunk n + r receives from rank r)."""
    parts = [Schedule.build("", n, n_chunks=2 * n, rounds=[
        [Transfer(r, t.dst, t.chunks, False, into=n + r) for t in round_]
        for round_ in S("scatter", "naive", n, root=r).rounds]) for r in range(n)]
    return sum(parts[1:], parts[0])


def transfers(schedule):
    """Every transfer of a schedule, rounds forgotten."""
    return sorted(str(t) for round_ in schedule.rounds for t in round_)


ONE_PER_ROOT = [
    Relation("n broadcasts, one from each rank, make an allgather (naive, tree, binomial)",
             lambda n: all(is_a(one_per_root("broadcast", a, n), "allgather")
                           for a in ("naive", "tree", "binomial")),
             EVERY_ROOT, ("broadcast",), "allgather", "naive, tree, binomial"),
    Relation("n reduces, one into each rank, make a reduce_scatter (naive, tree, binomial)",
             lambda n: all(is_a(one_per_root("reduce", a, n), "reduce_scatter")
                           for a in ("naive", "tree", "binomial")),
             EVERY_ROOT, ("reduce",), "reduce_scatter", "naive, tree, binomial"),
    Relation("n naive scatters, one from each rank, make an alltoall: the pairwise one's transfers",
             lambda n: is_a(scatters_into_alltoall(n), "alltoall")
             and transfers(scatters_into_alltoall(n)) == transfers(S("alltoall", "naive", n)),
             EVERY_ROOT, ("scatter",), "alltoall", "naive"),
]
check(ONE_PER_ROOT)

# %% [markdown]
# ### 2c. Reversal: a schedule run backwards
#
# Run a fan-out backwards, with copies turned into adds, and you get a fan-in: broadcast into
# reduce, allgather into reduce_scatter. Without the adds, scatter turns into gather and
# reduce_scatter into allgather.

# %%
REVERSALS = [
    Relation("tree and binomial reduce = their broadcast reversed, copies made adds",
             lambda n, root: all(same(S("reduce", a, n, root=root),
                                      S("broadcast", a, n, root=root).reversed("", reduce=True))
                                 for a in ("tree", "binomial")),
             REVERSED, ("broadcast",), "reduce", "tree, binomial", rooted=True),
    Relation("naive reduce = the naive broadcast reversed, up to the order of rounds",
             lambda n, root: same_rounds(
                 S("reduce", "naive", n, root=root),
                 S("broadcast", "naive", n, root=root).reversed("", reduce=True)),
             REVERSED, ("broadcast",), "reduce", "naive (rounds reordered)", rooted=True),
    Relation("binomial gather = the binomial scatter reversed",
             lambda n, root: same(
                 S("gather", "binomial", n, root=root),
                 S("scatter", "binomial", n, root=root).reversed("", reduce=False)),
             REVERSED, ("scatter",), "gather", "binomial", rooted=True),
    Relation("naive gather = the naive scatter reversed, up to the order of rounds",
             lambda n, root: same_rounds(
                 S("gather", "naive", n, root=root),
                 S("scatter", "naive", n, root=root).reversed("", reduce=False)),
             REVERSED, ("scatter",), "gather", "naive (rounds reordered)", rooted=True),
    Relation("an allgather reversed with adds is a reduce_scatter "
             "(ring, recursive_doubling, bruck, bidirectional_ring)",
             lambda n: all(is_a(S("allgather", a, n).reversed("", reduce=True), "reduce_scatter")
                           for a in ("ring", "recursive_doubling", "bruck", "bidirectional_ring")),
             REVERSED, ("allgather",), "reduce_scatter",
             "ring, recursive_doubling,\nbruck, bidirectional_ring"),
    Relation("a reduce_scatter reversed with copies is an allgather "
             "(ring, halving_doubling, naive, bidirectional_ring)",
             lambda n: all(is_a(S("reduce_scatter", a, n).reversed("", reduce=False), "allgather")
                           for a in ("ring", "halving_doubling", "naive", "bidirectional_ring")),
             REVERSED, ("reduce_scatter",), "allgather",
             "ring, halving_doubling,\nnaive, bidirectional_ring"),
]
check(REVERSALS)

# %% [markdown]
# ### 2d. Plausible, but false
#
# Four relations that look right. Their checks must fail, and `check` prints where.

# %%
FALSE_ONES = [
    Relation("halving_doubling allreduce = its two halves, for every n",
             lambda n: same(S("allreduce", "halving_doubling", n),
                            S("reduce_scatter", "halving_doubling", n)
                            + S("allgather", "recursive_doubling", n)), expect_false=True),
    Relation("naive reduce = the naive broadcast reversed, round for round",
             lambda n, root: same(S("reduce", "naive", n, root=root),
                                  S("broadcast", "naive", n, root=root).reversed("", reduce=True)),
             rooted=True, expect_false=True),
    Relation("the naive allgather reversed with adds is a reduce_scatter",
             lambda n: is_a(S("allgather", "naive", n).reversed("", reduce=True), "reduce_scatter"),
             expect_false=True),
    Relation("the ring allgather reversed = the ring reduce_scatter, transfer for transfer",
             lambda n: same(S("allgather", "ring", n).reversed("", reduce=True),
                            S("reduce_scatter", "ring", n)), expect_false=True),
]
check(FALSE_ONES)

# %% [markdown]
# Why they fail:
#
# - **halving_doubling at n that is not a power of two.** The allreduce folds the extra ranks
#   into partners once, before the reduce-scatter, and unfolds them once, after the allgather.
#   Each half run on its own folds and unfolds too, so the concatenation has two extra rounds
#   in the middle: the reduce-scatter's unfold and the allgather's fold.
# - **naive reduce, round for round.** The naive broadcast sends to ranks 1, 2, ... in that
#   order, so its reversal collects from ..., 2, 1. jaxcoll's naive reduce collects from 1, 2, ...
#   They agree as sets of rounds (section 1).
# - **naive allgather reversed.** Its second half sends *every* chunk to every rank, so each
#   rank also gets back its own chunk, a harmless copy. Run backwards with adds, that copy adds a
#   rank's block into itself twice, and `jaxcoll.verify` names the round, rank and chunk.
# - **the ring allgather reversed** is a correct reduce_scatter (`is_a` proves it in 2c), but
#   not jaxcoll's ring reduce_scatter: run backwards, the data goes round the ring the other
#   way.
#
# The code below checks the first three explanations:

# %%
for n_ranks in [n for n in NS if not power_of_two(n)]:
    halves = (S("reduce_scatter", "halving_doubling", n_ranks)
              + S("allgather", "recursive_doubling", n_ranks))
    assert halves.n_rounds == S("allreduce", "halving_doubling", n_ranks).n_rounds + 2

backwards = S("broadcast", "naive", 4).reversed("naive broadcast reversed", reduce=True)
print(backwards)
print(S("reduce", "naive", 4))
assert same_rounds(backwards, S("reduce", "naive", 4))
assert [r.transfers[0].src for r in backwards.rounds] == [3, 2, 1]

try:
    jaxcoll.verify(dataclasses.replace(S("allgather", "naive", 3).reversed("naive allgather "
                                                                           "reversed", reduce=True),
                                       primitive="reduce_scatter"))
    raise AssertionError("expected a ScheduleError")
except jaxcoll.ScheduleError as error:
    print(error)

# %% [markdown]
# ## 3. Duality: transposes, checked with `jax.vjp`
#
# Every collective here is a *linear* map from all ranks' inputs to all ranks' outputs. A linear
# map has a transpose (its matrix, transposed), and reverse-mode autodiff computes exactly that:
# for a linear `f`, `jax.vjp(f, x)[1](ct)` is `fᵀ·ct`. The transpose of "copy the root's x to
# everyone" is "add everyone's ct into the root": broadcastᵀ = reduce. Likewise scatterᵀ =
# gather and allgatherᵀ = reduce_scatter, while allreduce and alltoall are their own transposes.
# Transposing twice gives the map back, so each pair works in both directions.
#
# This is the same idea as `Schedule.reversed`. Each jaxcoll collective is a JAX primitive
# whose transpose rule runs the *dual schedule* (`jaxcoll.symbolic.dual`: rounds reversed,
# every transfer turned around, a copy's transpose adding into its source): the gradient of
# jaxcoll's broadcast *is* a reduce, one collective, and `verify` proves every dual.
#
# We check each pair numerically, on 8 fake devices (the mesh axis is named `"i"`), from root 5.
# Each program computes `vjp(A)(ct)` and runs jaxcoll's B on the same `ct`; both are compared
# with the answer computed in numpy. `on_every_rank` runs a per-rank function under `shard_map`
# (rank r gets row r). The results are returned per rank (`out_specs=P("i")`), so shard_map's
# replication check (`check_vma`) can stay on; see the README's
# [sharp bit](../README.md#sharp-bit-check_vma-typed-like-lax). Several
# collectives in one program are chained with `after` because of a CPU-only jaxlib 0.10 bug
# (the README's
# [sharp bit](../README.md#sharp-bit-jaxlib-010-on-cpu-runs-independent-collectives-into-each-other)).
# (`jax.linear_transpose` says the same thing more directly, and works on jaxcoll's
# collectives too.)

# %%
n, AXIS, ROOT = 8, "i", 5
mesh = Mesh(np.array(jax.devices()), (AXIS,))
rng = np.random.default_rng(0)


def on_every_rank(fn):
    """jit(shard_map(fn)): rank r runs fn on row r of the input; its result is row r of the output."""
    return jax.jit(jax.shard_map(lambda rows: fn(rows[0])[None],   # rows: (1, ...) on each rank
                                 mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)))


def transpose_and_dual(A, B, x, ct):
    """(the transpose of A at ct, computed by jax.vjp; B run on ct), in one jitted program."""
    def program(x, ct):
        y, pullback = jax.vjp(on_every_rank(A), x)
        (transposed,) = pullback(after(ct, y))        # the backward pass runs after the forward
        return transposed, on_every_rank(B)(after(ct, transposed))
    return jax.jit(program)(x, ct)


def ints(*shape):
    """Small integers as float32: sums are exact in any order."""
    return rng.integers(-8, 9, size=shape).astype(np.float32)


# %%
def zeros_but_root(row, shape):
    out = np.zeros(shape, np.float32)
    out[ROOT] = row
    return out


m = 3                                                   # values per block (block = chunk)
DUALS = [  # (A, its transpose B, x, ct, the transpose computed in numpy)
    ("broadcast", "reduce",
     lambda x: jaxcoll.broadcast(x, AXIS, root=ROOT, algorithm="binomial"),
     lambda c: jaxcoll.reduce(c, AXIS, root=ROOT, algorithm="binomial"),
     ints(n, m), ints(n, m), lambda ct: zeros_but_root(ct.sum(0), (n, m))),
    ("scatter", "gather",
     lambda x: jaxcoll.scatter(x, AXIS, root=ROOT, algorithm="binomial"),
     lambda c: jaxcoll.gather(c, AXIS, root=ROOT, algorithm="binomial"),
     ints(n, n, m), ints(n, m), lambda ct: zeros_but_root(ct, (n, n, m))),
    ("allgather", "reduce_scatter",
     lambda x: jaxcoll.allgather(x, AXIS, tiled=True, algorithm="ring"),
     lambda c: jaxcoll.reduce_scatter(c, AXIS, tiled=True, algorithm="ring"),
     ints(n, m), ints(n, n * m), lambda ct: ct.sum(0).reshape(n, m)),
    ("alltoall", "alltoall",
     lambda x: jaxcoll.alltoall(x, AXIS, split_dim=0, concat_dim=0, tiled=True, algorithm="bruck"),
     lambda c: jaxcoll.alltoall(c, AXIS, split_dim=0, concat_dim=0, tiled=True, algorithm="bruck"),
     ints(n, n * m), ints(n, n * m),
     lambda ct: ct.reshape(n, n, m).transpose(1, 0, 2).reshape(n, n * m)),  # block (r,s)->(s,r)
    ("allreduce", "allreduce",
     lambda x: jaxcoll.allreduce(x, AXIS, algorithm="ring"),
     lambda c: jaxcoll.allreduce(c, AXIS, algorithm="ring"),
     ints(n, m), ints(n, m), lambda ct: np.broadcast_to(ct.sum(0), (n, m))),
]
transposes = []
for a_name, b_name, A, B, x, ct, numpy_answer in DUALS:
    transposed, dual = transpose_and_dual(A, B, x, ct)
    np.testing.assert_array_equal(transposed, numpy_answer(ct), err_msg=f"vjp of {a_name}")
    np.testing.assert_array_equal(dual, numpy_answer(ct), err_msg=f"{b_name}")
    transposes.append((a_name, b_name))
    print(f"jax.vjp of {a_name:<10} = {b_name:<15} (exactly, on {n} ranks; root {ROOT})")

# %% [markdown]
# JAX's own built-ins follow the same rule. Tracing the backward pass of `lax.all_gather` shows a
# `reduce_scatter` (that is `psum_scatter`), and the backward pass of `lax.all_to_all` shows an
# `all_to_all`:

# %%
def collectives_in(jaxpr):
    """The collective primitives in a jaxpr, nested ones included, in order."""
    names = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("all_gather", "reduce_scatter", "all_to_all", "psum", "ppermute"):
            names.append(eqn.primitive.name)
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                names += collectives_in(inner)
    return names


for name, builtin, shape in [("all_gather", lambda x: lax.all_gather(x, AXIS, tiled=True), (n, m)),
                             ("all_to_all", lambda x: lax.all_to_all(x, AXIS, 0, 0, tiled=True),
                              (n, n * m))]:
    f = on_every_rank(builtin)
    out_shape = jax.eval_shape(f, jnp.zeros(shape)).shape
    backward = jax.make_jaxpr(lambda x, ct: jax.vjp(f, x)[1](ct))(jnp.zeros(shape),
                                                                 jnp.zeros(out_shape))
    found = collectives_in(backward.jaxpr)
    print(f"lax.{name}: forward and backward collectives {found}")
    assert found == {"all_gather": ["all_gather", "reduce_scatter"],
                     "all_to_all": ["all_to_all", "all_to_all"]}[name]

# %% [markdown]
# ## 4. The figure
#
# Now we draw the relations, using only those in `verified` (section 2) and the pairs in
# `transposes` (section 3). Nothing is added by hand. There are two pictures. In both, the
# primitives whose result ends up reduced or collected are on the left, the ones that fan data
# out are on the right, and AllReduce (the seed's "big brother") is in the middle.
#
# - **Figure 1, "built from":** a small **+** circle is a concatenation: the arrow marked
#   "1st" and the arrow marked "2nd" go into it, and the arrow out of it points at what the
#   two make together, labelled with the algorithms that do it. A dotted purple arrow marked
#   **×n** means "n of them, one per root" (rank r's on chunk r).
# - **Figure 2, "mirror images":** an orange arrow A → B means A's schedule run backwards is a
#   B, and green double arrows join transposes checked with `jax.vjp`.

# %%
STYLE = {CONCAT: dict(color="#1f5fa8", linestyle="-"),
         EVERY_ROOT: dict(color="#7b3fa0", linestyle=":"), REVERSED: dict(color="#d9730d"),
         "transpose": dict(color="#2e8b3a")}


def draw_nodes(ax, position, notes=None):
    """A rounded box per primitive at position[name]; returns the boxes (arrows stop at them)."""
    boxes = {}
    for name, (x, y) in position.items():
        lines = [name] + ([notes[name]] if notes and name in notes else [])
        width = 0.085 * max(len(line) for line in lines) + 0.25
        height = 0.3 * len(lines) + 0.12
        box = FancyBboxPatch((x - width / 2, y - height / 2), width, height, zorder=3,
                             boxstyle="round,pad=0.02,rounding_size=0.08",
                             facecolor="#f4f4f4", edgecolor="#333333")
        ax.add_patch(box)
        ax.text(x, y, "\n".join(lines), ha="center", va="center", fontsize=11,
                fontweight="bold", zorder=4)
        boxes[name] = box
    return boxes


def point_on_arc(p0, p1, bend, at):
    """The point at fraction `at` along matplotlib's arc3 curve from p0 to p1: a quadratic
    curve through the control point mid + bend·(dy, -dx)."""
    (x0, y0), (x1, y1) = p0, p1
    cx, cy = (x0 + x1) / 2 + bend * (y1 - y0), (y0 + y1) / 2 - bend * (x1 - x0)
    return ((1 - at) ** 2 * x0 + 2 * at * (1 - at) * cx + at ** 2 * x1,
            (1 - at) ** 2 * y0 + 2 * at * (1 - at) * cy + at ** 2 * y1)


def tag(ax, xy, text, color, fontsize=9, bold=False):
    """A small boxed label at xy."""
    ax.text(*xy, text, ha="center", va="center", fontsize=fontsize, color=color,
            fontweight="bold" if bold else "normal", zorder=5,
            bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor=color,
                      linewidth=0.6))


def draw_arrow(ax, start, end, style, bend=0.0, label="", at=0.5, both_ways=False, **label_kw):
    """An arrow between two shapes (start and end: (patch, (x, y)) pairs), bent by `bend`
    (matplotlib's arc3), with its label on the curve at fraction `at` of the way."""
    (patch0, p0), (patch1, p1) = start, end
    ax.add_patch(FancyArrowPatch(p0, p1, patchA=patch0, patchB=patch1,
                                 arrowstyle="<|-|>" if both_ways else "-|>", mutation_scale=16,
                                 lw=1.7, shrinkA=2, shrinkB=2, zorder=2,
                                 connectionstyle=f"arc3,rad={bend}", **style))
    if label:
        tag(ax, point_on_arc(p0, p1, bend, at), label, style["color"], **label_kw)


def new_figure(size, xlim, ylim, title):
    fig, ax = plt.subplots(figsize=size)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")   # so that the labels sit on the bent arrows
    ax.axis("off")
    ax.set_title(title, fontsize=13)
    return fig, ax


def legend(fig, entries):
    fig.legend(handles=entries, loc="lower center", ncol=len(entries), fontsize=10,
               frameon=False)


labels = defaultdict(list)          # (kind, parts, target) -> the algorithms, one per relation
for relation in verified:
    labels[relation.kind, relation.parts, relation.target].append(relation.label)

# %%
BUILT_FROM = {"reduce_scatter": (-4.2, 5.0), "allreduce": (0.0, 5.0), "allgather": (4.2, 5.0),
              "reduce": (-2.2, 2.8), "broadcast": (2.2, 2.8),
              "gather": (-4.2, 0.6), "scatter": (4.2, 0.6), "alltoall": (0.0, -0.3)}
# where each concatenation's + sits, and where (relative to it) its algorithms are written
SUMS = {(("reduce_scatter", "allgather"), "allreduce"): ((0.0, 6.4), (0.0, 0.6), "center"),
        (("reduce", "broadcast"), "allreduce"): ((0.0, 3.5), (0.2, 0.75), "left"),
        (("scatter", "allgather"), "broadcast"): ((4.2, 2.8), (-1.0, -0.35), "center"),
        (("reduce_scatter", "gather"), "reduce"): ((-4.2, 2.8), (1.0, -0.35), "center")}
# (part, target) -> the bend of an "n of them" arrow
BENDS = {("broadcast", "allgather"): 0.0, ("reduce", "reduce_scatter"): 0.0,
         ("scatter", "alltoall"): -0.15}

fig, ax = new_figure((12, 9.4), (-5.3, 5.3), (-0.9, 7.5),
                     "Figure 1. Built from: how each primitive is made of others "
                     "(every arrow checked, n = 1..16)")
boxes = draw_nodes(ax, BUILT_FROM)
shape = {name: (boxes[name], BUILT_FROM[name]) for name in BUILT_FROM}  # what arrows attach to
drawn = set()
for (kind, parts, target), algorithms in labels.items():
    if kind == CONCAT:
        (x, y), (dx, dy), align = SUMS[parts, target]
        plus = Circle((x, y), 0.24, facecolor="white", edgecolor=STYLE[CONCAT]["color"], lw=1.7,
                      zorder=3)
        ax.add_patch(plus)
        ax.text(x, y, "+", ha="center", va="center", fontsize=17, fontweight="bold",
                color=STYLE[CONCAT]["color"], zorder=4)
        for part, which in zip(parts, ("1st", "2nd")):
            draw_arrow(ax, shape[part], (plus, (x, y)), STYLE[CONCAT], label=which, at=0.6)
        draw_arrow(ax, (plus, (x, y)), shape[target], STYLE[CONCAT])
        pairs = [", ".join(algorithms[k:k + 2]) for k in range(0, len(algorithms), 2)]
        ax.text(x + dx, y + dy, ",\n".join(pairs), ha=align, va="center", fontsize=9.5,
                color=STYLE[CONCAT]["color"], linespacing=1.3,
                bbox=dict(boxstyle="round,pad=0.3", facecolor="#eef3fa", edgecolor="none"))
        drawn.add((parts, target))
    elif kind == EVERY_ROOT:
        (part,) = parts
        bend = BENDS[part, target]
        draw_arrow(ax, shape[part], shape[target], STYLE[EVERY_ROOT], bend, "×n", at=0.72,
                   fontsize=11, bold=True)
        middle = point_on_arc(BUILT_FROM[part], BUILT_FROM[target], bend, 0.38)
        tag(ax, middle, "\n".join(algorithms), STYLE[EVERY_ROOT]["color"])
        drawn.add((part, target))
assert drawn == set(SUMS) | set(BENDS)   # every checked relation has a place, and only those
legend(fig, [plt.Line2D([], [], lw=1.7, label="1st + 2nd → what they make together "
                                               "(concatenation a + b)", **STYLE[CONCAT]),
             plt.Line2D([], [], lw=1.7, label="×n: n of them, one per root "
                                               "(rank r's on chunk r)", **STYLE[EVERY_ROOT])])
fig.tight_layout(rect=(0, 0.04, 1, 1))
plt.show()

# %% [markdown]
# How to read it, starting from AllReduce in the middle:
#
# - **AllReduce** has two recipes: ReduceScatter + AllGather (the **+** above it: ring,
#   bidirectional ring, Rabenseifner's halving-doubling, hierarchical) and Reduce + Broadcast
#   (the **+** below it: naive, tree). The seed's "left and right hands" are the first recipe.
#   The second is its "Reduce then Broadcast", which it says nobody uses because it "doubles the
#   traffic". The recipe itself is fine: run down a (pipelined) binary tree, Reduce + Broadcast
#   is NCCL's tree allreduce
#   ([NVIDIA, NCCL 2.4](https://developer.nvidia.com/blog/massively-scale-deep-learning-training-nccl-2-4/)).
#   What makes the naive one slow is that all the traffic goes through one root's link.
# - **Broadcast and Reduce** are built from the other primitives for large messages (the two
#   **+** on the sides): Broadcast = Scatter + AllGather (van de Geijn), Reduce = ReduceScatter +
#   Gather (Rabenseifner).
# - **AllGather is n Broadcasts, ReduceScatter is n Reduces, AllToAll is n Scatters** (the ×n
#   arrows), one per root. This is the seed's "AllGather is the all-hands version of Broadcast",
#   now checked.
# - Not drawn: the naive allgather (gather everything to rank 0, then send the whole buffer to
#   every rank) and the naive reduce_scatter (the same, backwards). They hold (section 2a), but
#   they are recipes through one rank, not ways to think about the primitives.

# %%
MIRRORS = {"allreduce": (0.0, 3.2), "reduce_scatter": (-2.6, 2.0), "allgather": (2.6, 2.0),
           "reduce": (-2.6, 0.6), "broadcast": (2.6, 0.6), "gather": (-2.6, -0.8),
           "scatter": (2.6, -0.8), "alltoall": (0.0, -2.2)}
fig, ax = new_figure((11, 8), (-3.6, 3.6), (-2.7, 3.7),
                     "Figure 2. Mirror images: reversed schedules and transposes (jax.vjp)")
self_transposed = {a for a, b in transposes if a == b}
boxes = draw_nodes(ax, MIRRORS, {name: "its own transpose" for name in self_transposed})
shape = {name: (boxes[name], MIRRORS[name]) for name in MIRRORS}
for (kind, parts, target), algorithms in labels.items():
    if kind == REVERSED:  # the fan-out -> fan-in arrow bends below the pair, its opposite above
        draw_arrow(ax, shape[parts[0]], shape[target], STYLE[REVERSED], -0.22,
                   "reversed: " + "\n".join(algorithms))
for a, b in transposes:
    if a != b:
        draw_arrow(ax, shape[a], shape[b], STYLE["transpose"], 0.0, "transposes", 0.5,
                   both_ways=True)
legend(fig, [plt.Line2D([], [], lw=1.7, label="A → B: A's schedule run backwards is a B",
                        **STYLE[REVERSED]),
             plt.Line2D([], [], lw=1.7, label="A ↔ B: transposes (jax.vjp of one runs the other)",
                        **STYLE["transpose"])])
fig.tight_layout(rect=(0, 0.04, 1, 1))
plt.show()

# %% [markdown]
# **Figure 2:** each fan-in is a fan-out run backwards. These are the same pairs that `jax.vjp`
# transposes into each other, since reverse-mode autodiff runs a program backwards. AllReduce
# and AllToAll are their own transposes.
#
# A remark on the seed's "拆成 ReduceScatter + AllGather，通信量直接减半" ("splitting AllReduce
# into ReduceScatter + AllGather halves the communication"): the concatenation is *equal* to the
# ring allreduce, round for round, so the bytes are the same. The gain of splitting is elsewhere.
# Between the two halves each rank holds one reduced shard, so it can update only its shard of
# the parameters (ZeRO), and each half can overlap with compute. The table below shows that the
# bytes add up.
#
# ## 5. What each algorithm costs, next to the textbook formulas
#
# `jaxcoll.cost(schedule, N, alpha=, beta=, gamma=)` prices a schedule in the α-β-γ model. Each
# `ppermute` costs α plus β per byte of the largest transfer it carries, plus γ per byte if it
# adds, and the model assumes the ppermutes run one after another. (A round is usually one
# `ppermute`; the bidirectional ring's rounds are two.) Pricing with α = 1 (β = γ = 0) counts
# the messages. With β = 1 it gives the bytes on the critical path (the largest transfer of each
# ppermute, added up), and with γ = 1 the bytes reduced on it. The breakdown also reports the
# bytes the busiest rank sends and reduces in total.
#
# N is the buffer one rank works on: the message for allreduce, broadcast and reduce; the input
# for reduce_scatter, scatter and alltoall; the output for allgather and gather. Formulas are
# from [Thakur, Rabenseifner & Gropp 2005](https://doi.org/10.1177/1094342005051521),
# [Chan et al. 2007](https://doi.org/10.1002/cpe.1206) and
# [Bruck et al. 1997](https://doi.org/10.1109/71.642949). The tree rows are derived from the
# heap tree's structure, with T(n) its round count (tutorial 03: T(8) = 4), and the hierarchical
# rows add up its ring parts on (outer o, inner i) = (2, 4). K = ceil(log2 n) and L = log2 n.

# %%
n = 8
o, i = 2, 4                                  # hierarchical: 2 "nodes" of 4 "GPUs"
K = math.ceil(math.log2(n))
L = math.log2(n)
T = S("broadcast", "tree", n).n_rounds       # the heap tree's rounds (4 at n = 8)
assert T == 4

# primitive -> algorithm -> (formula text, (α count, β·N coefficient, γ·N coefficient))
TEXTBOOK = {
    "allreduce": {
        "ring": ("2(n-1)α + 2(n-1)/n·Nβ + (n-1)/n·Nγ",
                 (2 * (n - 1), 2 * (n - 1) / n, (n - 1) / n)),
        "bidirectional_ring": ("2(n-1)α + (n-1)/n·Nβ + (n-1)/n·Nγ (full-duplex links)",
                               (2 * (n - 1), (n - 1) / n, (n - 1) / n)),
        "naive": ("2(n-1)(α + Nβ) + (n-1)·Nγ", (2 * (n - 1), 2 * (n - 1), n - 1)),
        "tree": ("2T(n)(α + Nβ) + T(n)·Nγ", (2 * T, 2 * T, T)),
        "double_tree": ("2T(n)(α + N/2·β) + T(n)·N/2·γ", (2 * T, T, T / 2)),
        "recursive_doubling": ("L(α + Nβ + Nγ)", (L, L, L)),
        "halving_doubling": ("2Lα + 2(n-1)/n·Nβ + (n-1)/n·Nγ",
                             (2 * L, 2 * (n - 1) / n, (n - 1) / n)),
        "hierarchical": ("2(i-1+o-1)α + 2[(i-1)/i + (o-1)/(oi)]·Nβ "
                         "+ [(i-1)/i + (o-1)/(oi)]·Nγ",
                         (2 * (i - 1 + o - 1), 2 * ((i - 1) / i + (o - 1) / (o * i)),
                          (i - 1) / i + (o - 1) / (o * i))),
        "two_shot": ("2(n-1)α + 2(n-1)/n·Nβ + (n-1)/n·Nγ (every pair of ranks linked)",
                     (2 * (n - 1), 2 * (n - 1) / n, (n - 1) / n))},
    "reduce_scatter": {
        "ring": ("(n-1)α + (n-1)/n·N(β + γ)", (n - 1, (n - 1) / n, (n - 1) / n)),
        "bidirectional_ring": ("(n-1)α + (n-1)/(2n)·Nβ + (n-1)/n·Nγ (full-duplex links)",
                               (n - 1, (n - 1) / (2 * n), (n - 1) / n)),
        "naive": ("2(n-1)α + (n-1)(N + N/n)β + (n-1)·Nγ",
                  (2 * (n - 1), (n - 1) * (1 + 1 / n), n - 1)),
        "halving_doubling": ("Lα + (n-1)/n·N(β + γ)", (L, (n - 1) / n, (n - 1) / n)),
        "hierarchical": ("(i-1+o-1)α + [(i-1)/i + (o-1)/(oi)]·N(β + γ)",
                         (i - 1 + o - 1, (i - 1) / i + (o - 1) / (o * i),
                          (i - 1) / i + (o - 1) / (o * i))),
        "pairwise": ("(n-1)α + (n-1)/n·N(β + γ) (every pair of ranks linked)",
                     (n - 1, (n - 1) / n, (n - 1) / n))},
    "allgather": {
        "ring": ("(n-1)α + (n-1)/n·Nβ", (n - 1, (n - 1) / n, 0)),
        "bidirectional_ring": ("(n-1)α + (n-1)/(2n)·Nβ (full-duplex links)",
                               (n - 1, (n - 1) / (2 * n), 0)),
        "naive": ("2(n-1)α + (n-1)(N/n + N)β", (2 * (n - 1), (n - 1) * (1 / n + 1), 0)),
        "recursive_doubling": ("Lα + (n-1)/n·Nβ", (L, (n - 1) / n, 0)),
        "halving_doubling": ("Lα + (n-1)/n·Nβ", (L, (n - 1) / n, 0)),
        "bruck": ("Kα + (n-1)/n·Nβ", (K, (n - 1) / n, 0)),
        "hierarchical": ("(i-1+o-1)α + [(i-1)/i + (o-1)/(oi)]·Nβ",
                         (i - 1 + o - 1, (i - 1) / i + (o - 1) / (o * i), 0))},
    "alltoall": {
        "naive": ("(n-1)α + (n-1)/n·Nβ", (n - 1, (n - 1) / n, 0)),
        "bruck": ("Kα + K/2·Nβ", (K, K / 2, 0))},
    "broadcast": {
        "naive": ("(n-1)(α + Nβ)", (n - 1, n - 1, 0)),
        "tree": ("T(n)(α + Nβ)", (T, T, 0)),
        "binomial": ("K(α + Nβ)", (K, K, 0)),
        "scatter_allgather": ("(K + n-1)α + 2(n-1)/n·Nβ", (K + n - 1, 2 * (n - 1) / n, 0)),
        "chain": ("(n-2+p)(α + N/p·β), p pieces (1 here)", (n - 1, n - 1, 0))},
    "reduce": {
        "naive": ("(n-1)(α + Nβ + Nγ)", (n - 1, n - 1, n - 1)),
        "tree": ("T(n)(α + Nβ + Nγ)", (T, T, T)),
        "binomial": ("K(α + Nβ + Nγ)", (K, K, K)),
        "reduce_scatter_gather": ("(n-1 + K)α + 2(n-1)/n·Nβ + (n-1)/n·Nγ",
                                  (n - 1 + K, 2 * (n - 1) / n, (n - 1) / n)),
        "chain": ("(n-2+p)(α + N/p·(β + γ)), p pieces (1 here)", (n - 1, n - 1, n - 1))},
    "gather": {
        "naive": ("(n-1)α + (n-1)/n·Nβ", (n - 1, (n - 1) / n, 0)),
        "binomial": ("Kα + (n-1)/n·Nβ", (K, (n - 1) / n, 0))},
    "scatter": {
        "naive": ("(n-1)α + (n-1)/n·Nβ", (n - 1, (n - 1) / n, 0)),
        "binomial": ("Kα + (n-1)/n·Nβ", (K, (n - 1) / n, 0))},
}
# every registered algorithm has a formula, and nothing else does
assert {p: set(TEXTBOOK[p]) for p in PRIMITIVES} == {
    p: set(jaxcoll.algorithms(p)) - {"auto", "xla"} for p in PRIMITIVES}


def model_terms(schedule):
    """(messages, β coefficient, γ coefficient) of a schedule, per byte of N, from jaxcoll.cost:
    its price with α = 1 alone, then β = 1 alone, then γ = 1 alone, for N = 1 byte."""
    def price(alpha, beta, gamma):
        return jaxcoll.cost(schedule, 1.0, alpha=alpha, beta=beta, gamma=gamma).seconds
    return price(1, 0, 0), price(0, 1, 0), price(0, 0, 1)


def coefficients(a, b, g):
    return f"{a:g}α + {b:g}·Nβ" + (f" + {g:g}·Nγ" if g else "")


rows, mismatches = [], []
for primitive in PRIMITIVES:
    for algorithm, (formula, textbook) in TEXTBOOK[primitive].items():
        schedule = S(primitive, algorithm, (o, i) if algorithm == "hierarchical" else n)
        terms = model_terms(schedule)
        breakdown = jaxcoll.cost(schedule, 1.0, alpha=1, beta=1, gamma=1)
        assert breakdown.messages == terms[0]
        assert breakdown.bytes_sent <= terms[1] + 1e-12   # a rank's sends are on the path
        matches = np.allclose(terms, textbook, rtol=1e-12, atol=1e-12)
        if not matches:
            mismatches.append((primitive, algorithm, terms, textbook))
        rows.append(f"| {primitive} | {algorithm} | {schedule.n_rounds} | {coefficients(*terms)} "
                    f"| {breakdown.bytes_sent:g}·N | {breakdown.bytes_reduced:g}·N | {formula} "
                    f"| {'✓' if matches else '✗ see below'} |")

header = ["| primitive | algorithm | rounds | model: α-β-γ time | busiest rank sends "
          "| busiest rank reduces | α-β-γ formula | same? |", "|---" * 8 + "|"]
display(Markdown("\n".join(header + rows)))

# %% [markdown]
# Every formula matches the model term for term, except the **bidirectional ring**'s. That one
# is not an error in the arithmetic: the model and the textbook make different assumptions.
# The bidirectional ring sends half the data each way round, so every rank sends on both its
# links in every round. The textbook assumes **full-duplex** links: each rank can send to its
# left and its right neighbour at the same time, both at full speed. jaxcoll runs that as *two*
# `ppermute`s per round, and the model charges every `ppermute` as if it ran after the one
# before. So it counts twice the α, and the same β as the one-way ring (both halves of the data
# end up on the critical path).
#
# The consequence: in jaxcoll's model the bidirectional ring is strictly worse than the ring
# (for an allreduce at n = 8, 28α against 14α, with the same β and γ), so `algorithm="auto"`
# never picks it. It is there to be studied and measured. The cell below pins both facts down:
# a change in the schedule or the model would show up here.

# %%
assert [(p, a) for p, a, *_ in mismatches] == [("allreduce", "bidirectional_ring"),
                                               ("reduce_scatter", "bidirectional_ring"),
                                               ("allgather", "bidirectional_ring")]
for primitive, algorithm, (a, b, g), (ta, tb, tg) in mismatches:
    assert (a, b, g) == (2 * ta, 2 * tb, tg)    # twice the α and the β, the same γ
    ring = model_terms(S(primitive, "ring", n))
    assert (a, b, g) == (2 * ring[0], ring[1], ring[2])  # the ring's β and γ, twice its α
    print(f"{primitive} {algorithm}: model {coefficients(a, b, g)}, "
          f"full-duplex textbook {coefficients(ta, tb, tg)}, ring {coefficients(*ring)}")

choices = {jaxcoll.choose(primitive, n_ranks, 2.0 ** e, jaxcoll.calibration(c))
           for primitive in ("allreduce", "reduce_scatter", "allgather")
           for n_ranks in (2, 4, 8, 16) for e in range(6, 33, 2) for c in ("cpu", "gpu")}
assert "bidirectional_ring" not in choices
print("auto never chose bidirectional_ring (allreduce, reduce_scatter, allgather; n = 2, 4, 8, "
      "16; 64 bytes to 4 GiB; cpu.json and gpu.json)")

# %% [markdown]
# Two columns that often confuse:
#
# - **Time on the path versus bytes a rank sends.** In the heap tree broadcast the busiest rank
#   sends N twice (2·N), yet the time has 4·Nβ: the four rounds run one after another, and each
#   moves N. In the binomial gather every rank sends less than N, yet the path carries
#   (n-1)/n·N. Bytes tell you the load on a link, and the path tells you the time.
# - **Concatenations add up.** Ring allreduce = ring reduce_scatter + ring allgather, and its row
#   is the sum of theirs: 14α = 7α + 7α and 1.75·N = 0.875·N + 0.875·N (allgather's N is its
#   output, the same size as the allreduce's message). So splitting an allreduce into its two
#   halves saves no bytes. Likewise scatter_allgather = binomial scatter + ring allgather:
#   (3 + 7)α and 0.875·N + 0.875·N.

# %%
def terms_of(primitive, algorithm):
    return model_terms(S(primitive, algorithm, n))


def add(a, b):
    return tuple(x + y for x, y in zip(a, b))


assert terms_of("allreduce", "ring") == add(terms_of("reduce_scatter", "ring"),
                                            terms_of("allgather", "ring"))
assert terms_of("broadcast", "scatter_allgather") == add(terms_of("scatter", "binomial"),
                                                         terms_of("allgather", "ring"))
assert terms_of("allreduce", "tree") == add(terms_of("reduce", "tree"),
                                            terms_of("broadcast", "tree"))
print("ring allreduce       =", coefficients(*terms_of("allreduce", "ring")))
print("  ring reduce_scatter =", coefficients(*terms_of("reduce_scatter", "ring")))
print("  ring allgather      =", coefficients(*terms_of("allgather", "ring")))

# %% [markdown]
# ## What we found
#
# - The seed's figure, drawn from checked relations: AllReduce = ReduceScatter + AllGather (ring,
#   bidirectional ring, halving-doubling at n = 2^k, hierarchical) and = Reduce + Broadcast (naive,
#   tree). Broadcast = Scatter + AllGather and Reduce = ReduceScatter + Gather for large
#   messages. AllGather, ReduceScatter and AllToAll are n Broadcasts, n Reduces and n Scatters,
#   one per root.
# - Mirror images: Reduce is Broadcast reversed, Gather is Scatter reversed, and ReduceScatter
#   and AllGather are each other's reversals (but not the naive allgather, whose redundant
#   copies cannot be reversed). The same pairs are transposes: `jax.vjp` of one computes the
#   other exactly, and JAX's own rules for `all_gather` and `all_to_all` say the same.
# - "Splitting AllReduce halves the communication" (seed): no. The split is the same schedule,
#   with the same bytes. Its value is the sharded state between the halves and the overlap with
#   compute.
# - Costs at n = 8 match the textbook α-β-γ formulas for every algorithm, except the
#   bidirectional ring, where the model charges both directions as if one ran after the other:
#   in the model it is strictly worse than the ring, and `auto` never picks it.
#
# **A library note.** `jax.vjp`, `jax.grad` and `jax.linear_transpose` all run the same
# transpose rule: one collective on the dual schedule, checked above against numpy.
#
# ## Try it
#
# Figure 1 shows AllToAll as n Scatters, one from each rank. Is it also n **Gathers**, one into
# each rank? Write `gathers_into_alltoall(n)` the way `scatters_into_alltoall` is written, then
# run the check cell. It asks `is_a(..., "alltoall")` for n = 1..16 and compares the transfers
# with the pairwise alltoall's. If your relation holds, add it to `ONE_PER_ROOT` (with
# `EVERY_ROOT, ("gather",), "alltoall", "naive"`, and a bend in `BENDS`) and rerun the cells
# from section 2 on: the new arrow appears in Figure 1 by itself.
#
# *Hint:* start from `S("gather", "naive", n, root=r)`. Each of its transfers `t` goes from
# `t.src` to r and carries chunk `t.src`. In the alltoall buffer, rank `t.src`'s block for rank
# r is its chunk r, and rank r keeps what comes from `t.src` in chunk n + `t.src`, so use
# `Transfer(t.src, r, r, False, into=n + t.src)`.

# %%
def check_gathers(build):
    """Does build(n) make an alltoall out of n naive gathers, for n = 1..16?"""
    for n_ranks in NS:
        schedule = build(n_ranks)
        assert is_a(schedule, "alltoall"), f"n={n_ranks}: not an alltoall"
        assert transfers(schedule) == transfers(S("alltoall", "naive", n_ranks)), (
            f"n={n_ranks}: an alltoall, but not the pairwise one's transfers")
    print("n gathers, one into each rank, make an alltoall (the pairwise transfers), n = 1..16")


gathers_into_alltoall = None       # replace with your function, then run this cell
if gathers_into_alltoall is not None:
    check_gathers(gathers_into_alltoall)
