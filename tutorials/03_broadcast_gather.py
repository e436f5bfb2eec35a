# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 03 · Broadcast and Gather, Reduce and Scatter: the collectives with a root
#
# **What you will learn**
#
# - a broadcast written by hand from `lax.ppermute`: the naive one, then a lecture's binary
#   tree once its missing pieces are filled in;
# - the **binomial** tree, and exactly how many rounds each tree needs for n = 1..16;
# - why many small broadcasts should be merged into one (the start-up cost α);
# - **Gather** against **AllGather**; **Reduce** and **Scatter** as Broadcast and Gather run
#   backwards; every result checked against the right answer on 8 fake devices.
#
# **Prerequisites:** notebook 01 (`shard_map`, `ppermute`, the α-β model).
#
# The lecture this project grew from (a lecture in Chinese on the collective primitives of
# distributed training; notebook 01 says what it covers) says that a naive broadcast (the root sends to every rank
# in turn) takes O(n) steps and a binary tree O(log n), and gives pseudocode for the tree,
# which turns out to be incomplete; that with Gather only the root gets the complete data and
# with AllGather everyone does; and that frequent small broadcasts should be merged into one.
#
# **Notation.** n = number of ranks (8). **N = bytes per rank of the buffer**, as
# `jaxcoll.cost` counts it: for Broadcast and Reduce the message (every rank's whole buffer);
# for Gather and AllGather the gathered result, n blocks of N/n, one from each rank; for
# Scatter the root's input, n blocks of N/n, one for each rank.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
os.environ["JAXCOLL_CALIBRATE"] = "0"        # auto: the shipped calibrations, everywhere
import jax
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

import math

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from jax import lax

import jaxcoll
import lesson                                 # tutorials/lesson.py: the plumbing the notebooks share
from lesson import AXIS, n, on_every_rank

# %% [markdown]
# ## 1. The naive broadcast: n − 1 rounds
#
# The lecture's naive broadcast (its `N` is our n):
#
# ```
# if rank == 0:
#     for i in range(1, N):
#         send(data, i)
# else:
#     recv(data, 0)
# ```
#
# With `ppermute` each `send` is a round with one pair `(root, dst)`; rank `dst` keeps what it
# received, every other rank what it had. We let the root be any rank.

# %%
def naive_broadcast(x, root=0):
    me = lax.axis_index(AXIS)
    for dst in range(n):
        if dst != root:
            received = lax.ppermute(x, AXIS, perm=[(root, dst)])   # zeros except on rank dst
            x = jnp.where(me == dst, received, x)
    return x


# %% [markdown]
# ## 2. The lecture's binary tree, and what it leaves out
#
# ```
# if rank == 0:
#     send(data, 1)
#     send(data, 2)
# else:
#     recv(data, parent)
#     if 2*rank+1 < N:
#         send(data, 2*rank+1)
#     if 2*rank+2 < N:
#         send(data, 2*rank+2)
# ```
#
# Translated into the list of ranks each rank sends to, and checked for what is missing:

# %%
def lecture_tree_sends(rank, n_ranks):
    if rank == 0:
        return [1, 2]                      # the root alone has no `< N` check
    return [c for c in (2 * rank + 1, 2 * rank + 2) if c < n_ranks]


