# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 07 · Overlap: collectives that hand each block to compute
#
# **What you will learn**
#
# - collective matmul: `all_gather(x) @ w` written by hand as a ring of `ppermute`s with one
#   block multiplied per step (the loop of JAX's shard_map docs), then with
#   `jaxcoll.allgather_matmul`;
# - why it sends exactly the bytes the all-gather sends, yet can hide them: the transfer of
#   the next block runs while this one is multiplied, and no rank ever holds the gathered `x`;
# - the reduce-scatter side (`matmul_reduce_scatter`: the partial sum travels), the
#   bidirectional ring, and gradients (each one's transpose is the other);
# - ring attention in a few lines on `jaxcoll.allgather_fold`;
# - what fake CPU devices can and cannot show about all this, and the GPU flags that matter.
#
# **Prerequisites**: notebooks 01 and 02 (the ring, AllGather and ReduceScatter).
#
# The lecture this project grew from says that splitting AllReduce into ReduceScatter +
# AllGather lets computation overlap with what happens in between. Notebook 02 showed the
# bytes don't halve; this notebook shows the overlap.
#
# **Notation**: n = ranks (8), each rank's x is `(rows, k)`, w is `(k, p)`.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
import jax
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

import re

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from jax import lax

import jaxcoll
import lesson                                 # tutorials/lesson.py: the plumbing the notebooks share
from lesson import AXIS, by_rows, n, small_integers   # by_rows: every argument split by rows

# %% [markdown]
# ## 1. Collective matmul by hand
#
# Tensor parallelism (Megatron) shards activations by rows between layers and needs the whole
# `x` for the next matmul: `lax.all_gather(x, tiled=True) @ w`. Written that way, every rank
# first waits for all n-1 blocks, then multiplies. But the matmul splits by rows: block j of
# the result is `x_j @ w`. So each rank can multiply the block it holds **while** passing it
# to its right neighbour, and receive the next one from the left:

# %%
def allgather_matmul_by_hand(x_block, w):
    """all_gather(x, tiled=True) @ w, one block multiplied per ring step."""
    me = lax.axis_index(AXIS)
    rows = x_block.shape[0]
    right = [(r, (r + 1) % n) for r in range(n)]
    out = jnp.zeros((n * rows, w.shape[1]), x_block.dtype)       # (n * rows, p)
    block = x_block                                               # rank me's rows first
    for step in range(n):
        source = (me - step) % n                                  # whose rows we hold now
        out = lax.dynamic_update_slice_in_dim(out, block @ w, source * rows, axis=0)
        if step < n - 1:
            block = lax.ppermute(block, AXIS, right)              # independent of the dot above
    return out


def reference(x_block, w):
    return lax.all_gather(x_block, AXIS, tiled=True) @ w


rows, k, p = 4, 6, 5
x = small_integers(n * rows, k)             # rank r holds rows r*rows .. (r+1)*rows - 1
w = np.tile(small_integers(k, p, seed=1), (n, 1))   # every rank holds the same w
want = by_rows(reference)(x, w)
assert np.array_equal(by_rows(allgather_matmul_by_hand)(x, w), want)
print("by hand == all_gather @ w; each rank's result:", (n * rows, p),
      "- stacked over the 8 ranks by out_specs:", want.shape)

# %% [markdown]
# In step `s` the dot reads `block` and the `ppermute` reads the same `block`: neither waits for
# the other, so a compiler may run them at the same time. That is the whole trick.
#
# ## 2. The same with jaxcoll
#
# `jaxcoll.allgather_matmul` is that loop, built from the registry's ring schedule (which rank
# sends which block in which round) rather than written out again:

# %%
ours = by_rows(lambda x, w: jaxcoll.allgather_matmul(x, w, AXIS))
assert np.array_equal(ours(x, w), want)

