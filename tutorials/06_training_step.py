# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 06 · A data-parallel training step with jaxcoll
#
# The seed lecture opens with what the whole topic is for:
#
# > 数据并行里，反向传播后各卡梯度不同，必须做 AllReduce 才能同步更新参数。
# >
# > *"In data parallelism, after the backward pass every card has different gradients; you
# > must do an AllReduce to keep the parameter updates in sync."*
#
# This notebook does exactly that: it trains a small network on 8 devices, averages the
# gradients with a ring allreduce we can read, and checks it against JAX's built-in.
#
# **You will learn**
#
# - what data parallelism is: every device holds the whole model and 1/8 of each batch;
# - how to write the training step with `jax.jit` and `jax.shard_map`, and where the
#   allreduce goes (`jaxcoll.ring_allreduce(grads, axis="dp", op="mean")` instead of
#   `lax.pmean`);
# - why the step passes `check_vma=False`, and what `check_vma=True` would change;
# - why the jaxcoll and `lax.pmean` runs agree to float32 rounding, but not bit for bit;
# - how a *pytree* of gradients goes into **buckets**, one collective per bucket, and how to count
#   the collectives a step compiles to.
#
# **Prerequisites**: Python and numpy. JAX, `shard_map` and [optax](https://optax.readthedocs.io)
# are explained as they come up. Notebook 01 builds the ring allreduce used here; notebook 05
# explains the α-β cost model used in section 5.
#
# **Notation.** The seed writes N for the number of ranks (here: devices); here **n = number
# of ranks** and **N = bytes per rank**. Sizes are binary (KiB, MiB).

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
import jax
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

import re
import time
from functools import partial

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jaxcoll

mesh = Mesh(np.array(jax.devices()), ("dp",))  # one mesh axis, "dp" (data parallel), 8 devices
n_devices = mesh.size
print(mesh)

# %% [markdown]
# ## 1. A task and a model
#
# A synthetic classification task: 16 random features, and the label is which of 4 hidden
# "teacher" directions the input points along most (`y = argmax(x @ teacher)`). The model is a
# small MLP, 16 → 64 → 64 → 4, written as a plain list of `{"w", "b"}` dicts: a **pytree**,
# JAX's word for any nesting of lists, tuples and dicts with arrays at the leaves.
# `jax.grad` returns the gradients as a pytree of the same shape.

# %%
SIZES = (16, 64, 64, 4)  # input, hidden, hidden, classes
GLOBAL_BATCH = 256       # 32 rows per device
STEPS = 40


def init_params(key):
    """A list of layers {"w": (fan_in, fan_out), "b": (fan_out,)}."""
    keys = jax.random.split(key, len(SIZES) - 1)
    return [{"w": jax.random.normal(k, (fan_in, fan_out)) / jnp.sqrt(fan_in),
             "b": jnp.zeros(fan_out)}
            for k, fan_in, fan_out in zip(keys, SIZES[:-1], SIZES[1:])]


def loss_fn(params, x, y):
    """Mean softmax cross-entropy of the MLP on x: (batch, 16), y: (batch,) integer labels."""
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    logits = x @ params[-1]["w"] + params[-1]["b"]  # (batch, 4)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def batches(steps, seed=0):
    """`steps` batches (x, y) of the teacher task, as numpy arrays."""
    rng = np.random.default_rng(seed)
    teacher = rng.normal(size=(SIZES[0], SIZES[-1]))
    for _ in range(steps):
        x = rng.normal(size=(GLOBAL_BATCH, SIZES[0])).astype(np.float32)  # (256, 16)
        yield x, np.argmax(x @ teacher, axis=1).astype(np.int32)          # (256,)


params0 = init_params(jax.random.key(0))
leaves = jax.tree.leaves(params0)
print(f"{len(leaves)} parameter arrays, {sum(leaf.size for leaf in leaves)} parameters:")
for path, leaf in jax.tree_util.tree_leaves_with_path(params0):
    print(f"  {jax.tree_util.keystr(path):<12} {str(leaf.shape):<10} {leaf.nbytes:>6} bytes")

