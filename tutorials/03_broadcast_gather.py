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
# The seed lecture's section 3.3 calls Broadcast and Gather the "basic skills" (基本功) of
# collective communication. It makes two claims about Broadcast: the naive way (the root sends
# to every rank, one after the other) takes O(n) steps for n ranks, and a binary tree takes
# O(log n). It gives pseudocode for the tree, but the pseudocode is incomplete.
#
# **Notation.** The seed writes N for the number of ranks. Here **n = the number of ranks** and
# **N = the bytes per rank** (the message a broadcast sends).
#
# **What you will learn**
#
# - how to write a broadcast yourself from `lax.ppermute`, first the naive one and then the
#   seed's binary tree once its missing pieces are filled in;
# - two better trees, the **binomial** tree and van de Geijn's **scatter + allgather**, and
#   exactly how many rounds each algorithm needs for n = 1..16 ranks;
# - what the α-β cost model predicts for small and large messages, and what 8 fake CPU
#   devices can and cannot show about it;
# - **Gather** compared with **AllGather** (who receives what, how many bytes, how many rounds);
# - why **Reduce** is Broadcast run backwards and **Scatter** is Gather run backwards, with every
#   result checked against JAX's built-ins.
#
# **Prerequisites:** Python and numpy. JAX is explained as we go. Tutorial 01 explains
# `shard_map` and `ppermute` at more length.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
import jax
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

# %%
import math
import tempfile

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jaxcoll
from jaxcoll.bench import time_alternating
from jaxcoll.execute import after     # after(value, previous): value, made to wait for previous
from jaxcoll.families import pipeline_pieces

n = 8                                  # ranks (fake devices)
AXIS = "i"                             # the name of the mesh axis the ranks live on
mesh = Mesh(np.array(jax.devices()), (AXIS,))
pictures = tempfile.mkdtemp()          # jaxcoll.draw writes its PNGs here, not into the repo
rng = np.random.default_rng(0)
print(jax.devices())

# %% [markdown]
# ## 1. The rules: one `ppermute` is one round
#
# `jax.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i"))` cuts an array's first
# dimension into n rows and runs `f` on every rank at once, each on its own row (a "rank" here is
# one of the fake devices, and `"i"` is just the name we gave the mesh axis). Inside `f`, the
# *only* way to talk to another rank that we allow ourselves is
# `lax.ppermute(x, "i", perm=[(src, dst), ...])`: every `src` sends its `x` to its `dst`, all
# pairs at the same time. A ppermute is a *permutation*, so each rank sends at most once and
# receives at most once. A rank that receives nothing gets zeros. So one `ppermute` is one
# **round** of the algorithm.
#
# `on_every_rank` below wraps a per-rank function like that and compiles it with `jax.jit`. Its
# input and output are `(n, ...)` arrays: row r goes to rank r and comes back from rank r. The
# results are returned per rank (`out_specs=P("i")`), so shard_map's replication check
# (`check_vma`) stays on; jaxcoll's collectives are typed like the `lax` built-ins (the
# README's [sharp bit](../README.md#sharp-bit-check_vma-typed-like-lax)).
#
# When one program runs several collectives, we chain them with `jaxcoll.execute.after(x,
# previous)`, which makes `x` wait for `previous` and changes no value. It works around a
# CPU-only jaxlib 0.10 bug (the README's
# [sharp bit](../README.md#sharp-bit-jaxlib-010-on-cpu-runs-independent-collectives-into-each-other);
# tutorial 01 explains it).

# %%
def on_every_rank(fn):
    """jit(shard_map(fn)): rank r runs fn on row r of the input; its result is row r of the output."""
    return jax.jit(jax.shard_map(lambda rows: fn(rows[0])[None],   # rows: (1, ...) on each rank
                                 mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)))


def integer_inputs(*shape):
    """Small integers stored as float32: every sum of them is exact in any order, so results
    can be compared bit for bit."""
    return rng.integers(-8, 9, size=shape).astype(np.float32)


# %% [markdown]
# ## 2. The naive broadcast: O(n) rounds
#
# The seed's naive broadcast (朴素做法, "the naive way"). The seed's `N` here is the number of
# ranks, our n:
#
# ```
# if rank == 0:
#     for i in range(1, N):
#         send(data, i)  // 朴素做法 (the naive way)
# else:
#     recv(data, 0)
# ```
#
# With `ppermute`, each `send` is one round with a single pair `(root, dst)`. Rank `dst` keeps
# what it received and every other rank keeps what it had. We also let the root be any rank, not
# only 0.

# %%
def naive_broadcast(x, axis, n, root=0):
    """The seed's naive broadcast: the root sends x to every other rank, one after the other."""
    me = lax.axis_index(axis)                                 # this rank's number
    for dst in range(n):
        if dst != root:
            received = lax.ppermute(x, axis, perm=[(root, dst)])  # zeros except on rank dst
            x = jnp.where(me == dst, received, x)
    return x


# %% [markdown]
# ## 3. The seed's binary tree, and what it leaves out
#
# The seed's "tree-shaped optimized version" (树形优化版), again with `N` = the number of ranks:
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
# Below it is translated line by line into a function that lists, for each rank, the ranks it
# sends to, in order. Then we check what it leaves out.

# %%
def seed_tree_sends(rank, n_ranks):
    """The ranks `rank` sends to in the seed's tree pseudocode, in the order it sends."""
    if rank == 0:
        return [1, 2]                      # the root alone has no `< N` (n_ranks) check
    sends = []                             # (recv(data, parent): `parent` is never defined)
    if 2 * rank + 1 < n_ranks:
        sends.append(2 * rank + 1)
    if 2 * rank + 2 < n_ranks:
        sends.append(2 * rank + 2)
    return sends


