# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 09 · Collectives in sharded matmuls
#
# Where do a model's collectives come from? Mostly from sharded matrix multiplies; a short
# notation tells which one each needs.
#
# **What you will learn**: the notation of *How to Scale Your Model* (Austin et al., 2025,
# [sharding chapter](https://jax-ml.github.io/scaling-book/sharding/)); the cases of a
# sharded matmul; Megatron and sequence parallelism; FSDP, whose ReduceScatter `jax.grad`
# writes; mixture of experts with and without a capacity; Ulysses attention.
#
# **Prerequisites**: notebook 02 (section 7, `check_vma`). Every sharded result is checked
# against the unsharded computation.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
os.environ["JAXCOLL_CALIBRATE"] = "0"        # auto: the shipped calibrations, everywhere
import jax
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

import re
from collections import Counter

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import jaxcoll
from lesson import collectives_in, n, small_integers as ints  # tutorials/lesson.py: plumbing

mesh = Mesh(np.array(jax.devices()), ("X",))                      # a line of 8 devices
grid = Mesh(np.array(jax.devices()).reshape(2, 4), ("X", "Y"))    # the same 8 as a 2 x 4 grid
rng = np.random.default_rng(0)


def sharded(in_specs, out_specs, mesh=mesh):
    """Decorator: jit(shard_map(fn)), fn running on each device's shards."""
    return lambda fn: jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=in_specs,
                                            out_specs=out_specs))


def jaxcoll_calls(program, *args):
    """The jaxcoll collectives in program's jaxpr (traced, not run), in order."""
    return re.findall(r"jaxcoll_(\w+)", str(jax.make_jaxpr(program)(*args)))

# %% [markdown]
# ## 1. The notation and its four rules
#
# `A[I, J]` is a matrix whose dimensions are named I and J. `A[I_X, J]` says that I is
# **sharded** over mesh axis X: each of the 8 devices along X holds 1/8 of the rows, and all
# of J. In `shard_map` that is `P("X", None)`. `A[I, J]` with no subscript is **replicated**:
# every device holds all of it (`P()`).
#
# One more state: `A[I, J]{U_X}`, **unreduced**. Every device on X holds an array of the full
# shape, and A is their **sum**: what devices get by multiplying their own slices of a
# contracting dimension. Each collective moves between these states:

# %%
A = ints(16, 16, seed=1)
parts = ints(n, 16, 16, seed=2)  # parts[k]: device k's addend; the unreduced array is their sum


@sharded(P("X"), P("X"))
def allgather_rule(a):          # A[I_X, J] -> A[I, J]; a: (2, 16), this device's rows
    return jaxcoll.allgather(a, "X", tiled=True)[None]        # (1, 16, 16): this device's copy


@sharded(P("X"), P(None, "X"))
def reduce_scatter_rule(part):  # A[I, J]{U_X} -> A[I, J_X]; part: (1, 16, 16)
    return jaxcoll.reduce_scatter(part[0], "X", dim=1, tiled=True)  # (16, 2)


@sharded(P("X"), P())
def allreduce_rule(part):       # A[I, J]{U_X} -> A[I, J]
    return jaxcoll.allreduce(part[0], "X")                    # (16, 16)


@sharded(P(None, "X"), P("X", None))
def alltoall_rule(a):           # A[I, J_X] -> A[I_X, J]; a: (16, 2), this device's columns
    return jaxcoll.alltoall(a, "X", split_dim=0, concat_dim=1, tiled=True)  # (2, 16)


np.testing.assert_array_equal(allgather_rule(A), np.broadcast_to(A, (n, 16, 16)))  # 8 copies
np.testing.assert_array_equal(reduce_scatter_rule(parts), parts.sum(0))
np.testing.assert_array_equal(allreduce_rule(parts), parts.sum(0))
np.testing.assert_array_equal(alltoall_rule(A), A)
print("each one moves values; none changes them")