# %% [markdown]
# ## 2. The training step
#
# `jax.shard_map` runs one function on every device of the mesh at once, each on its own
# piece of the data. The mesh has one axis, of 8 devices, called "dp" for *data parallel*:
# that is just a name (the other notebooks call theirs "i"), by which `in_specs` and the
# collectives refer to it. `in_specs` says how each argument is cut:
#
# - `P()`: **replicated**: every device gets the whole thing (the parameters and the optimizer
#   state: each device holds a full copy of the model);
# - `P("dp")`: **split along the first dimension over "dp"**: device i gets rows 32i..32i+31 of
#   the 256-row batch.
#
# Inside, each device computes the loss and gradients *of its own 32 rows*. Those gradients
# differ from device to device (the seed's 各卡梯度不同). Averaging them over "dp" gives every
# device the gradient of the loss on all 256 rows (the mean of 8 means of 32 rows each), so
# every device then applies the *same* [optax](https://optax.readthedocs.io) Adam update and
# the 8 copies of the parameters stay identical. That average is the allreduce, and it is the
# only line that differs between our two steps:

# %%
optimizer = optax.adam(1e-2)


def make_step(average, check_vma=False):
    """The jitted data-parallel step; `average(tree)` averages a pytree over "dp"."""
    @jax.jit
    @partial(jax.shard_map, mesh=mesh,
             in_specs=(P(), P(), P("dp"), P("dp")),  # params, opt_state, x, y
             out_specs=(P(), P(), P()),              # new params, new opt_state, loss
             check_vma=check_vma)
    def step(params, opt_state, x, y):                # here x: (32, 16), y: (32,) per device
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads, loss = average((grads, loss))         # the allreduce: one call for the whole tree
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return step


def ring_mean(tree):
    return jaxcoll.ring_allreduce(tree, axis="dp", op="mean")


def xla_mean(tree):
    return lax.pmean(tree, "dp")


ring_step = make_step(ring_mean)
pmean_step = make_step(xla_mean)

# %% [markdown]
# ## 3. `check_vma`: why the step passes `check_vma=False`
#
# `shard_map` tracks, for every value, whether it may differ between devices ("varying") or is
# known to be the same on all of them ("invariant"); `check_vma` is that check ("vma": varying
# manual axes), on by default. `out_specs=P()` promises "invariant". jaxcoll's collectives are
# JAX primitives typed like the built-ins: an allreduce is invariant, as `lax.pmean`'s result
# is, although inside it is a ring of `ppermute`s. So the step traces with the check on too:

# %%
sharded = NamedSharding(mesh, P("dp"))
x0, y0 = next(batches(1))
x0, y0 = jax.device_put(x0, sharded), jax.device_put(y0, sharded)
opt_state0 = optimizer.init(params0)

make_step(ring_mean, check_vma=True).lower(params0, opt_state0, x0, y0)  # out_specs=P() accepted
seen = []                                        # the types inside one shard_map over "dp":


def record_types(g):
    seen.append((jax.typeof(ring_mean(g)), jax.typeof(xla_mean(g)), jax.typeof(g)))
    return g


jax.eval_shape(jax.shard_map(record_types, mesh=mesh, in_specs=P("dp"), out_specs=P("dp")),
               jnp.zeros((8, 3)))
ring_type, pmean_type, input_type = map(str, seen[0])
assert ring_type == pmean_type != input_type
print(f"input typed {input_type}; ring mean typed {ring_type}, lax.pmean typed {pmean_type}")

# %% [markdown]
# **`check_vma` also changes what `jax.grad` returns.** With the check on, JAX knows the
# parameters are invariant (`P()`), and the gradient of an invariant input used by every device
# is the *sum* of all devices' contributions: JAX's autodiff inserts that sum, a `psum` in the
# backward pass, by itself (JAX design note
# [17111](https://docs.jax.dev/en/latest/jep/17111-shmap-transpose.html)). With the check off,
# `jax.grad` returns each device's own gradient, and summing is our job. A tiny example,
# `loss(w) = sum(w * x)` with device i holding row i of x, so device i's own gradient is row i:

# %%
w_demo = jnp.ones(3)
x_demo = jnp.arange(8 * 3, dtype=jnp.float32).reshape(8, 3)  # (8 devices, 3): row i on device i


def demo_grads(check_vma, average=lambda g: g, cast=False):
    """Every device's jax.grad of sum(w * x) w.r.t. the replicated w, after `average`: (8, 3).
    cast=True: lax.pcast w to "varying" first (the README's route with the check on)."""
    @jax.jit
    @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P("dp")), out_specs=P("dp"),
             check_vma=check_vma)
    def grads(w, x):                             # x: (1, 3) on each device
        if cast:
            w = lax.pcast(w, "dp", to="varying")
        g = jax.grad(lambda w: jnp.sum(w * x[0]))(w)
        return average(g)[None]                  # (1, 3) per device -> (8, 3)
    return grads


rows = np.asarray(x_demo)
summed, mean = np.tile(rows.sum(0), (8, 1)), np.tile(rows.mean(0), (8, 1))
for check_vma, average, name, cast, expected in [
        (False, lambda g: g, "nothing", False, rows),     # each device: its own row
        (True, lambda g: g, "nothing", False, summed),    # already the sum!
        (False, ring_mean, "ring mean", False, mean),
        (True, xla_mean, "lax.pmean", False, summed),     # the sum, not the mean
        (True, ring_mean, "ring mean", False, summed),    # the same with jaxcoll: 8 x the mean
        (True, ring_mean, "ring mean", True, mean)]:      # pcast first: the mean, check on
    program = demo_grads(check_vma, average, cast)
    got = np.asarray(program(w_demo, x_demo))
    np.testing.assert_array_equal(got, expected)
    hlo = program.lower(w_demo, x_demo).compile().as_text()
    print(f"check_vma={check_vma!s:<5} {'params pcast to varying, ' if cast else ''}average: {name:<9} device 0 gets "
          f"{got[0]}, device 1 {got[1]};  all-reduces in the program: "
          f"{len(re.findall(r'all-reduce(?:-start)?[(]', hlo))}")
print(f"(row 0 = {rows[0]}, the mean of the rows = {rows.mean(0)}, their sum = {rows.sum(0)})")

# %% [markdown]
# So with `check_vma=True` the data-parallel gradient is already summed, by an XLA all-reduce
# that JAX put in the backward pass, and every device holds the same sum. An allreduce-mean
# after it, `lax.pmean` or jaxcoll's `op="mean"` alike, averages 8 identical sums and returns
# the sum: 8 times the mean gradient (the rows with `lax.pmean` and `ring mean` under
# `check_vma=True`). With `check_vma=False`, `jax.grad` gives each device its own gradient,
# the explicit allreduce does the averaging (the ring, with nothing but `ppermute`s), and the
# program contains no all-reduce at all. That is what our training step does.
#
# The [README](../README.md#sharp-bit-check_vma-typed-like-lax) gives a second route
# that keeps the check on (the last row): `params = lax.pcast(params, "dp", to="varying")`
# before `jax.grad` tells JAX to treat the parameters as possibly different per device, so
# `jax.grad` returns each device's own gradient and inserts no sum. The check-on path without
# the cast is legitimate JAX too: take the summed gradient,
# divide by n, and XLA's all-reduce has done the work. It just isn't the collective this
# notebook is about.
#
# **Is the `P()` promise kept?** With `out_specs=P("dp")` on a new leading axis we can return
# every device's copy of the averaged gradients of the real model and compare them:

# %%
def averaged_per_device(average):
    """Each device's copy of the averaged gradients, stacked: leaves get a leading axis of 8."""
    @jax.jit
    @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P("dp"), P("dp")), out_specs=P("dp"),
             check_vma=False)  # as in the training step: per-device gradients, averaged by us
    def grads_everywhere(params, x, y):
        grads = jax.grad(loss_fn)(params, x, y)
        return jax.tree.map(lambda g: g[None], average(grads))  # (1, ...) per device -> (8, ...)
    return grads_everywhere


ring_copies = averaged_per_device(ring_mean)(params0, x0, y0)
pmean_copies = averaged_per_device(xla_mean)(params0, x0, y0)
for copies in (ring_copies, pmean_copies):
    for leaf in jax.tree.leaves(copies):
        leaf = np.asarray(leaf)  # (8, ...): one row per device
        assert (leaf == leaf[0]).all(), "devices disagree"
print("ring_allreduce: all 8 devices hold bit-identical averaged gradients (so do lax.pmean's)")

ring_g = np.concatenate([np.asarray(g)[0].ravel() for g in jax.tree.leaves(ring_copies)])
pmean_g = np.concatenate([np.asarray(g)[0].ravel() for g in jax.tree.leaves(pmean_copies)])
differ = int(np.sum(ring_g != pmean_g))
scale = np.abs(pmean_g).max()
print(f"ring vs lax.pmean: {differ} of {ring_g.size} gradient values differ; the largest "
      f"difference is {np.abs(ring_g - pmean_g).max() / scale:.2g} of the largest gradient "
      f"(float32's relative precision: {np.finfo(np.float32).eps:.2g})")
assert differ > 0  # different summation orders (below)
np.testing.assert_allclose(ring_g, pmean_g, rtol=0, atol=1e-6 * scale)

# %% [markdown]
# Every device holds the same bits, because the ring reduces each chunk exactly once, on one
# device, and then only *copies* the finished chunk around. That is what makes `check_vma=False`
# safe for jaxcoll's results.
#
# **Why not the same bits as `lax.pmean`?** Floating-point addition is not associative: each
# addition rounds, so the order of a sum changes its last bits.

# %%
v = np.random.default_rng(2).normal(size=8).astype(np.float32)  # one value from each of 8 devices
from_device_0 = ((((((v[0] + v[1]) + v[2]) + v[3]) + v[4]) + v[5]) + v[6]) + v[7]
from_device_3 = ((((((v[3] + v[4]) + v[5]) + v[6]) + v[7]) + v[0]) + v[1]) + v[2]  # ring order, other start
pairwise = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))     # a tree's order
print(f"the same 8 float32 values summed three ways: {from_device_0!r}, {from_device_3!r}, {pairwise!r}")
assert len({from_device_0, from_device_3, pairwise}) == 3

# %% [markdown]
# The ring adds the 8 devices' contributions in ring order, starting from a different device
# for each chunk (chunk k is started by one device and travels round the ring); XLA's CPU
# all-reduce adds them in an order of its own. So any value may differ in its last bit or two,
# about 1e-7 relative for float32, and Adam then carries those differences into the next
# steps. With integer-valued inputs every order gives the same bits (the other notebooks use
# that to check exactness); real gradients are not integers.
#
# ## 4. Training both, step for step
#
# Both steps start from the same parameters and see the same batches. Each step holds a single
# collective (the whole gradient tree is one bucket, section 5), so the CPU-only jaxlib 0.10
# bug with independent collectives in one program (the README's
# [sharp bit](../README.md#sharp-bit-jaxlib-010-on-cpu-runs-independent-collectives-into-each-other))
# cannot bite inside a step. Between steps we wait for each one (`float(loss)`) before sending
# the next. That is a workaround for the same CPU runtime, not style: with several steps in
# flight at once, jaxlib 0.10 on CPU occasionally hung a collective's rendezvous (the README's
# [training notes](../README.md#training-buckets-mixed-precision-gradients-zero);
# `examples/data_parallel.py` waits the same way).