ours_rs = by_rows(lambda x, w: jaxcoll.matmul_reduce_scatter(x, w, AXIS))
ref_rs = by_rows(lambda x, w: lax.psum_scatter(x @ w, AXIS, scatter_dimension=0, tiled=True))
x_full = small_integers(n * n * rows, k, seed=2)  # each rank: (n * rows, k), all rows, its own
assert np.array_equal(ours_rs(x_full, w), ref_rs(x_full, w))
print("allgather_matmul == all_gather @ w; matmul_reduce_scatter == psum_scatter(x @ w)")

# %% [markdown]
# `matmul_reduce_scatter` is the mirror image (the second matmul of a Megatron MLP): rank i
# needs rows i of `Σ_ranks x @ w`. The ring passes a partial sum round: each rank adds its own
# rows-block product to what arrives and sends it on, computing that block only in the round
# that sends it. It starts as a contribution, travels n-1 hops, and arrives complete at its
# owner.
#
# ## 3. The same bytes, hidden
#
# What moves? The all-gather sends each rank's block to n-1 others; the ring sends one block a
# step for n-1 steps. Count it in the compiled programs:

# %%
big_rows, big_k, big_p = 256, 512, 512
xb, wb = jnp.ones((n * big_rows, big_k)), jnp.ones((n * big_k, big_p))
programs = {"all_gather @ w": by_rows(reference),
            "by hand": by_rows(allgather_matmul_by_hand),
            "jaxcoll ring": by_rows(lambda x, w: jaxcoll.allgather_matmul(x, w, AXIS))}
block = big_rows * big_k * 4                                   # bytes of one rank's x
ops, sizes, temp = ({name: f(fn, xb, wb) for name, fn in programs.items()}
                    for f in (lesson.collectives_in, lesson.permute_sizes, lesson.temp_bytes))
for name in programs:
    print(f"{name:16} {dict(ops[name])}, permutes of {sorted(set(sizes[name]))} bytes; "
          f"XLA temp per rank: {temp[name] / 2**20:.2f} MiB")
print(f"one block: {block / 2**20:.2f} MiB; the gathered x: {n * block / 2**20:.2f} MiB")
assert ops["all_gather @ w"] == {"all-gather": 1} and block == 512 << 10
assert sizes["by hand"] == [block] * (n - 1) and sizes["jaxcoll ring"] == [block] * 2
assert temp["all_gather @ w"] >= n * block and round(temp["jaxcoll ring"] / block) == 3

# %% [markdown]
# All three send (n-1) blocks of 512 KiB per rank: the by-hand loop in n-1 `collective-permute`s
# of one block, jaxcoll's in one before a `while` loop and one in its body (run n-2 times), the
# reference in one all-gather. What differs is memory: the reference
# holds the whole gathered `x` (4 MiB) while it multiplies; the ring holds about three blocks,
# whatever n is (the block being multiplied, the one arriving, one product). jaxcoll runs the
# ring as a `fori_loop`, so no more than one step's blocks are ever live; the unrolled
# by-hand loop leaves that to XLA's scheduler.
#
# Does it save *time*? Per step, a rank must multiply a block (time `c`) and pass one on (time
# `t`). Unfused, the n-1 transfers come first and the products after; fused, each step costs
# `max(c, t)` if the two really run at once. A picture of both, for c = t:

# %%
lesson.overlap_timeline(n - 1, c=1.0, t=1.0)
plt.show()

# %% [markdown]
# (n-1)·t + n·c = 15 against (n-1)·max(c, t) + c = 8: at best the transfers vanish behind the
# products. When the dot is much longer than a transfer there is little to hide; when it is much
# shorter, the ring is transfer-bound either way.
#
# ## 4. Both directions
#
# A ring uses each link in one direction. `algorithm="bidirectional_ring"` cuts each block in
# two halves and sends one half each way round: every round moves two half-blocks, one on each
# direction of the link, and multiplies both. On full-duplex links each step's transfer takes
# half as long: t becomes t/2. (JAX's shard_map docs build the same, "bidirectional collective
# matmul".)