# %% [markdown]
# `allgather_rule` returns every device's copy, not `P()`, because JAX types an AllGather's
# result as varying per device
# ([notebook 02, section 7](02_allgather_reduce_scatter.ipynb#7-check_vma-typed-results)).
#
# What each costs per device, from `jaxcoll.cost` with α = 0 and β = 1 (its "seconds" are
# then bytes). N is the array a device ends with (AllGather) or starts from (the others):

# %%
def bytes_sent(primitive, algorithm, nbytes, ranks=n):
    """Bytes the busiest rank sends in `algorithm`'s schedule for a buffer of `nbytes`."""
    schedule = jaxcoll.schedule(primitive, algorithm, ranks)
    return jaxcoll.cost(schedule, nbytes, alpha=0.0, beta=1.0).bytes_sent


N = 1 << 20
for primitive, algorithm in [("allgather", "ring"), ("reduce_scatter", "ring"),
                             ("allreduce", "ring"), ("alltoall", "naive")]:
    sent = bytes_sent(primitive, algorithm, N)
    assert sent == jaxcoll.bounds(primitive, n, N).path_bytes  # no schedule can send less
    print(f"{primitive:<15} {algorithm:<6} sends {round(sent * n / N):>2}/{n} N")
assert bytes_sent("alltoall", "naive", N / n) == bytes_sent("allgather", "ring", N) / n

# %% [markdown]
# (n-1)/n·N for each of AllGather, ReduceScatter and AllToAll, and twice that for AllReduce
# (a ReduceScatter then an AllGather), each at the lower bound of `jaxcoll.bounds`. Mind what
# N is: for `A[I_X, J] -> A[I, J]` the whole of A, for `A[I, J_X] -> A[I_X, J]` one shard. So
# moving a subscript costs 1/n of removing it (the last assert; the book's 1/4 is for TPU
# rings, where blocks travel several hops).
#
# ## 2. The cases of a sharded matmul
#
# In `C[I, K] = A[I, J] · B[J, K]`, J is the **contracting** dimension; the cases are
# about J.
#
# **Case 1: J is sharded on neither side.** The other subscripts carry over, with no
# communication: `A[I_X, J] · B[J, K_Y] -> C[I_X, K_Y]`. On the 2 x 4 grid:

# %%
A, B = ints(8, 16, seed=3), ints(16, 8, seed=4)


@sharded((P("X", None), P(None, "Y")), P("X", "Y"), mesh=grid)
def case1(a, b):                # a: (4, 16), b: (16, 2)
    return a @ b                # (4, 2): block (x, y) of C


np.testing.assert_array_equal(case1(A, B), A @ B)
assert jaxcoll_calls(case1, A, B) == []
print("case 1: C[I_X, K_Y] with no collective")

# %% [markdown]
# **Case 2: J is sharded on one side**, `A[I, J_X] · B[J, K]`. Gather it first
# (`A[I, J_X] -> A[I, J]`), and case 1 applies:

# %%
@sharded((P(None, "X"), P()), P("X"))
def case2(a, b):                # a: (8, 2), b: (16, 8)
    a = jaxcoll.allgather(a, "X", dim=1, tiled=True)          # A[I, J_X] -> A[I, J]: (8, 16)
    return (a @ b)[None]        # C[I, K], this device's copy: (1, 8, 8)


np.testing.assert_array_equal(case2(A, B), np.broadcast_to(A @ B, (n, 8, 8)))
print("case 2:", jaxcoll_calls(case2, A, B))

# %% [markdown]
# **Case 3: J is sharded the same way on both sides**, `A[I, J_X] · B[J_X, K]`. Each device
# multiplies its slices, and its product sums over its slice of J only: `C[I, K]{U_X}`. An
# AllReduce gives `C[I, K]`, a ReduceScatter `C[I, K_X]` for half the bytes:

# %%
@sharded((P(None, "X"), P("X", None)), P())
def case3_allreduce(a, b):      # a: (8, 2), b: (2, 8)
    return jaxcoll.allreduce(a @ b, "X")                      # C[I, K]{U_X} -> C[I, K]


@sharded((P(None, "X"), P("X", None)), P(None, "X"))
def case3_reduce_scatter(a, b):
    return jaxcoll.reduce_scatter(a @ b, "X", dim=1, tiled=True)  # -> C[I, K_X]: (8, 1)