# %%
def train(step):
    """Losses and final params of STEPS steps of `step` from params0."""
    params, opt_state, losses = params0, optimizer.init(params0), []
    began = time.perf_counter()
    for x, y in batches(STEPS):
        params, opt_state, loss = step(params, opt_state, jax.device_put(x, sharded),
                                       jax.device_put(y, sharded))
        losses.append(float(loss))  # waits for this step before the next is dispatched
    return np.array(losses), params, time.perf_counter() - began


ring_losses, ring_params, ring_seconds = train(ring_step)    # the first step compiles
pmean_losses, pmean_params, pmean_seconds = train(pmean_step)

relative = np.abs(ring_losses - pmean_losses) / np.abs(pmean_losses)
np.testing.assert_allclose(ring_losses, pmean_losses, rtol=1e-5)  # step for step
assert pmean_losses[-1] < 0.5 * pmean_losses[0]  # and it does learn
print(f"{STEPS} steps: loss {pmean_losses[0]:.4f} -> {pmean_losses[-1]:.4f} (lax.pmean), "
      f"{ring_losses[0]:.4f} -> {ring_losses[-1]:.4f} (ring)")
print(f"losses equal bit for bit at {int(np.sum(ring_losses == pmean_losses))} of {STEPS} steps; "
      f"largest relative difference {relative.max():.2g} (tolerance 1e-5)")
final = max(float(np.abs(p - q).max()) for p, q in zip(jax.tree.leaves(ring_params),
                                                       jax.tree.leaves(pmean_params)))
print(f"largest difference between the final parameters: {final:.2g}")
print(f"wall time, compile included, on fake CPU devices: ring {ring_seconds:.1f} s, "
      f"lax.pmean {pmean_seconds:.1f} s (not a benchmark)")

# %%
fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True,
                                  gridspec_kw={"height_ratios": [2, 1]})
steps = np.arange(STEPS)
top.plot(steps, pmean_losses, color="tab:blue", lw=4, alpha=0.45, label="lax.pmean")
top.plot(steps, ring_losses, color="tab:red", lw=1.5, marker="o", ms=3,
         label="jaxcoll.ring_allreduce(op='mean')")
top.set_ylabel("training loss (cross-entropy)")
top.set_title(f"Data-parallel MLP on {n_devices} fake CPU devices, Adam: the two curves overlap")
top.legend()
top.grid(alpha=0.3)
FLOOR = 1e-10  # where bit-identical losses (relative difference exactly 0) are drawn
same = relative == 0
bottom.semilogy(steps[~same], relative[~same], "o", color="k", ms=5, label="differ (relative difference)")
bottom.semilogy(steps[same], np.full(same.sum(), FLOOR), "o", mfc="none", mec="tab:green", ms=7,
                label="bit-identical (difference 0, drawn at the bottom)")
bottom.axhline(np.finfo(np.float32).eps, color="gray", ls="--", lw=1, label="float32 epsilon")
bottom.axhline(1e-5, color="tab:red", ls=":", lw=1, label="the notebook's tolerance")
bottom.set_ylim(FLOOR / 3, 1e-3)
bottom.set_yticks([FLOOR, 1e-8, 1e-6, 1e-4], ["bit-identical", "1e-8", "1e-6", "1e-4"])
bottom.set_xlabel("step")
bottom.set_ylabel("|ring - pmean| / pmean")
bottom.set_title("relative difference of the losses, step by step", fontsize=10)
bottom.legend(fontsize=8, loc="upper left", ncol=2)
bottom.grid(alpha=0.3)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 5. Buckets: one collective per bucket, not per leaf
#
# The step passes the whole `(grads, loss)` pytree to **one** `ring_allreduce` call. jaxcoll
# does not run one ring per leaf: it packs the leaves of one dtype, in tree order, side by
# side into flat **buckets** of at most `bucket_bytes` bytes (default 25 MiB, PyTorch DDP's
# `bucket_cap_mb`), runs one collective per bucket and unpacks the results. Leaves are never
# split: a leaf that does not fit starts the next bucket, and a leaf bigger than
# `bucket_bytes` gets a bucket of its own. This is the seed's advice about broadcasts
# ("如果你频繁广播小数据，建议合并成一次大广播，减少启动开销": *"if you broadcast small data
# often, merge it into one big broadcast to cut start-up costs"*) applied to gradients: every
# collective pays α per `ppermute` it makes, so fewer, bigger collectives pay it fewer times.
#
# We can count. In the compiled program each ring allreduce is two loops (reduce-scatter, then
# allgather) with one `collective-permute` instruction each, which run 7 times each on 8
# devices. So a step compiles to 2 `collective-permute`s per bucket:

# %%
from jaxcoll.collectives import bucket_plan  # the packing rule, for the count below

tree = (params0, jnp.zeros(()))  # (grads, loss) has this structure: 6 arrays and a scalar
leaf_bytes = [leaf.nbytes for leaf in jax.tree.leaves(tree)]
print(f"{len(leaf_bytes)} leaves of float32, in tree order: {leaf_bytes} bytes")


def count(pattern, text):
    return len(re.findall(pattern, text))


bucket_rows = []
for bucket_bytes in [jaxcoll.BUCKET_BYTES, 4096, 1]:
    step = make_step(lambda t: jaxcoll.ring_allreduce(t, "dp", op="mean", bucket_bytes=bucket_bytes))
    # the default step is ring_step's program, compiled already
    program = ring_step if bucket_bytes == jaxcoll.BUCKET_BYTES else step
    text = program.lower(params0, opt_state0, x0, y0).compile().as_text()
    permutes = count(r"collective-permute\(", text)
    buckets = bucket_plan(leaf_bytes, bucket_bytes)
    assert permutes == 2 * len(buckets)
    bucket_rows.append((bucket_bytes, buckets, permutes))
    print(f"bucket_bytes={bucket_bytes:<9} buckets (leaf indices): {str(buckets):<36} "
          f"collective-permutes: {permutes} in the program, "
          f"{len(buckets) * 2 * (n_devices - 1)} run per step")

pmean_lowered = pmean_step.lower(params0, opt_state0, x0, y0)
lowered_all_reduces = count(r"all_reduce", pmean_lowered.as_text())
compiled_all_reduces = count(r"all-reduce(?:-start)?\(", pmean_lowered.compile().as_text())
assert compiled_all_reduces < lowered_all_reduces
print(f"\nlax.pmean: {lowered_all_reduces} all-reduces as JAX lowers it, "
      f"{compiled_all_reduces} after XLA's compiler")

# %% [markdown]
# (Counted in the compiled programs: in the program as JAX lowers it, before XLA compiles it,
# buckets of the same shape share one lowered loop body.) With the default 25 MiB, the whole tree is one bucket: two
# `collective-permute`s in the program, 14 `ppermute`s per step. With `bucket_bytes=1`
# every leaf is a bucket of its own: 7 rings, 98 `ppermute`s per step, for the same bytes.
#
# XLA does the same thing for the built-in: JAX lowers `lax.pmean` of a tree into several
# all-reduces, and XLA's all-reduce combiner merges them into one before the program runs,
# as the last line shows.
#
# What is the difference worth? In the α-β-γ model (notebook 05) the bytes are the same; the
# difference is α, once per `ppermute`:

# %%
total = sum(leaf_bytes)
print(f"gradients (and loss) per device: {total} bytes = {total / 1024:.1f} KiB")
assert round(total / 1024) == 22  # the text below says "about 22 KiB"
schedule = jaxcoll.schedule("allreduce", "ring", n_devices)
for name in ["cpu", "gpu"]:
    cal = jaxcoll.calibration(name)
    predicted = {}
    for bucket_bytes, buckets, _ in bucket_rows[::2]:  # one bucket, and one bucket per leaf
        predicted[len(buckets)] = sum(
            jaxcoll.cost(schedule, sum(leaf_bytes[i] for i in bucket), alpha=cal.alpha,
                         beta=cal.beta, gamma=cal.gamma).seconds for bucket in buckets)
        print(f"{name} calibration, {len(buckets)} bucket(s): predicted "
              f"{predicted[len(buckets)] * 1e6:8.1f} µs per step")
    one, per_leaf = predicted[1], predicted[len(leaf_bytes)]
    alpha_share = 2 * (n_devices - 1) * cal.alpha / one  # of the one-bucket time
    print(f"  one bucket is {per_leaf / one:.1f}x faster; α is {alpha_share:.0%} of its time")
    assert alpha_share > 0.9  # small gradients: the time is almost all α