# Missing 1: `parent` is never defined. Each rank r > 0 is sent to by one rank: (r - 1) // 2.
for n_ranks in range(3, 17):
    for r in range(1, n_ranks):
        assert [s for s in range(n_ranks) if r in lecture_tree_sends(s, n_ranks)] == [(r - 1) // 2]
# Missing 2: the root sends to ranks 1 and 2 whatever n is; for n = 2, rank 2 does not exist.
print("n = 2: rank 0 sends to", lecture_tree_sends(0, 2), "but the ranks are [0, 1]")
assert max(lecture_tree_sends(0, 2)) >= 2

# %% [markdown]
# Missing 3: the root is always 0. Missing 4: *when* each send happens. Completed:
#
# 1. `parent(v) = (v − 1) // 2`, children `2v + 1, 2v + 2` if `< n`, for the root as well;
# 2. **any root**: rank r plays *virtual rank* `v = (r − root) % n`, so the root is v = 0;
# 3. **rounds**: a `ppermute` is a permutation, so a rank sends at most once per round. A parent
#    sends to its left child in the round after it got the data and to its right child in the
#    round after that. (Sending both at once would halve each child's bandwidth.)

# %%
def tree_rounds(n_ranks, root=0):
    """The completed lecture tree: for each round, the (src, dst) pairs, in real ranks."""
    real = lambda v: (v + root) % n_ranks
    arrival = {0: 0}                       # virtual rank -> rounds until it holds the data
    for v in range(1, n_ranks):            # heap order: parents before children
        parent = (v - 1) // 2
        arrival[v] = arrival[parent] + (1 if v == 2 * parent + 1 else 2)   # left: 1, right: 2
    rounds = [[] for _ in range(max(arrival.values()))]
    for v in range(1, n_ranks):
        rounds[arrival[v] - 1].append((real((v - 1) // 2), real(v)))
    return rounds


def tree_broadcast(x, root=0):
    me = lax.axis_index(AXIS)
    for pairs in tree_rounds(n, root):
        received = lax.ppermute(x, AXIS, perm=pairs)
        x = jnp.where(jnp.isin(me, jnp.array([dst for _, dst in pairs])), received, x)
    return x


for k, pairs in enumerate(tree_rounds(8)):
    print(f"round {k}: {pairs}")

# %% [markdown]
# That is exactly the schedule jaxcoll's `tree` broadcast runs (a schedule lists each round's
# `src->dst [chunks]` transfers; `=` copies). Checked for every n from 1 to 16 and every root,
# with `jaxcoll.verify` proving symbolically that every rank ends with the root's data:

# %%
def pairs_per_round(schedule):
    return [sorted((t.src, t.dst) for t in round_) for round_ in schedule.rounds]


for n_ranks in range(1, 17):
    for root in range(n_ranks):
        schedule = jaxcoll.schedule("broadcast", "tree", n_ranks, root=root)
        assert pairs_per_round(schedule) == [sorted(r) for r in tree_rounds(n_ranks, root)]
        jaxcoll.verify(schedule)
print("the completed lecture tree == jaxcoll's tree broadcast, n = 1..16, every root")

# %% [markdown]
# ## 3. The binomial tree, and rounds counted
#
# In the **binomial tree** (MPICH's small-message broadcast,
# [Thakur, Rabenseifner & Gropp 2005](https://doi.org/10.1177/1094342005051521)) *every* rank
# that holds the data passes it on in every round, so the holders double: 1, 2, 4, 8. The root
# sends to the rank halfway round, then a quarter of the way, and so on.
#
# Drawn as trees (circle colour: the round a rank gets the data; edge label: the round it is
# sent down). In the heap tree rank 6, two levels down, is served last, after rank 7 three
# levels down: every right step costs two rounds.

# %%
print(jaxcoll.schedule("broadcast", "binomial", 8))
lesson.broadcast_trees({"heap tree (the lecture's, completed)": jaxcoll.schedule("broadcast", "tree", 8),
                        "binomial tree": jaxcoll.schedule("broadcast", "binomial", 8)})
plt.show()

# %% [markdown]
# The exact round counts, read off the schedules:
#
# - **naive**: n − 1;
# - **binomial**: ceil(log2 n);
# - **heap tree**: rank v waits one round per left step and two per right step. Write v + 1
#   in binary: the bits after the leading 1 spell the path (0 = left, 1 = right), so
#   `arrival(v) = floor(log2(v+1)) + popcount(v+1) − 1`; the tree needs the largest of these,
#   at most 2·floor(log2 n), reached exactly when n = 2^k − 1. The lecture's O(log n) holds,
#   with up to twice the binomial tree's rounds.

# %%
def heap_tree_rounds(n_ranks):
    return max((m.bit_length() - 1) + bin(m).count("1") - 1 for m in range(1, n_ranks + 1))


ROOTED = ["naive", "tree", "binomial"]
print(f"{'n':>3} " + "".join(f"{a:>10}" for a in ROOTED))
for n_ranks in range(1, 17):
    rounds = {a: jaxcoll.schedule("broadcast", a, n_ranks).n_rounds for a in ROOTED}
    print(f"{n_ranks:>3} " + "".join(f"{rounds[a]:>10}" for a in ROOTED))
    assert rounds["naive"] == n_ranks - 1
    assert rounds["binomial"] == math.ceil(math.log2(n_ranks))
    assert rounds["tree"] == heap_tree_rounds(n_ranks) == len(tree_rounds(n_ranks))
    full_tree = (n_ranks + 1) & n_ranks == 0                     # n = 2^k - 1
    assert rounds["tree"] <= 2 * int(math.log2(n_ranks))
    assert (rounds["tree"] == 2 * int(math.log2(n_ranks))) == full_tree
    for root in range(n_ranks):                                   # the root only relabels ranks
        for a in ROOTED:
            assert jaxcoll.schedule("broadcast", a, n_ranks, root=root).n_rounds == rounds[a]

# %% [markdown]
# ## 4. Merging small broadcasts
#
# In the α-β model (notebook 01) a tree sends the whole message in each round: the binomial
# tree costs ceil(log2 n)·(α + N·β). For large messages that is far from the best a
# broadcast can do; the large-message broadcasts (scatter + allgather, and the pipelined chain
# NCCL uses) are in 05_what_auto_picks (section 3), the other choices between algorithms in
# 05_choosing_an_algorithm.
#
# The lecture's tip to merge small broadcasts is the α term: k broadcasts of N/k bytes pay
# k·ceil(log2 n)·α, one merged broadcast pays it once (jaxcoll packs a pytree's leaves into
# buckets for this reason). With `gpu.json`, the estimate for 8 H100s of notebook 01:

# %%
gpu = jaxcoll.calibration("gpu")                  # an estimate for 8 H100s (notebook 01, section 8)


def bytes_in_turn(schedule):                      # the β coefficient in units of N: α = 0, β = 1
    return jaxcoll.cost(schedule, 1.0, alpha=0, beta=1).seconds


binomial8 = jaxcoll.schedule("broadcast", "binomial", n)
one, ten = (jaxcoll.cost(binomial8, N, alpha=gpu.alpha, beta=gpu.beta).seconds
            for N in (2**12, 2**12 / 10))
assert math.isclose(10 * ten - one, 9 * 3 * gpu.alpha)
print(f"4 KiB in one broadcast: {one * 1e6:.0f} µs; in ten: {10 * ten * 1e6:.0f} µs (9 x 3 α more)")

# %% [markdown]
# ## 5. On the devices, from any root
#
# Our two hand-written broadcasts and jaxcoll's three, from root 0 and from root 5: every rank
# must end with exactly the root's row.

# %%
BROADCASTS = ["naive", "tree", "binomial"]
x = lesson.small_integers(n, 6)                   # (n ranks, 6 values each)
for root in (0, 5):
    runs = {"by hand: naive": lambda v: naive_broadcast(v, root),
            "by hand: tree": lambda v: tree_broadcast(v, root)}
    for a in BROADCASTS:
        runs[f"jaxcoll {a}"] = lambda v, a=a: jaxcoll.broadcast(v, AXIS, root=root, algorithm=a)
    for name, run in runs.items():
        np.testing.assert_array_equal(on_every_rank(run)(x), np.broadcast_to(x[root], x.shape),
                                      err_msg=f"{name}, root {root}")
    print(f"root {root}: all {len(runs)} broadcasts give every rank row {root}: {x[root]}")

# %% [markdown]
# And timed: 1 KiB and 4 MiB per rank, calls alternating, medians, beside the model with the
# calibration measured on these fake devices (`cpu.json`).
#
# **What this timing measures, and what it cannot show.** It measures one process's memory
# copies and rendezvous on this machine's few CPU cores (printed below). There are no links, so
# it cannot show what the model's gaps are made of: copies running at once, on separate links.
# The order of the three can change from run to run, and cpu.json's α was fitted to
# allreduces, so neither the order nor the distance from the model column is a check. What is
# fixed is printed first: the rounds and the β term the model charges (N's on the busiest
# link, summed over rounds: 7, 4 and 3, the order on links of their own), and the 7·N that
# each copies in all (the whole buffer into every other rank), the same for all three.

# %%
cpu = jaxcoll.calibration("cpu")
print("CPU cores this process may use:",
      len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
for a in BROADCASTS:
    s = jaxcoll.schedule("broadcast", a, n)
    copied = lesson.traffic(s, 1.0)[0].sum()
    assert copied == n - 1
    print(f"  {a:<10} {s.n_rounds} rounds, β term {bytes_in_turn(s):g}·N, "
          f"{copied:g}·N copied in all")
programs = {a: on_every_rank(lambda v, a=a: jaxcoll.broadcast(v, AXIS, algorithm=a))
            for a in BROADCASTS}
for nbytes, iters in ((2**10, 21), (4 * 2**20, 5)):
    medians = lesson.median_seconds(programs, np.ones((n, nbytes // 4), np.float32), iters)
    print(f"{lesson.size_label(nbytes)} per rank, median of {iters}:")
    for a in BROADCASTS:
        print(f"  {a:<10} measured {medians[a] * 1e3:7.2f} ms   model (cpu.json) "
              f"{lesson.predicted('broadcast', a, n, nbytes, cpu) * 1e3:7.2f} ms")

# %% [markdown]
# ## 6. Gather compared with AllGather
#
# jaxcoll's `gather` returns the gathered array on the root and zeros on every other rank;
# `allgather` returns it on every rank. From root 5:

# %%
ROOT = 5
everything = np.broadcast_to(x, (n,) + x.shape)             # (rank, n rows, 6): every rank, all rows
only_root = np.zeros_like(everything)
only_root[ROOT] = x
for a in ("naive", "binomial"):
    gather = on_every_rank(lambda v, a=a: jaxcoll.gather(v, AXIS, root=ROOT, algorithm=a))
    np.testing.assert_array_equal(gather(x), only_root)
allgather = on_every_rank(lambda v: jaxcoll.allgather(v, AXIS, algorithm="ring"))
np.testing.assert_array_equal(allgather(x), everything)
print(f"gather: rank {ROOT} holds all {n} rows, the others zeros; allgather: every rank holds them")

# %% [markdown]
# What each costs, read off the schedules, with N the gathered result (n blocks of N/n): the
# bytes crossing all links, the most any one rank receives, rounds, and the α-β time.

# %%
print(f"{'':<20}{'rounds':>7}{'all links':>11}{'most received':>15}   α-β time")
rows = {}
for p, a in [("gather", "naive"), ("gather", "binomial"), ("allgather", "naive"),
             ("allgather", "ring")]:
    s = jaxcoll.schedule(p, a, n)
    received = lesson.traffic(s, 1.0)[1]                      # in units of N
    rows[p, a] = (s.n_rounds, received.sum(), received.max(), bytes_in_turn(s))
    print(f"{p + ' ' + a:<20}{s.n_rounds:>7}{received.sum():>9.3f} N{received.max():>13.3f} N"
          f"   {s.n_rounds}α + {bytes_in_turn(s):.3f}·N·β")

assert rows["gather", "naive"][1:3] == ((n - 1) / n, (n - 1) / n)    # n-1 blocks, all into the root
assert rows["allgather", "ring"][1] == n * (n - 1) / n    # n times as much: each rank lacks n-1
assert rows["allgather", "ring"][0] == rows["gather", "naive"][0] == n - 1
assert rows["allgather", "ring"][3] == rows["gather", "naive"][3] == (n - 1) / n   # same α-β time

# %% [markdown]
# Gather moves (n−1)/n·N, all into the root. AllGather moves n times as much, yet the ring
# takes the same rounds and α-β time as the naive gather: all n links work at once. (AllGather
# is n broadcasts, one from each rank: notebook 04.)
#
# ## 7. Reduce and Scatter: the same trees, run backwards
#
# Play a broadcast's rounds in reverse order, turn every arrow around and make each copy an
# *add*: data that fanned out from the root now flows into it, summed on the way: a **reduce**.
# `Schedule.reversed(name, reduce=True)` does that, and jaxcoll's tree, binomial and chain (the
# pipelined line of 05_what_auto_picks) reduces *are* their broadcasts reversed. Without the
# add, a scatter reversed is a **gather**.

# %%
for n_ranks in range(1, 17):
    for root in range(n_ranks):
        for a in ("tree", "binomial", "chain"):
            broadcast = jaxcoll.schedule("broadcast", a, n_ranks, root=root)
            reduce = jaxcoll.schedule("reduce", a, n_ranks, root=root)
            assert reduce.rounds == broadcast.reversed("r", reduce=True).rounds
        scatter = jaxcoll.schedule("scatter", "binomial", n_ranks, root=root)
        gather = jaxcoll.schedule("gather", "binomial", n_ranks, root=root)
        assert gather.rounds == scatter.reversed("g", reduce=False).rounds
print("reduce = broadcast reversed (tree, binomial, chain), gather = scatter reversed: "
      "n = 1..16, every root")
lesson.show(jaxcoll.schedule("reduce", "binomial", 8))

# %% [markdown]
# Dashed arrows add; after 3 rounds the root holds all 8 colours. On the devices, from root
# 5: **Reduce** leaves the sum on the root and zeros elsewhere; **Scatter** gives rank i block
# i of the root's array (what the others pass in is ignored). One more Reduce for large
# messages: `reduce_scatter_gather` runs a ring ReduceScatter (every rank ends with its 1/n of
# the sum, notebook 02), then a binomial Gather of those chunks into the root: about
# 2(n − 1)/n·N on the busiest link instead of the tree's N per round. It is the mirror image of
# the broadcast's scatter + allgather (05_what_auto_picks, section 3).

# %%
REDUCES = ["naive", "tree", "binomial", "chain", "reduce_scatter_gather"]
assert bytes_in_turn(jaxcoll.schedule("reduce", "reduce_scatter_gather", n)) == 2 * (n - 1) / n
summed = np.zeros_like(x)
summed[ROOT] = x.sum(axis=0)
for a in REDUCES:
    reduce = on_every_rank(lambda v, a=a: jaxcoll.reduce(v, AXIS, root=ROOT, algorithm=a))
    np.testing.assert_array_equal(reduce(x), summed, err_msg=a)
blocks = lesson.small_integers(n, n, 2, seed=1)             # (rank, n blocks, 2)
for a in ("naive", "binomial"):
    scatter = on_every_rank(lambda v, a=a: jaxcoll.scatter(v, AXIS, root=ROOT, algorithm=a))
    np.testing.assert_array_equal(scatter(blocks), blocks[ROOT], err_msg=a)   # row i: block i
print(f"reduce ({len(REDUCES)} algorithms): rank {ROOT} holds the sum {summed[ROOT]}, the others zeros; "
      f"scatter: rank i holds block i of rank {ROOT}'s array")

# %% [markdown]
# ## What we found
#
# | the lecture says | checked above |
# |---|---|
# | naive broadcast: O(n) | exactly n − 1 rounds, all from the root's one link |
# | tree broadcast: O(log n) | yes, but the heap tree takes up to 2·floor(log2 n) rounds (6 at n = 15; 4 at n = 8); binomial takes ceil(log2 n) (3) |
# | the tree's pseudocode | incomplete: `parent` is (r−1)//2, the root must check `< n` too, any root by relabelling, one send per round. Completed, it is jaxcoll's `tree` |
# | Gather: only the root gets everything | yes; AllGather moves n times the bytes in the same α-β time (ring) |
# | merge small broadcasts | the α term: paid once instead of k times |
#
# Not in the lecture: for large messages neither tree is best (05_what_auto_picks, section 3:
# scatter + allgather and the pipelined chain).
#
# ## Try it
#
# Write the binomial broadcast's rounds yourself: `my_binomial_rounds(n, root)` returns a list
# of rounds, each a list of `(src, dst)` pairs, equal to jaxcoll's `binomial` schedule for every
# n and root. (It plugs into `tree_broadcast`'s loop in place of `tree_rounds`.)
#
# *Hint:* follow `tree_rounds` with other children. In virtual ranks the children of v are
# v + 2^k for every power of two 2^k below v's lowest set bit (for the root, every 2^k < n),
# largest first, keeping those < n. A rank sends to its children one per round, starting the
# round after it got the data: its child number c (0, 1, ...) gets it at `arrival(v) + c + 1`.
#
# <details><summary>Answer</summary>
#
# ```python
# def my_binomial_rounds(n_ranks, root):
#     def children(v):
#         limit = v & -v if v else 1 << max(n_ranks - 1, 0).bit_length()
#         steps = [1 << k for k in range(limit.bit_length() - 1)][::-1]
#         return [v + s for s in steps if v + s < n_ranks]
#     arrival, pairs, todo = {0: 0}, [], [0]
#     while todo:
#         v = todo.pop()
#         for c, child in enumerate(children(v)):
#             arrival[child] = arrival[v] + c + 1
#             pairs.append((arrival[child] - 1, (v + root) % n_ranks, (child + root) % n_ranks))
#             todo.append(child)
#     rounds = [[] for _ in range(max(arrival.values()))]
#     for k, src, dst in pairs:
#         rounds[k].append((src, dst))
#     return rounds
# ```
# </details>

# %%
def check_my_rounds(my_rounds):
    """Compare your rounds with jaxcoll's binomial broadcast for n = 1..16 and every root."""
    for n_ranks in range(1, 17):
        for root in range(n_ranks):
            want = pairs_per_round(jaxcoll.schedule("broadcast", "binomial", n_ranks, root=root))
            got = [sorted(pairs) for pairs in my_rounds(n_ranks, root)]
            assert got == want, f"n={n_ranks}, root={root}: got {got}, want {want}"
    print("correct for n = 1..16 and every root")


my_binomial_rounds = None          # replace with your function, then run this cell
if my_binomial_rounds is not None:
    check_my_rounds(my_binomial_rounds)
else:
    print("not done yet: define my_binomial_rounds")