np.testing.assert_array_equal(case3_allreduce(A, B), A @ B)
np.testing.assert_array_equal(case3_reduce_scatter(A, B), A @ B)
print("case 3:", jaxcoll_calls(case3_allreduce, A, B), "or",
      jaxcoll_calls(case3_reduce_scatter, A, B))

# %% [markdown]
# ## 3. Tensor parallelism: the Megatron MLP
#
# A transformer MLP is `Y = relu(X W1) W2`, with `X[B, D]` (B tokens), `W1[D, F]` and
# `W2[F, D]`, and F usually 4D. Megatron-LM (Shoeybi et al., 2019) shards the hidden
# dimension F: `W1[D, F_X]` by columns, `W2[F_X, D]` by rows.
#
# - `X[B, D] · W1[D, F_X] -> H[B, F_X]`: case 1, no communication.
# - relu is elementwise, and every element of H is whole on its device.
# - `H[B, F_X] · W2[F_X, D] -> Y[B, D]{U_X}`: case 3, so one AllReduce.
#
# Sharding W1 by rows instead would leave H unreduced, and relu of a partial sum is not the
# relu of the sum.

# %%
batch, D, F = 16, 16, 64        # tokens, model width, hidden width
X_tp, W1, W2 = ints(batch, D, seed=5), ints(D, F, seed=6), ints(F, D, seed=7)
reference = jax.nn.relu(X_tp @ W1) @ W2


@sharded((P(), P(None, "X"), P("X", None)), P())
def megatron_mlp(x, w1, w2):    # x: (16, 16) all tokens; w1: (16, 8); w2: (8, 16)
    h = jax.nn.relu(x @ w1)                                   # H[B, F_X]: (16, 8)
    return jaxcoll.allreduce(h @ w2, "X")                     # Y[B, D]{U_X} -> Y[B, D]


np.testing.assert_array_equal(megatron_mlp(X_tp, W1, W2), reference)
print("Megatron MLP:", jaxcoll_calls(megatron_mlp, X_tp, W1, W2))

# %% [markdown]
# The backward pass has one AllReduce too: each device's gradient for the replicated X covers
# only its slice of F (Megatron's `f` operator). JAX inserts that sum itself, as a `psum`
# (notebook 02, section 7; section 7 here counts it).
#
# **Sequence parallelism** (Korthikanti et al., 2022) splits that AllReduce into its halves
# (the same bytes, notebook 02). Between MLPs the activations stay sharded over the tokens,
# `X[B_X, D]`, so layer norms and dropouts work on 1/8 of them. The MLP gathers its input and
# reduce-scatters its output:

# %%
@sharded((P("X"), P(None, "X"), P("X", None)), P("X"))
def sequence_parallel_mlp(x, w1, w2):  # x: (2, 16), this device's tokens
    x = jaxcoll.allgather(x, "X", tiled=True)                 # X_tp[B_X, D] -> X_tp[B, D]: (16, 16)
    h = jax.nn.relu(x @ w1)                                   # H[B, F_X]
    return jaxcoll.reduce_scatter(h @ w2, "X", tiled=True)    # Y[B, D]{U_X} -> Y[B_X, D]: (2, 16)


np.testing.assert_array_equal(sequence_parallel_mlp(X_tp, W1, W2), reference)
print("sequence parallel:", jaxcoll_calls(sequence_parallel_mlp, X_tp, W1, W2))

# %% [markdown]
# ## 4. FSDP: the gradient of an AllGather is a ReduceScatter
#
# Data parallelism keeps a whole copy of the weights on every device. FSDP (ZeRO-3,
# Rajbhandari et al., 2020) keeps a shard, `W[D_X, F]`, and gathers W just before use; the
# batch is sharded over the same axis, `X[B_X, D]`.
#
# - Forward: AllGather `W[D_X, F] -> W[D, F]`, then `X[B_X, D] · W[D, F] -> Y[B_X, F]` (case 1).
# - Backward: `dW = Xᵀ · dY` contracts over B, sharded on both sides (case 3): `dW[D, F]{U_X}`.
#   A ReduceScatter gives each device the gradient of its own shard, `dW[D_X, F]`.
#
# Nobody writes that ReduceScatter: it is the **transpose** of the AllGather, which copies a
# shard to everyone, so its gradient sums what everyone computed for the shard at its owner.
# jaxcoll's allgather is a JAX primitive with that transpose rule, so `jax.grad` writes it:

# %%
D, F = 32, 16
X_fsdp, W = ints(16, D, seed=8), ints(D, F, seed=9) / 64  # 16 examples; / 64: tanh unsaturated


def fsdp_loss(w, x):                    # w: W[D_X, F], (4, 16); x: X[B_X, D], (2, 32)
    w = jaxcoll.allgather(w, "X", tiled=True)                 # W[D_X, F] -> W[D, F]
    return jnp.sum(jnp.tanh(x @ w))     # this device's examples' part of the loss


fsdp_grad = sharded((P("X"), P("X")), P("X"))(jax.grad(fsdp_loss))  # dW[D_X, F]
want = jax.grad(lambda w: jnp.sum(jnp.tanh(X_fsdp @ w)))(W)     # unsharded, dW[D, F]
np.testing.assert_allclose(fsdp_grad(W, X_fsdp), want, rtol=1e-5, atol=1e-5)
print("FSDP gradient:", jaxcoll_calls(fsdp_grad, W, X_fsdp))

# %% [markdown]
# Written that way, the gathered W stays in memory until the backward. Real FSDP frees it
# and gathers it again in the backward: in JAX, `jax.checkpoint`. The traced program then
# gathers W twice; in this one-layer toy XLA drops the forward's AllGather, whose only use is
# the loss `jax.grad` throws away.
#
# The compiled `collective-permute`s come from schedules: `auto` picks one for the 256-byte
# shard, `jax.grad` runs its dual as the ReduceScatter, and each run of rounds with the same
# partners compiles to one `collective-permute` (a loop).

# %%
fsdp_grad_remat = sharded((P("X"), P("X")), P("X"))(jax.grad(jax.checkpoint(fsdp_loss)))
np.testing.assert_allclose(fsdp_grad_remat(W, X_fsdp), want, rtol=1e-5, atol=1e-5)
counted = Counter(jaxcoll_calls(fsdp_grad_remat, W, X_fsdp))
assert counted == {"allgather": 2, "reduce_scatter": 1}
compiled = collectives_in(fsdp_grad_remat, W, X_fsdp)  # the optimized HLO's collective ops
assert compiled == collectives_in(fsdp_grad, W, X_fsdp)  # the forward's AllGather is gone
print("traced:", dict(counted), "compiled:", dict(compiled), "as without jax.checkpoint")


def compiled_permutes(schedule):
    """One collective-permute per run of consecutive rounds with the same (src, dst) pairs."""
    pairs = [sorted((t.src, t.dst) for t in round_) for round_ in schedule.rounds]
    return sum(1 for k, p in enumerate(pairs) if k == 0 or p != pairs[k - 1])


