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
# - collective matmul: `all_gather(x) @ w` with `w` sharded by columns (Megatron's first
#   matmul), written by hand as a ring of `ppermute`s with one block multiplied per step (the
#   loop of JAX's shard_map docs), then with `jaxcoll.allgather_matmul`;
# - why it sends exactly the bytes the all-gather sends, yet can hide them, and the condition
#   for hiding: compute per step c >= transfer time per step t;
# - the reduce-scatter side (`matmul_reduce_scatter`: the partial sum travels), the
#   bidirectional ring (where it halves t and where it does not), and gradients (each one's
#   transpose is the other);
# - ring attention in a few lines on `jaxcoll.allgather_fold`;
# - what fake CPU devices can and cannot show about all this, and the GPU flags that matter;
# - the ring as one Pallas kernel of remote DMAs (jaxcoll's second executor), race-checked.
#
# **Prerequisites**: notebooks 01 and 02 (the ring, AllGather and ReduceScatter).
#
# The lecture (see notebook 01) says that splitting AllReduce into ReduceScatter + AllGather
# "halves the communication" and that "中间可以跟计算重叠" ("what happens in between can
# overlap with computation"). Notebook 02 showed the bytes don't halve; this notebook shows the
# overlap, and when it hides a transfer.
#
# **Notation**: n = ranks (8); rank r holds rows r of x, `(rows, k)`, and columns r of w,
# `(k, p)`: the whole x is `(n·rows, k)`, the whole w `(k, n·p)`.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
os.environ["JAXCOLL_CALIBRATE"] = "0"        # auto: the shipped calibrations, everywhere
import jax
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

import re

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

import jaxcoll
import lesson                                 # tutorials/lesson.py: the plumbing the notebooks share
from jaxcoll.analysis import systems, topology
from lesson import AXIS, by_rows, n, small_integers   # by_rows: every argument split by rows

ROWS, COLUMNS = P(AXIS), P(None, AXIS)       # split by rows / by columns over the ranks


def sharded(in_specs, out_specs):
    """Decorator: jit(shard_map(fn)) on lesson's mesh of 8, cut as the specs say."""
    return lambda fn: jax.jit(jax.shard_map(fn, mesh=lesson.mesh, in_specs=in_specs,
                                            out_specs=out_specs))

# %% [markdown]
# ## 1. Collective matmul by hand
#
# Tensor parallelism (Megatron, with sequence parallelism: notebook 09) keeps the activations
# sharded by rows (tokens) between layers, and the MLP's first weight sharded by columns:
# `X[B_X, D] · W[D, F_X] -> H[B, F_X]` in notebook 09's notation. Rank r needs *all* rows of x
# times *its* columns of w: `lax.all_gather(x, tiled=True) @ w`. Written that way, every rank
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


first_matmul = sharded((ROWS, COLUMNS), COLUMNS)  # X[B_X, D] · W[D, F_X] -> H[B, F_X]
rows, k, p = 4, 6, 5
x = small_integers(n * rows, k)                # rank r holds rows r*rows .. (r+1)*rows - 1
w = small_integers(k, n * p, seed=1)           # rank r holds columns r*p .. (r+1)*p - 1
want = x @ w                                   # one device, the whole product
assert np.array_equal(first_matmul(reference)(x, w), want)
assert np.array_equal(first_matmul(allgather_matmul_by_hand)(x, w), want)
print(f"by hand == all_gather @ w == x @ w; each rank's result: all {n * rows} rows, its {p} "
      f"columns, out of {want.shape}")

# %% [markdown]
# In step `s` the dot reads `block` and the `ppermute` reads the same `block`: neither waits for
# the other, so a compiler may run them at the same time. That is the whole trick.
#
# ## 2. The same with jaxcoll
#
# `jaxcoll.allgather_matmul` is that loop, built from the registry's ring schedule (which rank
# sends which block in which round) rather than written out again. `matmul_reduce_scatter` is
# the mirror image, the MLP's second matmul: `H[B, F_X] · W2[F_X, D] -> Y[B_X, D]`. Each rank
# holds its columns of h (all rows) and its rows of w2, and rank i needs rows i of the sum over
# ranks of `h @ w2`:

# %%
ours = first_matmul(lambda x, w: jaxcoll.allgather_matmul(x, w, AXIS))
assert np.array_equal(ours(x, w), want)

second_matmul = sharded((COLUMNS, ROWS), ROWS)  # H[B, F_X] · W2[F_X, D] -> Y[B_X, D]
h = small_integers(n * rows, n * k, seed=2)    # rank r holds columns r*k .. (r+1)*k - 1
w2 = small_integers(n * k, p, seed=3)          # rank r holds rows r*k .. (r+1)*k - 1
ours_rs = second_matmul(lambda h, w2: jaxcoll.matmul_reduce_scatter(h, w2, AXIS))
ref_rs = second_matmul(lambda h, w2: lax.psum_scatter(h @ w2, AXIS, scatter_dimension=0,
                                                      tiled=True))
assert np.array_equal(ours_rs(h, w2), h @ w2) and np.array_equal(ref_rs(h, w2), h @ w2)
print("allgather_matmul == x @ w; matmul_reduce_scatter == psum_scatter(h @ w2) == h @ w2")

# %% [markdown]
# In `matmul_reduce_scatter` the ring passes a partial sum round: each rank adds its own
# rows-block product to what arrives and sends it on, computing that block only in the round
# that sends it. It starts as a contribution, travels n-1 hops, and arrives complete at its
# owner.
#
# ## 3. The same bytes, hidden
#
# What moves? The all-gather sends each rank's block to n-1 others; the ring sends one block a
# step for n-1 steps. Count it in the compiled programs, and the temporary memory XLA gives
# each rank:

# %%
big_rows, big_k, big_p = 256, 512, 512         # per rank: x (256, 512), w (512, 512)
xb, wb = jnp.ones((n * big_rows, big_k)), jnp.ones((big_k, n * big_p))
programs = {"all_gather @ w": first_matmul(reference),
            "by hand": first_matmul(allgather_matmul_by_hand),
            "jaxcoll ring": first_matmul(lambda x, w: jaxcoll.allgather_matmul(x, w, AXIS))}
block = big_rows * big_k * 4                                   # bytes of one rank's x
ops, sizes, temp = ({name: f(fn, xb, wb) for name, fn in programs.items()}
                    for f in (lesson.collectives_in, lesson.permute_sizes, lesson.temp_bytes))
for name in programs:
    print(f"{name:16} {dict(ops[name])}, permutes of {sorted(set(sizes[name]))} bytes; "
          f"XLA temp per rank: {temp[name] / 2**20:.2f} MiB")
print(f"one block: {block / 2**20:.2f} MiB; the gathered x: {n * block / 2**20:.2f} MiB")
assert ops["all_gather @ w"] == {"all-gather": 1} and block == 512 << 10
assert sizes["by hand"] == [block] * (n - 1) and set(sizes["jaxcoll ring"]) == {block}
assert temp["all_gather @ w"] >= n * block > 2 * temp["jaxcoll ring"]   # no gathered x

# %% [markdown]
# All three send (n-1) blocks of 512 KiB per rank: the by-hand loop in n-1 `collective-permute`s
# of one block, jaxcoll's in one before a `while` loop and one in its body (run n-2 times), the
# reference in one all-gather. What differs is memory, and only *temporary* memory: the
# reference builds the whole gathered x (4 MiB, 8 blocks) and frees it after the matmul; the
# ring holds about three blocks (the block being multiplied, the one arriving, one product),
# whatever n is. (Each rank's result, all rows times its 512 columns, is 4 MiB either way.)
# jaxcoll runs the ring as a `fori_loop`, so no more than one step's blocks are ever live; the
# unrolled by-hand loop leaves that to XLA's scheduler.
#
# **Does it save time?** Per step, a rank must multiply a block (time c) and pass one on (time
# t). Unfused, the n-1 transfers come first and the n products after: (n-1)·t + n·c. Fused,
# each of the n-1 steps costs max(c, t) if the two really run at once, and then the last
# product: (n-1)·max(c, t) + c.
#
# **The condition for hiding a transfer: c >= t**, the compute of one step at least as long as
# the transfer of one step. Then the fused ring takes n·c, the matmul alone, and the
# communication has vanished. If c < t it takes (n-1)·t + c: transfer-bound, and only the
# products are hidden.