# What is missing 1: `parent` is never defined. Recover it from the sends: each rank r > 0 is
# sent to by exactly one rank, and that rank is (r - 1) // 2 (a binary heap, as in heapq).
for n_ranks in range(3, 17):
    senders = {r: [s for s in range(n_ranks) if r in seed_tree_sends(s, n_ranks)]
               for r in range(1, n_ranks)}
    assert all(senders[r] == [(r - 1) // 2] for r in range(1, n_ranks)), senders

# What is missing 2: the root sends to 1 and 2 whatever n is. With n = 2 rank 2 does not exist,
# and with n = 1 neither does rank 1.
print("n = 2: rank 0 sends to", seed_tree_sends(0, 2), "but the ranks are", list(range(2)))
assert max(seed_tree_sends(0, 2)) >= 2 and max(seed_tree_sends(0, 1)) >= 1

# What is missing 3: the root is always rank 0. Missing 4: when do the sends happen?

# %% [markdown]
# The completed tree:
#
# 1. `parent(v) = (v - 1) // 2`, `children(v) = [2v + 1, 2v + 2]`, keeping only those `< n`,
#    for the root as well.
# 2. **Any root**, by relabelling: rank r plays *virtual rank* `v = (r - root) % n`, so the root
#    is virtual rank 0 and the seed's tree is used unchanged on the virtual ranks.
# 3. **Rounds**: a `ppermute` is a permutation, so in one round each rank sends at most once. A
#    parent therefore sends to its left child in one round and to its right child in the next.
#    A left child holds the data one round after its parent, and a right child two rounds
#    after. `tree_rounds` works out, for every round, which (sender, receiver) pairs talk.
#
# The seed's "send to 2*rank+1, send to 2*rank+2" could also be read as both sends at once: two
# `ppermute`s in the same round. The tree would then take only floor(log2 n) rounds (its
# depth). But the parent's one link would carry two copies of the message at the same time, so
# each child gets it at half the bandwidth. We keep to one send per rank per round, which is
# what jaxcoll does and what the α-β model below prices.

# %%
def heap_parent(v):
    return (v - 1) // 2


def tree_rounds(n, root=0):
    """The completed seed tree: for each round, the (src, dst) pairs (real ranks) that talk."""
    real = lambda v: (v + root) % n        # virtual rank -> real rank (the root is v = 0)
    arrival = {0: 0}                       # virtual rank -> the number of rounds until it holds x
    for v in range(1, n):                  # in heap order every parent comes before its children
        parent = heap_parent(v)
        is_left = v == 2 * parent + 1
        arrival[v] = arrival[parent] + (1 if is_left else 2)
    rounds = [[] for _ in range(max(arrival.values()))]
    for v in range(1, n):
        rounds[arrival[v] - 1].append((real(heap_parent(v)), real(v)))
    return rounds


def tree_broadcast(x, axis, n, root=0):
    """The seed's binary-tree broadcast, completed: one ppermute per round."""
    me = lax.axis_index(axis)
    for pairs in tree_rounds(n, root):
        received = lax.ppermute(x, axis, perm=pairs)
        receivers = jnp.array([dst for _, dst in pairs])
        x = jnp.where(jnp.isin(me, receivers), received, x)   # receivers keep what came
    return x


for k, pairs in enumerate(tree_rounds(8)):
    print(f"round {k}: {pairs}")
assert tree_rounds(8)[3] == [(2, 6)] and (3, 7) in tree_rounds(8)[2]   # see the picture below
# read "both sends at once": the rounds would be the tree's depth, floor(log2 n)
assert all(max((v + 1).bit_length() - 1 for v in range(n_ranks)) == int(math.log2(n_ranks))
           for n_ranks in range(1, 17))

# %% [markdown]
# That is exactly the schedule jaxcoll's `tree` broadcast runs. A jaxcoll *schedule* is plain
# data: rounds of `src->dst [chunks]` transfers (`=` means copy, `+` means reduce; a *chunk* is
# one of the equal pieces a schedule cuts the buffer into). We check that the two agree for
# every n from 1 to 16 and every root, and that jaxcoll's own symbolic checker `jaxcoll.verify`
# proves each schedule leaves every rank with the root's data.

# %%
def pairs_per_round(schedule):
    return [sorted((t.src, t.dst) for t in round_) for round_ in schedule.rounds]


for n_ranks in range(1, 17):
    for root in range(n_ranks):
        schedule = jaxcoll.schedule("broadcast", "tree", n_ranks, root=root)
        assert pairs_per_round(schedule) == [sorted(r) for r in tree_rounds(n_ranks, root)], (
            n_ranks, root)
        jaxcoll.verify(schedule)  # raises ScheduleError if some rank ends without root's data
print(jaxcoll.schedule("broadcast", "tree", 8, root=3))

# %% [markdown]
# ## 4. Two better trees: binomial, and scatter + allgather
#
# **Binomial tree** (MPICH's choice for small messages, see
# [Thakur, Rabenseifner & Gropp 2005](https://doi.org/10.1177/1094342005051521)): in every round,
# *every* rank that already holds the data passes it on. The number of holders doubles each
# round (1, 2, 4, 8), so n ranks need ceil(log2 n) rounds. In the heap tree a parent sends to
# its two children one after the other. The binomial root instead sends in every round, first to
# the rank halfway round, then a quarter of the way, and so on (for n = 8: ranks 4, 2, 1).
#
# **Scatter + allgather** (van de Geijn; [Chan et al. 2007](https://doi.org/10.1002/cpe.1206)):
# the root cuts the message into n chunks and scatters them down a binomial tree, so rank r gets
# chunk r. A ring allgather then gives every rank every chunk. It takes more rounds, but each
# rank sends only about 2(n-1)/n of the message instead of the whole message in each of its
# rounds. That makes it the broadcast for large messages.

# %%
print(jaxcoll.schedule("broadcast", "binomial", 8))
print()
print(jaxcoll.schedule("broadcast", "scatter_allgather", 8))

# %% [markdown]
# The two trees drawn as trees. Each circle is a rank; its colour says in which round it gets
# the data, and each edge is labelled with the round in which the parent sends down it. In the
# heap tree (left), rank 6 is only two levels down (the right child of the root's right child),
# yet it is served last, in round 3, after rank 7 three levels down: every right step costs two
# rounds. In the binomial tree (right), every rank that holds the data sends in every round,
# so all 8 ranks have it after round 2.

# %%
def tree_layout(children, rank, depth=0, layout=None):
    """{rank: (x, depth)}: leaves placed left to right, each parent centred above its children."""
    layout = {} if layout is None else layout
    for child in children[rank]:
        tree_layout(children, child, depth + 1, layout)
    xs = [layout[child][0] for child in children[rank]]
    next_leaf = 1 + max((x for x, _ in layout.values()), default=-1)
    layout[rank] = (sum(xs) / len(xs) if xs else next_leaf, depth)
    return layout


def draw_broadcast_tree(ax, schedule, title, colours):
    """A one-chunk broadcast schedule drawn as the tree it sends down."""
    parent, send_round = {}, {}                      # rank -> its sender, and the round it sent
    for k, round_ in enumerate(schedule.rounds):
        for t in round_:
            parent[t.dst], send_round[t.dst] = t.src, k
    children = {r: sorted((c for c in parent if parent[c] == r), key=send_round.get)
                for r in range(schedule.n_ranks)}     # in the order the parent sends to them
    layout = tree_layout(children, schedule.root)
    for child, src in parent.items():
        (x0, y0), (x1, y1) = layout[src], layout[child]
        ax.plot([x0, x1], [-y0, -y1], color="#555555", lw=1.5, zorder=1)
        ax.text((x0 + x1) / 2, -(y0 + y1) / 2, f"round {send_round[child]}", fontsize=9,
                ha="center", va="center", zorder=2,
                bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none"))
    for rank, (x, y) in layout.items():
        colour = colours[send_round[rank] + 1 if rank in parent else 0]
        ax.scatter([x], [-y], s=900, color=colour, edgecolor="black", zorder=3)
        dark = sum(colour[:3]) < 1.6                 # white numbers on dark circles
        ax.text(x, -y, str(rank), ha="center", va="center", fontsize=12, fontweight="bold",
                color="white" if dark else "black", zorder=4)
    ax.set_title(title, fontsize=12)
    ax.set_xlim(-0.7, max(x for x, _ in layout.values()) + 0.7)
    ax.set_ylim(-max(d for _, d in layout.values()) - 0.6, 0.6)
    ax.axis("off")


heap_tree = jaxcoll.schedule("broadcast", "tree", 8)
binomial_tree = jaxcoll.schedule("broadcast", "binomial", 8)
colours = plt.cm.plasma(np.linspace(0.0, 0.9, heap_tree.n_rounds + 1))  # [root, round 0, ...]
fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
draw_broadcast_tree(left, heap_tree, f"heap tree (the seed's, completed): "
                                     f"{heap_tree.n_rounds} rounds", colours)
draw_broadcast_tree(right, binomial_tree, f"binomial tree: {binomial_tree.n_rounds} rounds",
                    colours)
handles = [plt.Line2D([], [], marker="o", ls="", ms=13, color=colours[0], mec="black",
                      label="the root (rank 0): has it from the start")]
handles += [plt.Line2D([], [], marker="o", ls="", ms=13, color=colours[k + 1], mec="black",
                       label=f"gets it in round {k}") for k in range(heap_tree.n_rounds)]
fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9.5, frameon=False)
fig.suptitle("Broadcast from rank 0 on 8 ranks: who sends to whom, and when", fontsize=13)
fig.tight_layout(rect=(0, 0.08, 1, 1))
plt.show()

# %% [markdown]
# The scatter + allgather broadcast moves n chunks, so a tree no longer shows it. `jaxcoll.draw`
# draws any schedule as a grid per round: ranks as rows, chunks as columns. A cell takes the
# colour of the rank whose data it holds (here always the root's), grey means nothing yet, and
# the arrows are that round's transfers. We draw it at n = 4 so that the picture stays
# readable: after the ceil(log2 4) = 2 scatter rounds every rank holds its own chunk (the
# diagonal), and the 4 - 1 = 3 ring rounds fill in the rest. At n = 8 it is the same picture,
# with 3 + 7 rounds.

# %%
small = jaxcoll.schedule("broadcast", "scatter_allgather", 4)
assert small.n_rounds == 2 + 3
Image(filename=jaxcoll.draw(small, f"{pictures}/scatter_allgather.png"))

# %% [markdown]
# ## 5. Every algorithm on 8 fake devices, from any root
#
# We run all of them in one jitted program, with the seed's root 0 and with root 5: our two
# hand-written ones, jaxcoll's four, and the `xla` reference. JAX 0.10.2 does have a broadcast
# primitive, `lax.pbroadcast(x, axis_name, source)`, but it cannot be compiled for CPU devices
# (the next cell shows the error). So jaxcoll's `xla` broadcast is built from `lax.all_gather`,
# which gathers every rank's row and keeps the root's. Every rank must end up with exactly the
# root's row.

# %%
try:
    on_every_rank(lambda x: lax.pbroadcast(x, AXIS, 0))(np.zeros((n, 1), np.float32))
    raise AssertionError("lax.pbroadcast now runs on CPU: update this section")
except NotImplementedError as error:
    print("lax.pbroadcast on CPU:", error)

# %%
BROADCASTS = ["naive", "tree", "binomial", "scatter_allgather", "xla"]
ROOTS = [0, 5]


def all_broadcasts(x):
    results, previous = [], x
    for root in ROOTS:
        runs = [lambda x: naive_broadcast(x, AXIS, n, root),
                lambda x: tree_broadcast(x, AXIS, n, root)]
        runs += [lambda x, a=a: jaxcoll.broadcast(x, AXIS, root=root, algorithm=a)
                 for a in BROADCASTS]
        for run in runs:
            previous = run(after(x, previous))                  # one after the other
            results.append(previous)
    return jnp.stack(results)                                   # (runs, 6) on each rank


x = integer_inputs(n, 6)                                        # (n ranks, 6 values each)
names = ["by hand: naive", "by hand: tree"] + [f"jaxcoll {a}" for a in BROADCASTS]
outputs = on_every_rank(all_broadcasts)(x)                      # (n ranks, 2 * 7 runs, 6)
outputs = iter(np.swapaxes(np.asarray(outputs), 0, 1))          # each run: (n ranks, 6)
for root in ROOTS:
    want = np.broadcast_to(x[root], x.shape)                    # every rank: the root's row
    for name in names:
        np.testing.assert_array_equal(next(outputs), want, err_msg=f"{name}, root {root}")
    print(f"root {root}: all {len(names)} broadcasts give every rank row {root}: {x[root]}")

# %% [markdown]
# ## 6. Counting rounds, n = 1..16
#
# The seed says the naive broadcast is O(n) and the tree is O(log n). The exact counts can be
# read off the schedules:
#
# - **naive**: n - 1 rounds (the root sends to one rank per round);
# - **binomial**: ceil(log2 n) rounds (the number of holders doubles);
# - **heap tree**: rank v hears after `arrival(v)` rounds, where each left step down the tree
#   costs 1 round and each right step costs 2. Write v + 1 in binary: the bits after the
#   leading 1 spell the path from the root (0 = left, 1 = right). So
#   `arrival(v) = floor(log2(v+1)) + popcount(v+1) - 1`, and the tree needs the largest such
#   value for v < n. That is at most 2·floor(log2 n), reached when n = 2^k - 1 (a full tree,
#   whose last rank went right at every step). The seed's O(log n) holds, but with up to about
#   twice the binomial tree's rounds;
# - **scatter_allgather**: ceil(log2 n) scatter rounds + n - 1 ring rounds.

# %%
def heap_tree_rounds(n):
    """max over v < n of arrival(v) = floor(log2(v+1)) + popcount(v+1) - 1."""
    return max((m.bit_length() - 1) + bin(m).count("1") - 1 for m in range(1, n + 1))


def log2_up(n):
    return math.ceil(math.log2(n)) if n > 1 else 0


ns = list(range(1, 17))
rounds = {a: [jaxcoll.schedule("broadcast", a, n_ranks).n_rounds for n_ranks in ns]
          for a in BROADCASTS[:4]}
for idx, n_ranks in enumerate(ns):
    assert rounds["naive"][idx] == n_ranks - 1
    assert rounds["binomial"][idx] == log2_up(n_ranks)
    assert rounds["tree"][idx] == heap_tree_rounds(n_ranks) == len(tree_rounds(n_ranks))
    assert rounds["tree"][idx] <= 2 * int(math.log2(n_ranks))
    full_tree = (n_ranks + 1) & n_ranks == 0                   # n = 2^k - 1
    assert (rounds["tree"][idx] == 2 * int(math.log2(n_ranks))) == full_tree
    assert rounds["scatter_allgather"][idx] == log2_up(n_ranks) + n_ranks - 1
    for root in range(n_ranks):  # the root only relabels ranks: the same count from every root
        assert all(jaxcoll.schedule("broadcast", a, n_ranks, root=root).n_rounds
                   == rounds[a][idx] for a in rounds)

print(f"{'n':>3} " + "".join(f"{a:>19}" for a in rounds) + f"{'2*floor(log2 n)':>17}")
for idx, n_ranks in enumerate(ns):
    print(f"{n_ranks:>3} " + "".join(f"{rounds[a][idx]:>19}" for a in rounds)
          + f"{2 * int(math.log2(n_ranks)):>17}")

# %%
fig, ax = plt.subplots(figsize=(7, 4.2))
styles = {"naive": "o-", "tree": "s-", "binomial": "^-", "scatter_allgather": "d-"}
for a, counts in rounds.items():
    ax.plot(ns, counts, styles[a], label=a, markersize=5)
ax.plot(ns, [2 * int(math.log2(n_ranks)) for n_ranks in ns], "k:",
        label="2·floor(log2 n) (heap tree's bound)")
ax.set_xlabel("ranks n")
ax.set_ylabel("rounds (one ppermute each)")
ax.set_title("Broadcast: rounds needed, read off jaxcoll's schedules")
ax.set_xticks(ns)
ax.set_yticks(range(0, max(rounds["scatter_allgather"]) + 1, 2))
ax.grid(alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# ## 7. Timing: small and large messages
#
# Rounds are only half the story. In the α-β model, one `ppermute` that sends m bytes costs
# α + m·β: α is the fixed start-up cost of a message and β the time per byte. (α is charged per
# `ppermute`; a round is usually one `ppermute`, but the bidirectional ring of tutorial 02 uses
# two per round.) For a message of N bytes on n ranks:
#
# | algorithm | α-β time |
# |---|---|
# | naive | (n-1)(α + Nβ) |
# | heap tree | T(n)(α + Nβ), T(8) = 4 |
# | binomial | ceil(log2 n)(α + Nβ) |
# | scatter_allgather | (ceil(log2 n) + n - 1)α + about 2(n-1)/n·Nβ |
#
# **Pipelining.** A tree can cut the message into k pieces and send piece j+1 while its
# children forward piece j. In the heap tree a parent needs two rounds per piece (one for each
# child), so a new piece leaves the root every second round, and the time becomes
# (T(n) + 2(k-1))(α + N/k·β): more α, but the Nβ term shrinks towards 2·Nβ. jaxcoll does this
# above 16 MiB, with k = ceil(N / 16 MiB) pieces, at most 8. The binomial tree gains nothing
# from it (its root sends the whole message to each of its ceil(log2 n) children anyway), and
# scatter_allgather needs no pipelining: its chunks already are pieces.

# %%
T = jaxcoll.schedule("broadcast", "tree", n).n_rounds
for k in range(1, 9):                         # the formula, read off the pipelined schedules
    piped = jaxcoll.schedule("broadcast", "tree", n, pieces=k)
    assert piped.n_rounds == T + 2 * (k - 1)
    assert math.isclose(jaxcoll.cost(piped, 1.0, alpha=0, beta=1).seconds, (T + 2 * (k - 1)) / k)
print("pieces k for 1 MiB, 16 MiB, 17 MiB, 1 GiB:",
      [pipeline_pieces(size) for size in (1 << 20, 16 << 20, 17 << 20, 1 << 30)])

# %% [markdown]
# For small messages α dominates and the fewest rounds win: binomial. For large messages Nβ
# dominates. The trees push the whole message (or, pipelined, every piece) through a rank in each
# of their rounds, while in scatter_allgather each rank sends less than 2N in total.
# `jaxcoll.cost` reads these numbers off a schedule. Below we time 1 KiB and 4 MiB per rank and
# print the measurement next to the model with the calibration shipped for fake CPU devices
# (`cpu.json`, measured on a shared 2-core machine).
#
# **What fake CPU devices are.** The 8 "devices" are threads of one process, and they share one
# memory. A `ppermute` is a memory copy plus a rendezvous of all the threads. There is no
# network, and a rank waiting for data competes for the same CPU cores as the ranks that work.
# So the numbers below measure a CPU, not GPUs: use them to see the model's *shape* (α against
# β), not real speeds. (The `xla` reference here is `all_gather` + pick a row, which moves n
# times the data on purpose: it is a correctness reference, not a fast broadcast.)

# %%
def broadcast_program(algorithm):
    return on_every_rank(lambda x: jaxcoll.broadcast(x, AXIS, root=0, algorithm=algorithm))


SIZES = {"1 KiB": (256, 31), "4 MiB": (1 << 20, 5)}    # float32 values per rank, timed calls
cpu = jaxcoll.calibration("cpu")
measured, modelled = {}, {}
for label, (count, iters) in SIZES.items():
    x = jax.device_put(jnp.ones((n, count), jnp.float32), NamedSharding(mesh, P(AXIS)))
    programs = {a: broadcast_program(a) for a in BROADCASTS}
    times = time_alternating(programs, x, iters)        # alternating calls, after one warm-up
    measured[label] = {a: float(np.median(t)) for a, t in times.items() if a != "xla"}
    modelled[label] = {}
    print(f"{label} per rank, median of {iters} alternating calls:")
    for a in BROADCASTS:
        line = f"  {a:<18} measured {float(np.median(times[a])) * 1e3:8.2f} ms"
        if a != "xla":
            model = jaxcoll.cost(jaxcoll.schedule("broadcast", a, n), count * 4,
                                 alpha=cpu.alpha, beta=cpu.beta, gamma=cpu.gamma)
            modelled[label][a] = model.seconds
            line += (f"   model (cpu.json) {model.seconds * 1e3:8.2f} ms"
                     f"   ({model.messages} messages; busiest rank sends "
                     f"{model.bytes_sent / (count * 4):.2f}·N)")
        print(line)

# %% [markdown]
# What the model says: at 1 KiB the times follow the round counts (α, on fake devices the
# rendezvous of 8 threads), so binomial < tree < naive < scatter_allgather. At 4 MiB they follow
# the bytes on the critical path (β, here memory copies), so scatter_allgather comes first and
# naive last. The cell below compares that with the measurement, pair by pair, and writes down
# what it finds. `cpu.json`'s α and β were measured once, and a shared machine's speed changes
# from run to run (large copies depend on memory bandwidth that other processes share), so do
# not expect the milliseconds to match, and expect algorithms that the model puts close together
# to come out in either order.

# %%
def swapped_pairs(model, times):
    """Pairs (a, b) that the model puts a before b but the measurement puts b before a."""
    return [(a, b) for a in model for b in model if model[a] < model[b] and times[b] < times[a]]


for label in SIZES:
    times, model = measured[label], modelled[label]
    measured_order = sorted(times, key=times.get)
    model_order = sorted(model, key=model.get)
    if label == "1 KiB":                             # what the markdown above says of the model
        assert model_order == ["binomial", "tree", "naive", "scatter_allgather"]
    else:
        assert model_order[0] == "scatter_allgather" and model_order[-1] == "naive"
    print(f"{label}: measured fastest first: {', '.join(measured_order)}")
    print(f"{'':>{len(label)}}  model    fastest first: {', '.join(model_order)}")
    swaps = swapped_pairs(model, times)
    if not swaps:
        print(f"{'':>{len(label)}}  -> the measurement ranks all four as the model does.")
    for a, b in swaps:
        print(f"{'':>{len(label)}}  -> measured, {b} beat {a} ({times[a] / times[b]:.2f}x); "
              f"the model has {a} faster by {model[b] / model[a]:.2f}x.")
    slowest = measured_order[-1]
    print(f"{'':>{len(label)}}  -> slowest measured: {slowest}"
          + (" (as in the model)." if slowest == model_order[-1]
             else f" (the model's slowest: {model_order[-1]})."))
    print(f"{'':>{len(label)}}  naive / binomial: measured "
          f"{times['naive'] / times['binomial']:.1f}x, model {model['naive'] / model['binomial']:.1f}x;"
          f"  naive / scatter_allgather: measured {times['naive'] / times['scatter_allgather']:.1f}x,"
          f" model {model['naive'] / model['scatter_allgather']:.1f}x")

# %% [markdown]
# What fake devices cannot show is a network. The copies of one round do not really run in
# parallel on a few cores, and there are no separate links whose bandwidth an algorithm could
# spread its traffic over.
#
# What the model predicts for a real GPU network: `gpu.json` is jaxcoll's *estimate* (not a
# measurement) for NVLink-class GPUs; its α and β are printed below the plot. The plot sweeps
# the message size from 1 KiB to 1 GiB per rank, with the tree pipelined as jaxcoll runs it.
# The binomial tree wins for small messages, and scatter_allgather takes over once the Nβ term
# dominates. `algorithm="auto"` makes this choice with the same model (`jaxcoll.explain` prints
# its ranking).

# %%
gpu = jaxcoll.calibration("gpu")
sizes = 2.0 ** np.linspace(10, 30, 61)                        # 1 KiB .. 1 GiB per rank


def predicted_seconds(algorithm, nbytes, calibration):
    """The model's time for a broadcast of nbytes on 8 ranks, as jaxcoll would run it: the tree
    is pipelined in k = ceil(nbytes / 16 MiB) pieces, at most 8."""
    pieces = pipeline_pieces(int(nbytes)) if algorithm == "tree" else 1
    schedule = jaxcoll.schedule("broadcast", algorithm, n, pieces=pieces)
    return jaxcoll.cost(schedule, nbytes, alpha=calibration.alpha, beta=calibration.beta).seconds


fig, ax = plt.subplots(figsize=(7.5, 4.4))
for a in BROADCASTS[:4]:
    ax.loglog(sizes, [predicted_seconds(a, s, gpu) * 1e6 for s in sizes], styles[a],
              markevery=6, markersize=5,
              label=a + (" (pipelined above 16 MiB)" if a == "tree" else ""))
ticks = [1 << 10, 32 << 10, 1 << 20, 32 << 20, 1 << 30]
ax.set_xticks(ticks, ["1 KiB", "32 KiB", "1 MiB", "32 MiB", "1 GiB"])
ax.set_xlabel("message size N per rank")
ax.set_ylabel("predicted time (µs)")
ax.set_title("Broadcast on 8 ranks: α-β model with the GPU estimate (gpu.json)")
ax.grid(alpha=0.3, which="both")
ax.legend()
plt.show()
crossover = next(s for s in sizes if predicted_seconds("scatter_allgather", s, gpu)
                 < predicted_seconds("binomial", s, gpu))
print(f"gpu.json: α = {gpu.alpha * 1e6:.0f} µs per ppermute, 1/β = {1 / gpu.beta / 1e9:.0f} GB/s "
      "(10⁹ bytes per second, as NCCL reports bandwidth)")
print(f"With gpu.json, scatter_allgather beats the binomial tree from about "
      f"{crossover / 2**20:.0f} MiB per rank on.")
for label, nbytes in (("1 KiB", 1 << 10), ("1 GiB", 1 << 30)):
    print(f"auto on 8 GPUs for {label}:", jaxcoll.choose("broadcast", 8, nbytes, gpu))
assert jaxcoll.choose("broadcast", 8, 1 << 10, gpu) == "binomial"
assert jaxcoll.choose("broadcast", 8, 1 << 30, gpu) == "scatter_allgather"

# %% [markdown]
# scatter_allgather is not the best large-message broadcast there is, though. NCCL broadcasts
# along a pipelined **chain** (`algorithm="chain"`): the ranks form a line from the root, the
# message is cut into k pieces, and every rank passes piece p on as soon as it has it:
# (n - 2 + k)(α + N/k·β), which approaches the bandwidth bound N·β as k grows (jaxcoll takes the
# k that minimises it, sqrt((n-2)·N·β/α), at most 64), where scatter_allgather stays at
# 1.75·N·β on 8 ranks. With the model's own k:

# %%
from jaxcoll.model import chain_pieces

for label, nbytes in (("1 MiB", 1 << 20), ("1 GiB", 1 << 30)):
    k = chain_pieces(8, nbytes, gpu)
    seconds = {a: jaxcoll.cost(jaxcoll.schedule("broadcast", a, 8, pieces=k if a == "chain" else 1),
                               nbytes, alpha=gpu.alpha, beta=gpu.beta).seconds
               for a in ("chain", "scatter_allgather")}
    bound = jaxcoll.bounds("broadcast", 8, nbytes, gpu)
    print(f"{label}: chain in {k} pieces {seconds['chain'] * 1e6:9.0f} µs, scatter_allgather "
          f"{seconds['scatter_allgather'] * 1e6:9.0f} µs; the bandwidth bound N·β alone "
          f"{bound.path_bytes * gpu.beta * 1e6:9.0f} µs")

# %% [markdown]
# `auto` leaves the chain out for now. On these fake CPU devices its pipeline does not overlap
# (every "link" is a copy on the same two cores): at 16 MiB it measured 2.3x slower than
# scatter_allgather (bench/RESULTS.md), and nothing in the shipped calibrations tells the model
# so. Ask for it by name where links really run side by side.

# %% [markdown]
# The seed's other tip, "if you broadcast small data often, merge it into one big broadcast to
# cut start-up costs" (频繁广播小数据，建议合并成一次大广播), is the same α term: k broadcasts
# of N/k bytes pay k·ceil(log2 n)·α, and one merged broadcast pays it once. jaxcoll does this
# for pytrees: leaves are packed into buckets (see the README, *Training*).
#
# ## 8. Gather compared with AllGather
#
# The seed: "Gather 只有 root 拿到完整数据 ... AllGather 是所有人都拿到完整数据" ("with Gather
# only the root gets the complete data; with AllGather everyone gets it").
# jaxcoll's `gather` returns the gathered array on the root and zeros on every other rank, as
# the README says. We check it against `lax.all_gather` (on the root) and zeros (elsewhere),
# from root 5.

# %%
ROOT = 5
GATHERS, ALLGATHERS = ["naive", "binomial", "xla"], ["ring", "xla"]


def gathers(x):
    calls = [lambda x: lax.all_gather(x, AXIS)]                          # the built-in
    calls += [lambda x, a=a: jaxcoll.gather(x, AXIS, root=ROOT, algorithm=a) for a in GATHERS]
    calls += [lambda x, a=a: jaxcoll.allgather(x, AXIS, algorithm=a) for a in ALLGATHERS]
    results, previous = [], x
    for call in calls:
        previous = call(after(x, previous))                              # one after the other
        results.append(previous)
    return jnp.stack(results)                            # (calls, n, 3) on each rank


x = integer_inputs(n, 3)                                 # (n ranks, 3 values each)
out = np.swapaxes(np.asarray(on_every_rank(gathers)(x)), 0, 1)  # (calls, n ranks, n, 3)
builtin, *ours = out
np.testing.assert_array_equal(builtin, np.broadcast_to(x, (n, n, 3)))  # every rank: all rows
only_root = np.zeros_like(builtin)
only_root[ROOT] = builtin[ROOT]
for a, got in zip(GATHERS, ours[:len(GATHERS)]):
    np.testing.assert_array_equal(got, only_root, err_msg=f"gather {a}")
for a, got in zip(ALLGATHERS, ours[len(GATHERS):]):
    np.testing.assert_array_equal(got, builtin, err_msg=f"allgather {a}")
print(f"gather: rank {ROOT} holds all {n} rows, the others zeros; allgather: every rank holds them")

# %% [markdown]
# What each one costs, read off the schedules. Here the natural size is the gathered output:
# **N_out = n·N**, n chunks of N bytes, one from each rank. The table gives the total bytes that
# cross links, the most any one rank receives, the rounds, and the α-β time, all in N_out.
# `traffic` counts bytes over the schedule's transfers. One algorithm is new: **`bruck`**
# ([Bruck et al. 1997](https://doi.org/10.1109/71.642949)) is an allgather in ceil(log2 n)
# rounds for any n (recursive doubling needs n to be a power of two for that).

# %%
def traffic(schedule, nbytes):
    """(bytes moved over all links, most bytes any one rank receives) for nbytes per buffer."""
    chunk = nbytes / schedule.n_chunks
    received = np.zeros(schedule.n_ranks)
    for round_ in schedule.rounds:
        for t in round_:
            received[t.dst] += len(t.chunks) * chunk
    return received.sum(), received.max()


N_out = 8 * 2**20                                        # gathered output: 8 MiB (1 MiB per rank)
print(f"{'collective':<12}{'algorithm':<20}{'rounds':>7}{'moved (all links)':>20}"
      f"{'most received':>17}   α-β time (busiest path)")
rows = {}
for primitive, algorithm in [("gather", "naive"), ("gather", "binomial"), ("allgather", "naive"),
                             ("allgather", "ring"), ("allgather", "bruck")]:
    schedule = jaxcoll.schedule(primitive, algorithm, n)
    moved, most = traffic(schedule, N_out)
    alphas = jaxcoll.cost(schedule, N_out, alpha=1, beta=0).seconds
    betas = jaxcoll.cost(schedule, N_out, alpha=0, beta=1).seconds / N_out
    rows[primitive, algorithm] = (schedule.n_rounds, moved, most, alphas, betas)
    print(f"{primitive:<12}{algorithm:<20}{schedule.n_rounds:>7}{moved / N_out:>14.3f} N_out"
          f"{most / N_out:>11.3f} N_out   {alphas:.0f}α + {betas:.3f}·N_out·β")

# gather: only the other n-1 chunks move, all into the root
assert rows["gather", "naive"][1] == rows["gather", "naive"][2] == (n - 1) / n * N_out
# allgather moves n times as much: every rank receives the n-1 chunks it lacks
assert rows["allgather", "ring"][1] == n * (n - 1) / n * N_out
# ... yet the ring takes the same rounds and the same α-β time as the naive gather
assert rows["allgather", "ring"][0] == rows["gather", "naive"][0] == n - 1
assert rows["allgather", "ring"][3:] == rows["gather", "naive"][3:] == (n - 1, (n - 1) / n)
# bruck: ceil(log2 n) rounds, the ring's bytes
assert rows["allgather", "bruck"][0] == log2_up(n) and rows["allgather", "bruck"][4] == (n - 1) / n

# %% [markdown]
# In words: Gather moves (n-1)/n·N_out bytes, all of them into the root. AllGather must move n
# times as much, because every rank needs the chunks it lacks. On a network where every rank has
# its own link the ring still needs only n - 1 rounds of N_out/n bytes, the same α-β time as the
# naive gather, because all n links work at once. The naive allgather (gather to rank 0, then
# send everything to each rank) pays (n-1)·N_out on rank 0's link. The seed's remark that
# AllGather is "the all-hands version of Broadcast" (AllGather 就是 Broadcast 的"全员版") is
# literally true as schedules, as tutorial 04 shows: n broadcasts, one from each rank, make an
# allgather.
#
# ## 9. Reduce and Scatter: the same trees, run backwards
#
# Take any broadcast schedule, play its rounds in reverse order, turn every arrow around, and
# make each copy an *add*. Data that fanned out from the root now flows into it, summed on the
# way: a **reduce**. `Schedule.reversed(name, reduce=True)` does exactly that, and jaxcoll's
# tree and binomial reduces *are* their broadcasts reversed. The same trick without the add
# turns a scatter into a **gather**. Here are the binomial broadcast and reduce on 4 ranks:

# %%
print(jaxcoll.schedule("broadcast", "binomial", 4))
print(jaxcoll.schedule("reduce", "binomial", 4))
for n_ranks in range(1, 17):
    for root in range(n_ranks):
        for a in ("tree", "binomial"):
            backwards = jaxcoll.schedule("broadcast", a, n_ranks, root=root).reversed(
                "r", reduce=True)
            assert jaxcoll.schedule("reduce", a, n_ranks, root=root).rounds == backwards.rounds
        scatter = jaxcoll.schedule("scatter", "binomial", n_ranks, root=root)
        backwards = scatter.reversed("g", reduce=False)
        assert jaxcoll.schedule("gather", "binomial", n_ranks, root=root).rounds == backwards.rounds
print("reduce = broadcast reversed (tree, binomial); gather = scatter reversed (binomial): "
      "n = 1..16, every root")

# %% [markdown]
# The binomial reduce drawn by `jaxcoll.draw`: dashed arrows are reductions, and a cell striped
# with several colours holds the sum of those ranks' data. After 3 rounds the root (rank 0)
# holds all 8 colours.

# %%
Image(filename=jaxcoll.draw(jaxcoll.schedule("reduce", "binomial", 8),
                            f"{pictures}/binomial_reduce.png"))

# %% [markdown]
# Now on the devices, from root 5, against the built-ins. **Reduce**: the root gets `psum`, and
# every other rank gets zeros. **Scatter**: rank i gets block i of the root's array (a *block*
# is what the schedules call a chunk; what the other ranks pass in is ignored), compared with
# the root's row cut into n blocks.

# %%
REDUCES = ["naive", "tree", "binomial", "reduce_scatter_gather", "xla"]
SCATTERS = ["naive", "binomial", "xla"]


def reduces(x):
    previous = lax.psum(x, AXIS)                               # the built-in
    results = [previous]
    for a in REDUCES:
        previous = jaxcoll.reduce(after(x, previous), AXIS, root=ROOT, algorithm=a)
        results.append(previous)
    return jnp.stack(results)                                  # (1 + reduces, 5) on each rank


def scatters(blocks):          # blocks: (n, 2) on every rank; rank i gets row i of the root's
    results, previous = [], blocks
    for a in SCATTERS:
        previous = jaxcoll.scatter(after(blocks, previous), AXIS, root=ROOT, algorithm=a)
        results.append(previous)
    return jnp.stack(results)                                  # (scatters, 2) on each rank


x = integer_inputs(n, 5)                                 # (n ranks, 5): reduce's input
blocks = integer_inputs(n, n, 2)                         # (n ranks, n blocks, 2): scatter's input
psum, *ours = np.swapaxes(np.asarray(on_every_rank(reduces)(x)), 0, 1)  # each: (n ranks, 5)
np.testing.assert_array_equal(psum, np.broadcast_to(x.sum(0), x.shape))
only_root = np.zeros_like(psum)
only_root[ROOT] = psum[ROOT]
for a, got in zip(REDUCES, ours):
    np.testing.assert_array_equal(got, only_root, err_msg=f"reduce {a}")
scattered = np.swapaxes(np.asarray(on_every_rank(scatters)(blocks)), 0, 1)  # each: (n ranks, 2)
for a, got in zip(SCATTERS, scattered):
    np.testing.assert_array_equal(got, blocks[ROOT], err_msg=f"scatter {a}")  # row i = block i
print(f"reduce: rank {ROOT} holds the psum {psum[ROOT]}, the others zeros "
      f"({len(REDUCES)} algorithms); scatter: rank i holds block i of rank {ROOT}'s array "
      f"({len(SCATTERS)} algorithms)")

# %% [markdown]
# ## What we found
#
# | the seed says | checked by code above |
# |---|---|
# | naive broadcast: O(n) | exactly n - 1 rounds, all from the root's one link |
# | tree broadcast: O(log n) | true, but the heap tree takes 4 rounds at n = 8 (binomial: 3), because a parent sends to its two children one after the other. Its worst case is 2·floor(log2 n) rounds, reached at n = 2^k - 1. The binomial tree takes ceil(log2 n) |
# | the tree pseudocode | incomplete: `parent` is undefined (it is (r-1)//2), the root sends to ranks 1 and 2 even when n < 3, the root is always 0, and the order of the sends is left unsaid. Completed, it equals jaxcoll's `tree` for n = 1..16 and every root |
# | Gather: only the root gets everything | yes (jaxcoll: zeros elsewhere). AllGather moves n times the bytes, but a ring needs no more rounds or α-β time than a naive gather |
# | merge small broadcasts | the α term: one broadcast pays ceil(log2 n)·α once instead of k times |
#
# Not in the seed: for large messages neither tree is best. Scatter + allgather sends about
# 2(n-1)/n·N per rank instead of N in every round (a pipelined heap tree gets its Nβ term down
# to about 2·Nβ, at the price of more α). Reduce and gather are broadcast and scatter run
# backwards (`Schedule.reversed`). Tutorial 04 turns that into the map of how all eight
# primitives relate.
#
# ## Try it
#
# Write the binomial broadcast's rounds yourself. `my_binomial_rounds(n, root)` should return
# a list of rounds, each a list of `(src, dst)` pairs, equal to jaxcoll's `binomial` schedule
# for every n and root. Then run it with `ppermute`: it plugs straight into `tree_broadcast`'s
# loop in place of `tree_rounds`.
#
# *Hint:* follow `tree_rounds`, with other children. In virtual ranks (the root is 0), the
# children of v are v + 2^k for every power of two 2^k below v's lowest set bit (for the root,
# every 2^k < n), largest first, keeping those < n. As in the heap tree, a rank sends to its
# children one per round, starting the round after it got the data, so its child number c
# (c = 0, 1, ...) gets it at `arrival(v) + c + 1`. Map back to real ranks with
# `(v + root) % n`.

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