gather_schedule = jaxcoll.schedule("allgather", jaxcoll.choose("allgather", n, W.nbytes // n), n)
its_dual = jaxcoll.ir.symbolic.dual(gather_schedule)   # what jax.grad runs: the ReduceScatter
assert compiled == {"collective-permute": compiled_permutes(gather_schedule)
                    + compiled_permutes(its_dual)}
print(f"auto's AllGather: {gather_schedule.name!r}, {gather_schedule.n_rounds} rounds -> "
      f"{compiled_permutes(gather_schedule)} permutes; its dual {compiled_permutes(its_dual)}")

# %% [markdown]
# Two AllGathers and a ReduceScatter per step, each (n-1)/n of the weights' N bytes, against
# data parallelism's one AllReduce, 2(n-1)/n·N:

# %%
weights = 100 << 20                     # N: 100 MiB of weights (any size gives the same ratio)
fsdp_bytes = (2 * bytes_sent("allgather", "ring", weights)
              + bytes_sent("reduce_scatter", "ring", weights))
assert fsdp_bytes == 1.5 * bytes_sent("allreduce", "ring", weights)
print(f"FSDP sends {fsdp_bytes / 2**20:.1f} MiB per device per step, 1.5 x data parallel's")

# %% [markdown]
# 1.5 times the bytes, for weights, gradients and optimizer state in 1/n of the memory. The
# ZeRO stages, by what each device keeps 1/n of:
#
# | stage | sharded | collectives per step | bytes per device |
# |---|---|---|---|
# | ZeRO-1 | optimizer state | ReduceScatter dW, AllGather the updated W | 2(n-1)/n · N |
# | ZeRO-2 | + gradients | ReduceScatter dW, AllGather the updated W | 2(n-1)/n · N |
# | ZeRO-3 / FSDP | + weights | AllGather W (twice), ReduceScatter dW | 3(n-1)/n · N |
#
# A device holding 1/n of the optimizer state can update only 1/n of W, so from stage 1 on
# the updated shards are AllGathered; ZeRO-1 and ZeRO-2 move the same bytes and differ in
# memory only (stage 1 keeps the whole gradient until the ReduceScatter has read it; stage 2
# frees all but its shard as the backward goes, ZeRO's paper, Rajbhandari et al., 2020).
#
# The lecture's "a ReduceScatter is enough" when each card keeps part of the parameters
# (notebook 01) holds for the gradients (ZeRO-2, `examples/zero_sharded.py`); the updated
# shards must still reach every device.
#
# ## 5. Mixture of experts: AllToAll, padded or ragged
#
# A router sends each token to one of E expert MLPs (top-1, as in Switch Transformer, Fedus
# et al., 2021), one per device. **With a capacity**, each device sorts its tokens into a
# buffer `[E, C, D]`, C slots per expert. An AllToAll sends block e to device e,
# `buf[S_X, E, C, D] -> buf[S, E_X, C, D]` (S the source device), device e applies its
# expert, and the same AllToAll brings the results back. A token past its expert's C slots is
# **dropped** (the residual connection carries it).

# %%
E, T, D = n, 16, 8              # experts (one per device), tokens per device, model width
tokens = rng.standard_normal((n * T, D)).astype(np.float32)  # all 128 tokens
router = rng.standard_normal((D, E)).astype(np.float32)
experts = rng.standard_normal((E, D, D)).astype(np.float32)  # expert e: tanh(x @ experts[e])


def route(x, router):           # x: (T, D), this device's tokens
    """Each token's expert (T,) and gate (T,): the router's top-1."""
    probs = jax.nn.softmax(x @ router)                        # (T, E)
    return jnp.argmax(probs, axis=1), jnp.max(probs, axis=1)


def moe_capacity(alltoall, C):
    @sharded((P("X"), P(), P("X")), P("X"))
    def layer(x, router, expert):   # x: (T, D); expert: (1, D, D), this device's expert
        choice, gate = route(x, router)
        onehot = jax.nn.one_hot(choice, E)                    # (T, E)
        slot = jnp.sum((jnp.cumsum(onehot, axis=0) - 1) * onehot, axis=1)  # (T,): place in queue
        dispatch = onehot[:, :, None] * jax.nn.one_hot(slot, C)[:, None, :]  # (T, E, C)
        buf = jnp.einsum("tec,td->ecd", dispatch, x)          # (E, C, D): tokens by expert
        out = jnp.tanh(alltoall(buf) @ expert[0])             # (n sources, C, D): my expert's
        out = alltoall(out)                                   # (E, C, D): back home
        return gate[:, None] * jnp.einsum("tec,ecd->td", dispatch, out)  # (T, D)
    return layer


def jaxcoll_alltoall(buf):
    return jaxcoll.alltoall(buf, "X", split_dim=0, concat_dim=0, tiled=True)


probs = jax.nn.softmax(tokens @ router)                       # unsharded, token by token
chosen = np.argmax(probs, axis=1)
want = probs.max(axis=1)[:, None] * jnp.tanh(jnp.einsum("td,tdf->tf", tokens, experts[chosen]))
no_drops = moe_capacity(jaxcoll_alltoall, C=T)                # C = T: room for every token
got = no_drops(tokens, router, experts)
np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
lax_alltoall = lambda buf: lax.all_to_all(buf, "X", 0, 0, tiled=True)  # noqa: E731
np.testing.assert_array_equal(got, moe_capacity(lax_alltoall, C=T)(tokens, router, experts))
print("MoE:", jaxcoll_calls(no_drops, tokens, router, experts), "equal to one device and lax")
print("tokens per expert:", np.bincount(chosen, minlength=E))
assert np.bincount(chosen).max() > 2 * T

# %% [markdown]
# **The imbalance.** The router is untrained: the busiest expert gets over twice its share of
# T = 16 tokens. C = T drops nothing, but 7/8 of the buffer is padding; real models take
# C = ⌈1.25·T/E⌉ = 3, drop the overflow, and train the router toward balance with an
# auxiliary loss.
#
# **Without a capacity: `ragged_alltoall`** (`lax.ragged_all_to_all`'s semantics; XLA:CPU
# cannot run lax's). Each device sorts its tokens by expert; slice e, `send_sizes[e]` rows
# from `input_offsets[e]`, is written on device e at `output_offsets[e]`; `recv_sizes[s]` rows
# arrive from device s. The sizes are run-time values, so the devices first gather everyone's
# counts to agree where rows land. The combine swaps the roles.

# %%
def exclusive_cumsum(sizes, axis=0):
    return jnp.cumsum(sizes, axis=axis) - sizes


@sharded((P("X"), P(), P("X")), P("X"))
def moe_ragged(x, router, expert):  # x: (T, D); expert: (1, D, D)
    choice, gate = route(x, router)
    order = jnp.argsort(choice, stable=True)                  # (T,): my tokens sorted by expert
    counts = jnp.bincount(choice, length=E)                   # (E,): my tokens per expert
    every = jaxcoll.allgather(counts, "X")                    # (n sources, E): everyone's counts
    start = exclusive_cumsum(every)                           # (s, e): where s's rows land on e
    me = lax.axis_index("X")
    buf = jaxcoll.ragged_alltoall(                            # dispatch: slice e to device e
        x[order], jnp.zeros((n * T, D), x.dtype),             # (n·T, D): room for every token
        input_offsets=exclusive_cumsum(counts), send_sizes=counts,
        output_offsets=start[me], recv_sizes=every[:, me], axis="X")
    out = jnp.tanh(buf @ expert[0])                           # (n·T, D): my expert's
    back = jaxcoll.ragged_alltoall(                           # combine: the roles swapped
        out, jnp.zeros((T, D), x.dtype),                      # (T, D): my tokens, by expert
        input_offsets=start[:, me], send_sizes=every[:, me],
        output_offsets=exclusive_cumsum(every, axis=1)[:, me], recv_sizes=counts, axis="X")
    return gate[:, None] * jnp.zeros_like(x).at[order].set(back)  # (T, D), in token order


np.testing.assert_allclose(moe_ragged(tokens, router, experts), want, rtol=1e-5, atol=1e-6)
print("ragged:", jaxcoll_calls(moe_ragged, tokens, router, experts), "equal to one device")

# %% [markdown]
# A `ragged_alltoall` is an AllToAll of the slices and one of their offsets. Side by side
# (C = 3 run to count its drops; bytes per device and AllToAll from the cost model):

# %%
C = int(np.ceil(1.25 * T / E))                               # capacity factor 1.25: 3 slots
with_drops = moe_capacity(jaxcoll_alltoall, C)(tokens, router, experts)
dropped = np.all(np.asarray(with_drops) == 0, axis=1).sum()  # tokens whose output is zero
per_source = np.stack([np.bincount(chosen[d * T:(d + 1) * T], minlength=E)
                       for d in range(n)])                   # (source device, expert): tokens
assert dropped == np.maximum(per_source - C, 0).sum()        # those past the C slots
row = D * 4                                                  # bytes of one token
slots = jaxcoll.ragged.padded_bytes(tokens[:T], np.zeros((n * T, D), np.float32), n)
leaving = (T - np.diag(per_source)) * row                   # (devices,): rows for others
for name, sent, drops in [
        ("capacity C = T", bytes_sent("alltoall", "naive", E * T * row), 0),
        (f"capacity C = {C}", bytes_sent("alltoall", "naive", E * C * row), dropped),
        ("ragged, jaxcoll's slots", bytes_sent("alltoall", "naive", slots), 0),
        ("ragged, the rows only", leaving.max(), 0)]:
    print(f"{name:<24} sends {sent:5.0f} B, drops {drops:>2} tokens")
assert slots == E * T * row and leaving.max() < bytes_sent("alltoall", "naive", E * C * row)

# %% [markdown]
# No drops and no C. On GPUs and TPUs `lax.ragged_all_to_all` sends only the rows (last line: the
# busiest sender's), less than C = 3's buffer here; jaxcoll's, built from `ppermute` with static
# shapes, carries each slice in a slot as long as it could be (T rows): C = T's bytes. Both ragged
# versions receive into n·T rows, the worst case, and the busiest expert sets the step's pace.
#
# ## 6. Sequence parallelism with AllToAll (Ulysses)
#
# With the sequence sharded, `Q[S_X, H, Dh]`, every query still needs every key, but heads do
# not mix. DeepSpeed-Ulysses (Jacobs et al., 2023) moves the subscript from S to H with an
# AllToAll, `[S_X, H, Dh] -> [S, H_X, Dh]`, runs attention on its H/n heads, and moves it
# back. Q, K and V travel in one call.

# %%
S, H, Dh = 64, 8, 4
Q, K, V = rng.standard_normal((3, S, H, Dh)).astype(np.float32)


def attention(q, k, v):         # (S, h, Dh) each: h heads over the whole sequence
    scores = jnp.einsum("qhd,khd->hqk", q, k) / jnp.sqrt(Dh)  # (h, S, S)
    return jnp.einsum("hqk,khd->qhd", jax.nn.softmax(scores, axis=-1), v)  # (S, h, Dh)


@sharded(P("X"), P("X"))
def ulysses(q, k, v):           # (8, H, Dh) each: this device's tokens, all heads
    q, k, v = jaxcoll.alltoall((q, k, v), "X", split_dim=1, concat_dim=0,
                               tiled=True)                    # -> (S, H/8, Dh): my heads
    o = attention(q, k, v)                                    # (S, H/8, Dh)
    return jaxcoll.alltoall(o, "X", split_dim=0, concat_dim=1, tiled=True)  # -> (8, H, Dh)


np.testing.assert_allclose(ulysses(Q, K, V), attention(Q, K, V), rtol=1e-5, atol=1e-6)
print("Ulysses attention equals full attention, with", jaxcoll_calls(ulysses, Q, K, V))
L = S // n * H * Dh * 4                 # bytes of one device's Q
assert (bytes_sent("allgather", "ring", 2 * L * n)           # ring attention: all K and V
        == n / 2 * bytes_sent("alltoall", "naive", 4 * L))   # Ulysses: Q, K, V and the output

# %% [markdown]
# Ring attention (notebook 07) passes K and V around the ring instead: n/2 times Ulysses'
# bytes. But Ulysses needs n to divide H (the KV heads) and waits for its AllToAlls, while ring
# attention's transfers overlap compute: long-context systems often use Ulysses inside a
# node, ring across.
#
# ## 7. Summary: a forward and a backward pass of each
#
# `jax.grad` of each layer above, traced. JAX's own `psum` counts too: it sums the gradient
# of every replicated input (notebook 02, section 7), data parallelism's AllReduce.

# %%
def step_collectives(program, *args):
    """{collective: count} in a forward and backward pass: grad of sum(program(*args))."""
    loss = lambda *a: jnp.sum(program(*a))  # noqa: E731
    jaxpr = str(jax.make_jaxpr(jax.grad(loss, argnums=tuple(range(len(args)))))(*args))
    return dict(Counter(ours or "psum" for ours, _ in
                        re.findall(r"jaxcoll_(\w+)|\b(psum)\w*", jaxpr)))


data_parallel = sharded((P(), P("X")), P("X"))(lambda w, x: jnp.tanh(x @ w))
fsdp = sharded((P("X"), P("X")), P("X"))(jax.checkpoint(
    lambda w, x: jnp.tanh(x @ jaxcoll.allgather(w, "X", tiled=True))))
moe_args = (tokens, router, experts)
layers = [  # name, program, arguments, what it should contain
    ("data parallel", data_parallel, (W, X_fsdp), {"psum": 1}),
    ("FSDP (weights gathered again)", fsdp, (W, X_fsdp), {"allgather": 2, "reduce_scatter": 1}),
    ("Megatron MLP", megatron_mlp, (X_tp, W1, W2), {"allreduce": 1, "psum": 1}),
    ("+ sequence parallel", sequence_parallel_mlp, (X_tp, W1, W2),
     {"allgather": 2, "reduce_scatter": 2}),
    ("MoE, capacity C", no_drops, moe_args, {"alltoall": 4, "psum": 1}),
    ("MoE, ragged", moe_ragged, moe_args, {"allgather": 1, "alltoall": 6, "psum": 1}),
    ("Ulysses attention", ulysses, (Q, K, V), {"alltoall": 4})]
for name, program, args, expected in layers:
    found = step_collectives(program, *args)
    assert found == expected, (name, found)
    print(f"{name:<30} {found}")

# %% [markdown]
# | pattern | forward | backward | bytes per device |
# |---|---|---|---|
# | data parallel | none | AllReduce dW | 2(n-1)/n · weights |
# | FSDP / ZeRO-3 | AllGather W | AllGather W, ReduceScatter dW | 3(n-1)/n · weights |
# | Megatron MLP | AllReduce Y | AllReduce dX | 4(n-1)/n · activations |
# | + sequence parallel | AllGather X, ReduceScatter Y | AllGather dY, ReduceScatter dX | 4(n-1)/n · activations |
# | MoE, capacity C | AllToAll, AllToAll | AllToAll, AllToAll | 4(n-1)/n · E·C tokens |
# | MoE, ragged | AllGather counts, ragged AllToAll ×2 | ragged AllToAll ×2 | 4 · the rows that leave (jaxcoll: as C = T) |
# | Ulysses attention | AllToAll (Q, K, V), AllToAll (out) | the same, transposed | 8(n-1)/n · L |
#
# The backward is the forward transposed: AllGather and ReduceScatter swap, AllToAll stays,
# and every replicated input's gradient needs an AllReduce (the MoE `psum` is the router's).
# The ragged layer's 6 AllToAlls: slices and offsets forward, slices only backward.
#
# ## Try it
#
# **A matmul on the 2 x 4 grid.** `A[I_X, J_Y] · B[J_Y, K] -> C[I_X, K]`. Write
# `my_matmul(a, b)`, run on every device of `grid` (a: `(I/2, J/4)`, b: `(J/4, K)`), returning
# its `(I/2, K)` block of C. Which case, which collective, over which axis?
#
# *Hint:* J is sharded over Y on both sides; X is only along for the ride.
#
# <details><summary>Answer</summary>
#
# Case 3 over Y: the local product is `C[I_X, K]{U_Y}`, and an AllReduce over Y removes the
# partial sum.
#
# ```python
# def my_matmul(a, b):
#     return jaxcoll.allreduce(a @ b, "Y")
# ```
# </details>

# %%
def my_matmul(a, b):            # a: (4, 4), b: (4, 8): this device's blocks
    raise NotImplementedError("your code here")


def check_exercise(matmul):
    A, B = ints(8, 16, seed=10), ints(16, 8, seed=11)
    program = sharded((P("X", "Y"), P("Y", None)), P("X", None), mesh=grid)(matmul)
    try:
        got = program(A, B)
    except NotImplementedError:
        print("not done yet: fill in my_matmul")
        return
    np.testing.assert_array_equal(got, A @ B)
    print("correct: C = A @ B, with", jaxcoll_calls(program, A, B) or "no collectives")


check_exercise(my_matmul)