# %%
for algorithm in ("bidirectional_ring", "xla"):
    fn = by_rows(lambda x, w, a=algorithm: jaxcoll.allgather_matmul(x, w, AXIS, algorithm=a))
    assert np.array_equal(fn(x, w), want)
    fn_rs = by_rows(lambda x, w, a=algorithm: jaxcoll.matmul_reduce_scatter(x, w, AXIS,
                                                                            algorithm=a))
    assert np.array_equal(fn_rs(x_full, w), ref_rs(x_full, w))
print("bidirectional_ring and xla agree with the references")
halves = lesson.permute_sizes(by_rows(lambda x, w: jaxcoll.allgather_matmul(
    x, w, AXIS, algorithm="bidirectional_ring")), xb, wb)
assert set(halves) == {block // 2}
print("collective-permute sizes (bytes):", sorted(set(halves)), "- half a block each way")

# %% [markdown]
# ## 5. Gradients: the transpose of one is the other
#
# Differentiate `y = all_gather(x) @ w`. The gradient for x is `psum_scatter(dy @ w.T)`: a
# matmul_reduce_scatter. The gradient for w is `Σ_j x_jᵀ dy_j`: a fold over the blocks of x
# passed round again. jaxcoll's collective matmuls are JAX primitives whose transpose rules are
# exactly these, so `jax.grad` never builds the gathered x either. The jaxpr of the gradient
# shows it:

# %%
def loss(x, w):
    return jnp.sum(jnp.sin(jaxcoll.allgather_matmul(x, w, AXIS)))


def loss_ref(x, w):
    return jnp.sum(jnp.sin(reference(x, w)))


grads = by_rows(jax.grad(loss, argnums=(0, 1)))
grads_ref = by_rows(jax.grad(loss_ref, argnums=(0, 1)))
for a, b in zip(grads(x, w), grads_ref(x, w)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
jaxpr = str(jax.make_jaxpr(grads)(x, w))
found = sorted(set(re.findall(r"jaxcoll_\w+|all_gather|psum_scatter|ppermute", jaxpr)))
assert "jaxcoll_matmul_reduce_scatter" in found and "all_gather" not in found
print("collectives in the gradient's jaxpr:", found)

# %% [markdown]
# The forward `jaxcoll_allgather_matmul`, its transpose `jaxcoll_matmul_reduce_scatter` for
# dx, and the fold for dw (the `ppermute`s of a loop); no `all_gather`.
#
# ## 6. Ring attention on the fold
#
# The general tool under both is `jaxcoll.allgather_fold(x, axis, fn, init)`: `fn(acc, block,
# start)` is called on this rank's `x` and then on every other rank's as it arrives (`start` is
# the block's first row in the gathered array); the gathered array never exists.
#
# Ring attention (Liu et al., 2023) is exactly that: the sequence is sharded over the ranks,
# each rank keeps its queries and folds every arriving block of keys and values into an
# **online softmax** (a running max `m`, normaliser `l` and output `o`, as flash attention
# does). The result is exact softmax attention, with memory per rank set by the local sequence,
# not the whole one:

# %%
def ring_attention(q, k, v):
    """softmax(q kᵀ/√d) v over the whole sequence for this rank's queries (non-causal)."""
    def fold(acc, block, start):
        m, l, o = acc                                          # (rows,), (rows,), (rows, d)
        s = q @ block["k"].T / jnp.sqrt(q.shape[1])            # (rows, block rows)
        m_new = jnp.maximum(m, s.max(axis=1))
        p, rescale = jnp.exp(s - m_new[:, None]), jnp.exp(m - m_new)
        return m_new, l * rescale + p.sum(axis=1), o * rescale[:, None] + p @ block["v"]

    init = (jnp.full(q.shape[0], -jnp.inf), jnp.zeros(q.shape[0]), jnp.zeros(q.shape))
    m, l, o = jaxcoll.allgather_fold({"k": k, "v": v}, AXIS, fold, init)
    return o / l[:, None]


tokens, d = n * 32, 16
q, kk, v = (jax.random.normal(key, (tokens, d)) for key in jax.random.split(jax.random.key(0), 3))
full = jax.nn.softmax(q @ kk.T / jnp.sqrt(d), axis=1) @ v      # one device, the whole sequence
error = float(jnp.max(jnp.abs(by_rows(ring_attention)(q, kk, v) - full)) / jnp.max(jnp.abs(full)))
assert error < 1e-5
print(f"ring attention vs full attention: relative error {error:.1e}")

# %% [markdown]
# `examples/ring_attention.py` adds causal masking (from each block's `start`) and the
# gradient (two more folds: K/V round again for dQ, the queries' side round for dK and dV),
# and checks that its memory per rank does not grow with the number of ranks.
#
# ## 7. What a CPU can show, and what it cannot
#
# Time the fused ring against all_gather-then-dot on these 8 fake devices:

# %%
xm, wm = jnp.ones((n * 512, 1024)), jnp.ones((1024, 64))       # w: the same on every rank
timed = {"all_gather @ w": by_rows(lambda x: reference(x, wm)),
         "jaxcoll ring": by_rows(lambda x: jaxcoll.allgather_matmul(x, wm, AXIS))}
for name, seconds in lesson.median_seconds(timed, xm, iters=9).items():
    print(f"{name:16} {seconds * 1e3:7.2f} ms")
body = lesson.compiled_text(timed["jaxcoll ring"], xm)
assert "collective-permute-start" not in body and "collective-permute(" in body
print("async collective-permute (start/done) on this backend:", "collective-permute-start" in body)

# %% [markdown]
# Whatever the numbers say on your machine, they are not overlap. On XLA's CPU backend a
# `collective-permute` is synchronous (no start/done pair, as printed above): each loop step
# runs its dot, then its transfer. And the 8 "devices" share this machine's cores and memory,
# so a transfer is a memory copy competing with the dot. Where the ring wins on CPU, it wins by
# not writing and re-reading the gathered `x` (bench/RESULTS.md, section 6, measures both).
#
# On GPUs the transfer is a DMA over NVLink, beside the SMs doing the dot. XLA's
# latency-hiding scheduler (`--xla_gpu_enable_latency_hiding_scheduler=true`, set in NVIDIA's
# JAX containers) makes collective-permutes asynchronous and moves them next to independent
# compute: the loop body above is exactly what it can overlap. XLA also rewrites
# all_gather-then-dot into such a loop by itself ("windowed einsum"), but only for operands above
# `--xla_gpu_threshold_for_windowed_einsum_mib`, whose default is 100000 MiB (openxla/xla
# PR 6905), and not for every sharding (with FSDP + TP it did not kick in: openxla/xla PR
# 26948). Writing the loop, as jaxcoll does, does not depend on a pattern match. One GPU
# cannot show any of this; it needs several.
#
# ## Try it
#
# **The Gram matrix of the gathered rows.** `G = Xᵀ X` over *all* ranks' rows (X =
# `lax.all_gather(x, AXIS, tiled=True)`, a `(k, k)` result on every rank) is what a
# second-order optimizer (Shampoo) or a covariance needs. Write `my_gram(x)` with
# `jaxcoll.allgather_fold`, so that X is never gathered.
#
# *Hint:* `G = Σ_j x_jᵀ x_j`, one term per block.
#
# <details><summary>Answer</summary>
#
# ```python
# def my_gram(x):
#     return jaxcoll.allgather_fold(x, AXIS, lambda acc, block, start: acc + block.T @ block,
#                                   jnp.zeros((x.shape[1], x.shape[1])))
# ```
# </details>

# %%
def my_gram(x):                                 # x: this rank's (rows, k)
    raise NotImplementedError("your code here")


def check_exercise(gram_fn):
    def both(x):
        gathered = lax.all_gather(x, AXIS, tiled=True)
        return gram_fn(x)[None], (gathered.T @ gathered)[None]
    try:
        got, want = by_rows(both)(x)
    except NotImplementedError:
        print("not done yet: fill in my_gram")
        return
    np.testing.assert_array_equal(got, want)
    print("correct: every rank has the Gram matrix of all", x.shape[0], "rows")


check_exercise(my_gram)