# %%
def ring_times(c, t, steps=n - 1):
    """(unfused, fused) time of an allgather-matmul ring of `steps` transfers of time t and
    steps + 1 products of time c."""
    return steps * t + (steps + 1) * c, steps * max(c, t) + c


for c, t in [(1.0, 1.0), (2.0, 1.0), (1.0, 2.0)]:
    unfused, fused = ring_times(c, t)
    hidden = fused == n * c                   # as long as the products alone
    assert hidden == (c >= t)
    print(f"c = {c:g}, t = {t:g}: unfused {unfused:4g}, fused {fused:4g} "
          f"({'transfers hidden' if hidden else 'transfer-bound'})")
assert ring_times(1.0, 1.0) == (15.0, 8.0)
lesson.overlap_timeline(n - 1, c=1.0, t=1.0)
plt.show()

# %% [markdown]
# At c = t, 15 units against 8: at best the transfers vanish behind the products.
#
# **What c >= t asks of a real matmul.** A step multiplies a `(rows, k)` block by the rank's
# `(k, p)` columns: c = 2·rows·k·p / F on a chip of F FLOP/s, and sends the block: t =
# rows·k·s / bandwidth for s bytes a value (plus α, negligible for big blocks). Both grow with
# rows·k, so only p decides: c >= t when **p >= F·s / (2·bandwidth)**, a critical width for the
# columns each rank multiplies by. With dense bfloat16 peak FLOP/s (NVIDIA's datasheets) and
# `jaxcoll.analysis.systems`' NVLink bandwidth each way:

# %%
PEAK_BF16 = {"a100": 312e12, "h100": 989e12}   # dense bfloat16 FLOP/s, SXM datasheets
for gpu, flops in PEAK_BF16.items():
    bandwidth = systems.GPUS[gpu][0] * 1e9     # NVLink bytes/s per GPU, each way
    p_critical = flops * 2 / (2 * bandwidth)   # bfloat16: s = 2 bytes a value
    block_rows, block_k = 4096, 8192           # any block: both sides scale with rows·k
    c = 2 * block_rows * block_k * p_critical / flops
    t = block_rows * block_k * 2 / bandwidth
    assert np.isclose(c, t)
    print(f"{gpu}: c >= t when each rank multiplies by p >= {p_critical:,.0f} columns "
          f"(at that width, a 4096 x 8192 block: c = t = {t * 1e6:.0f} µs); an MLP of width "
          f"4D on 8 ranks (p = D/2) from D = {2 * p_critical:,.0f}")

# %% [markdown]
# A Megatron MLP with hidden width F = 4D over n = 8 ranks gives each rank p = D/2 columns, so
# at peak FLOP/s an H100 hides the transfers only from a model width D of about 5,300 (printed
# above); a matmul below peak takes longer, so c grows and the width needed falls. Notebook
# 11 takes this condition to every parallelism pattern.
#
# ## 4. Both directions
#
# A ring uses each link in one direction. `algorithm="bidirectional_ring"` cuts each block in
# two halves and sends one half each way round: every round moves two half-blocks and
# multiplies both. (JAX's shard_map docs build the same, "bidirectional collective matmul", for
# TPU rings.) Whether that halves t depends on the links:
#
# - on a **ring of full-duplex links** (TPU ICI, NVLink bridges in a ring) the two halves go out
#   on different links, so a round takes α + βB/2 instead of α + βB (B: a block's bytes): the
#   β part halves, α does not;
# - behind a **switch** (NVSwitch in every DGX) a rank has one port; the one-way ring already
#   sends on its up link while receiving on its down link, and both halves share the up link:
#   no gain.
#
# jaxcoll's simulator, per round of the allgather under the matmul, with 1 MiB blocks:

# %%
B = 1 << 20
links = {"ring of links, α = 0": topology.ring(n, alpha=0.0, beta=1e-9),
         "ring of links, α = 10 µs": topology.ring(n, alpha=1e-5, beta=1e-9),
         "switch, α = 0": topology.switch(n, alpha=0.0, beta=1e-9)}
step_time = {}                              # (links, algorithm): seconds of every round
for name, topo in links.items():
    for algorithm in ("ring", "bidirectional_ring"):
        rounds = jaxcoll.simulate(jaxcoll.schedule("allgather", algorithm, n), n * B, topo)
        assert np.allclose(rounds.round_seconds, rounds.round_seconds[0])  # all rounds alike
        step_time[name, algorithm] = rounds.round_seconds[0]
    ratio = step_time[name, "bidirectional_ring"] / step_time[name, "ring"]
    print(f"{name:25} t: ring {step_time[name, 'ring'] * 1e6:7.1f} µs, bidirectional "
          f"{step_time[name, 'bidirectional_ring'] * 1e6:7.1f} µs (x{ratio:.3f})")
assert np.isclose(step_time["ring of links, α = 0", "bidirectional_ring"],
                  step_time["ring of links, α = 0", "ring"] / 2)
assert np.isclose(step_time["ring of links, α = 10 µs", "bidirectional_ring"], 1e-5 + B * 1e-9 / 2)
assert np.isclose(step_time["switch, α = 0", "bidirectional_ring"],
                  step_time["switch, α = 0", "ring"])

# %% [markdown]
# t/2 exactly on a ring of links without α; α + βB/2 with it; nothing behind a switch. Halving t
# halves the critical width p of section 3 on a ring of links. jaxcoll's version computes the
# same as the others, and its compiled transfers are half-blocks:

# %%
for algorithm in ("bidirectional_ring", "xla"):
    fn = first_matmul(lambda x, w, a=algorithm: jaxcoll.allgather_matmul(x, w, AXIS, algorithm=a))
    assert np.array_equal(fn(x, w), want)
    fn_rs = second_matmul(lambda h, w2, a=algorithm: jaxcoll.matmul_reduce_scatter(
        h, w2, AXIS, algorithm=a))
    assert np.array_equal(fn_rs(h, w2), h @ w2)