# %% [markdown]
# For a model this small (about 22 KiB of gradients, printed above) the time is almost all α,
# so one bucket wins by nearly the factor of buckets. For a big model, buckets also matter for *overlap*:
# frameworks such as PyTorch DDP start the allreduce of a bucket as soon as the backward pass
# has produced its gradients, while the backward pass goes on computing the rest. (Inside one
# `jax.jit` program, when collectives run alongside computation is up to XLA's scheduler.)
# On fake CPU devices, where every byte a ring moves is a memory copy, the README's benchmark
# found that large buckets *lose* to smaller ones; on a real network, where every collective
# has a real launch cost, the model predicts the opposite. Bucket size is a measured choice,
# not a constant.
#
# ## Summary
#
# - A data-parallel step is: local gradients on 1/n of the batch, **allreduce-mean** of the
#   gradients, the same optimizer update on every device. In JAX: `jax.jit(jax.shard_map(...))`
#   with the parameters replicated (`P()`) and the batch split (`P("dp")`).
# - `jaxcoll.ring_allreduce(grads, axis="dp", op="mean")` is a drop-in for `lax.pmean`. The
#   losses agree step for step to float32 rounding (checked to 1e-5 relative above), not bit
#   for bit, because the two add in different orders.
# - The step passes `check_vma=False` so that `jax.grad` returns per-device gradients for the
#   allreduce to average (jaxcoll's allreduce is typed invariant like `lax.pmean`'s, so
#   `out_specs=P()` would work with the check on, and every device holds the same bits,
#   checked above). With the check on, JAX sums
#   the gradients of replicated parameters itself, with an XLA all-reduce, and an
#   allreduce-mean on top returns n times the mean (unless the parameters are
#   `lax.pcast` to varying first).
# - A pytree goes in **buckets**: one collective per bucket, 2 `collective-permute`s each in
#   the compiled ring step, however many leaves.

# %% [markdown]
# ## Try it
#
# Replace the ring by `jaxcoll.allreduce(tree, "dp", op="mean")`, whose `algorithm="auto"`
# picks the schedule the cost model predicts fastest for the bucket's size. **How many
# `collective-permute`s will the compiled step contain?**
#
# *Hint*: the tree is one bucket of `sum(leaf_bytes)` bytes. Ask
# `jaxcoll.choose("allreduce", 8, nbytes)` which algorithm `auto` will run, then
# `print(jaxcoll.schedule("allreduce", that_algorithm, 8))`: the executor turns every run of
# consecutive rounds with the same pattern of partners into one loop with one
# `collective-permute` (the ring's 7 reduce-scatter rounds are one such run). Count the runs.
# Then check by compiling the step and counting as above, and train it: the losses should still
# match `lax.pmean`'s to 1e-5.

# %%
my_prediction = None  # your answer: an int

if my_prediction is not None:
    auto_step = make_step(lambda t: jaxcoll.allreduce(t, "dp", op="mean"))
    compiled = auto_step.lower(params0, opt_state0, x0, y0).compile().as_text()
    actual = count(r"collective-permute\(", compiled)
    assert my_prediction == actual, f"not quite: the compiled step has {actual}"
    print(f"Right: auto runs {jaxcoll.choose('allreduce', n_devices, sum(leaf_bytes))!r}, "
          f"{actual} collective-permutes.")