print("bidirectional_ring and xla agree with the references")
halves = lesson.permute_sizes(first_matmul(lambda x, w: jaxcoll.allgather_matmul(
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
# shows it, and the gradients equal those of the unsharded `sum(sin(x @ w))`:

# %%
def loss(x, w):
    return jnp.sum(jnp.sin(jaxcoll.allgather_matmul(x, w, AXIS)))


def loss_ref(x, w):
    return jnp.sum(jnp.sin(reference(x, w)))


def gradient(loss):
    """dx (split by rows, as x) and dw (split by columns, as w) of a sharded loss."""
    return sharded((ROWS, COLUMNS), (ROWS, COLUMNS))(jax.grad(loss, argnums=(0, 1)))


grads, grads_ref = gradient(loss), gradient(loss_ref)
unsharded = jax.grad(lambda x, w: jnp.sum(jnp.sin(x @ w)), argnums=(0, 1))(x, w)
for ours_g, ref_g, whole in zip(grads(x, w), grads_ref(x, w), unsharded):
    np.testing.assert_allclose(ours_g, whole, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ref_g, whole, rtol=1e-5, atol=1e-5)
jaxpr = str(jax.make_jaxpr(grads)(x, w))
found = sorted(set(re.findall(r"jaxcoll_\w+|all_gather|psum_scatter|ppermute", jaxpr)))
assert "jaxcoll_matmul_reduce_scatter" in found and "all_gather" not in found
print("collectives in the gradient's jaxpr:", found)
grad_temp = {name: lesson.temp_bytes(g, xb, wb) / block
             for name, g in (("all_gather @ w", grads_ref), ("jaxcoll ring", grads))}
print("XLA temp per rank of the gradient, in blocks:",
      {name: round(blocks) for name, blocks in grad_temp.items()})

# %% [markdown]
# The forward `jaxcoll_allgather_matmul`, its transpose `jaxcoll_matmul_reduce_scatter` for
# dx, and `jaxcoll_gathered_outer` for dw (the fold over x's blocks passed round again); no
# `all_gather`. Not gathering x need not make the gradient smaller, though: on jax 0.10 and
# 0.12 XLA gave the ring's gradient *more* temporary memory than the reference's (printed
# above, at section 3's sizes; we have not traced why: XLA's buffer assignment decides). The
# memory argument for the ring is the forward's, and it is about temporaries.
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
xm, wm = jnp.ones((n * 256, 1024)), jnp.ones((1024, 64))       # wm: a rank's 64 columns
# (a constant, so every rank gets the same numbers: the work of a column-sharded w)
timed = {"all_gather @ w": by_rows(lambda x: reference(x, wm)),
         "jaxcoll ring": by_rows(lambda x: jaxcoll.allgather_matmul(x, wm, AXIS))}
for name, seconds in lesson.median_seconds(timed, xm, iters=5).items():
    print(f"{name:16} {seconds * 1e3:7.2f} ms")
body = lesson.compiled_text(timed["jaxcoll ring"], xm)
assert "collective-permute-start" not in body and "collective-permute(" in body
print("async collective-permute (start/done) on this backend:", "collective-permute-start" in body)

# %% [markdown]
# These timings measure dots and memory copies on this machine's shared cores: they cannot
# show overlap, nor which version is faster on GPUs, and their order can change between runs.
# What is fixed is the compiled program: on XLA's CPU backend a `collective-permute` is
# synchronous (no start/done pair, asserted above), so each loop step runs its dot, then its
# transfer, and nothing overlaps here.
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
# ## 8. The same ring as one Pallas kernel
#
# Everything so far runs as XLA `collective-permute`s: one op per ring step, scheduled by the
# compiler. JAX's other way to write a collective, the one its Pallas docs teach for TPUs
# ("Distributed Computing in Pallas for TPUs"), is one kernel that issues the transfers
# itself: remote DMAs from this device's memory into another device's, and semaphores to know
# when they landed. The docs' first example, a ppermute to the right neighbour:

# %%
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

CHECKED = pltpu.InterpretParams(detect_races=True, dma_execution_mode="eager")


def right_permute_kernel(x_ref, out_ref, send_sem, recv_sem):
    right = lax.rem(lax.axis_index(AXIS) + 1, n)
    copy = pltpu.make_async_remote_copy(x_ref, out_ref, send_sem, recv_sem,
                                        device_id={AXIS: right})  # its place on the mesh
    copy.start()      # the DMA: my x_ref into my right neighbour's out_ref
    copy.wait_send()  # my x_ref has been read
    copy.wait_recv()  # my out_ref has been written (by my left neighbour)


def right_permute(x):
    return pl.pallas_call(
        right_permute_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        interpret=CHECKED)(x)


xs = small_integers(n * 2, 3)
by_hand = jax.jit(jax.shard_map(right_permute, mesh=lesson.mesh, in_specs=ROWS,
                                out_specs=ROWS, check_vma=False))(xs)
right = [(r, (r + 1) % n) for r in range(n)]
assert np.array_equal(by_hand, by_rows(lambda b: lax.ppermute(b, AXIS, right))(xs))
print("the hand-written kernel == lax.ppermute to the right")

# %% [markdown]
# Off TPU, `interpret=` runs the kernel in Pallas's **TPU interpret mode**: each device's kernel
# is interpreted on the CPU, with its memories, DMAs and semaphores simulated, and, with
# `detect_races=True` and eager DMAs, a race detector that orders every read and write by the
# semaphores that should order them.
#
# jaxcoll's second executor writes any schedule this way: `executor="pallas"` lowers the
# schedule's validated plan, the one the `collective-permute`s come from, to one kernel. Each
# rank's program (its chunk ids per round, its partner in each matching) sits in SMEM; a
# `fori_loop` runs the rounds. Per round: the receiver signals its sender that its landing
# slots are free (a semaphore named after the receiver: another receiver's signal, one running
# rounds ahead, must not count); the sender waits for that, DMAs its chunks, waits for its
# DMAs to be read; the receiver waits for them to land and reduces them into its buffer:

# %%
checked = jaxcoll.Pallas(interpret=CHECKED)
xr = jax.random.normal(jax.random.key(0), (n * 3, 40))
kernel = by_rows(lambda b: jaxcoll.allreduce(b, AXIS, algorithm="ring", executor=checked))
permutes = by_rows(lambda b: jaxcoll.allreduce(b, AXIS, algorithm="ring"))
assert np.array_equal(kernel(xr), permutes(xr))   # bit for bit: the same plan, the same order
body = lesson.compiled_text(kernel, xr)
print("collective-permutes in the kernel's program:", body.count("collective-permute("),
      "(the interpreter's callbacks move the data)")

# %% [markdown]
# The race detector earns its place: the first version of this handshake had one `ready`
# semaphore per matching, a count anyone could add to, and the tree allreduce at n = 8 came
# out wrong with a race reported; a fast receiver's signal for a later round had let a sender
# overwrite a slot still being read. Drop any one wait on purpose (`Unsynchronized`, a knob
# kept out of `jaxcoll.Pallas`) and it is caught:

# %%
from jaxcoll.lowering.pallas_kernel import Unsynchronized

broken = Unsynchronized(interpret=CHECKED, drop=("receive_wait",))
ring_broken = by_rows(lambda b: jaxcoll.allreduce(b, AXIS, algorithm="ring", executor=broken))
report = lesson.race_report(lambda: ring_broken(xr))   # what the detector printed or raised
pltpu.reset_tpu_interpret_mode_state()
assert report
print("receive wait dropped ->", report.splitlines()[0], "\n ", report.splitlines()[1].split(
    " from ")[0], "(a landing slot: its DMA and this access unordered)")

# %% [markdown]
# **What interpret mode shows, and what it cannot.** It checks the *logic*: that the
# handshake orders every DMA against every read and write, for every schedule, and that the
# kernel computes what the XLA executor computes (tests/test_pallas.py: every registered
# schedule, bit for bit). It says nothing about speed: each call here takes seconds of Python
# simulating DMAs (one machine's time: bench/RESULTS.md, "Numbers that were in code comments").
#
# **What a TPU gains, on paper.** No per-round XLA op: one kernel launch, the rounds a loop in
# the kernel, so α per round is a DMA issue and a semaphore wait, not an op boundary. Room for
# double buffering (two landing slots per matching: round s+1's DMA lands while round s's
# reduce runs, the `ready` wait moving back one round) and for fusing compute into the loop, as
# sections 1-3 do with `ppermute`s. Before round 0 every rank signals every other's barrier
# semaphore and waits for all of them, as the docs do: no DMA may reach a device whose kernel
# has not started.
#
# **What a GPU lowering would need.** Mosaic GPU (jax 0.12) has peer memory
# (`plgpu.remote_ref`, over NVSHMEM), multicast and cross-device semaphores, but no DMA
# semaphores: a send is a store into a peer's memory, completion a fence plus a signal, so the
# `sent`/`received` waits above become a fence and a flag the receiver polls. Its interpret
# mode cannot run peer memory on CPU, so such a lowering could not be tested on this machine,
# and jaxcoll does not write one.
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
