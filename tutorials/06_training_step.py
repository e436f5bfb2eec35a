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
# The lecture (see notebook 01) says, in its section on AllReduce, what the topic is for:
#
# > 数据并行里，反向传播后各卡梯度不同，必须做 AllReduce 才能同步更新参数。
# >
# > *"In data parallelism, after the backward pass every card has different gradients; you
# > must do an AllReduce to keep the parameter updates in sync."*
#
# Here we train a small network on 8 devices, average its gradients with a ring allreduce we
# can read, and compare it with JAX's built-in step for step.
#
# **What you will learn**
#
# - data parallelism: every device holds the whole model and 1/8 of each batch;
# - the training step with `jax.jit` and `jax.shard_map`, where
#   `jaxcoll.ring_allreduce(grads, "dp", op="mean")` replaces `lax.pmean`;
# - why the two agree to float32 rounding, but not bit for bit;
# - how a pytree of gradients goes into **buckets**, one collective per bucket, counted in the
#   compiled program, and what that is worth on real links;
# - what PyTorch DDP does with buckets (overlap with the backward pass), what jaxcoll's buckets
#   do and do not do inside one `jax.jit` program, and a timeline model of the difference.
#
# **Prerequisites**: notebook 01 (the ring allreduce) and notebook 02, section 7 (`check_vma`).
# [optax](https://optax.readthedocs.io) is explained as it comes.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
os.environ["JAXCOLL_CALIBRATE"] = "0"        # auto: the shipped calibrations, everywhere
import jax
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

import re
import time
from functools import partial

import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jaxcoll
from jaxcoll.tools import pictures
from jaxcoll.analysis import systems
from jaxcoll.collectives import bucket_plan   # the packing rule, for the count in section 5
import lesson                                 # tutorials/lesson.py: the notebooks' plumbing
from lesson import size_label

mesh = Mesh(np.array(jax.devices()), ("dp",))  # one mesh axis, "dp" (data parallel), 8 devices
n_devices = mesh.size

# %% [markdown]
# ## 1. A task and a model
#
# A synthetic classification task: 16 random features, labelled by which of 4 hidden "teacher"
# directions they point along most. The model is an MLP, 16 → 64 → 64 → 4, a list of
# `{"w", "b"}` dicts: a **pytree**, JAX's word for any nesting of lists, tuples and dicts with
# arrays at the leaves. `jax.grad` returns the gradients as a pytree of the same shape.

# %%
SIZES = (16, 64, 64, 4)  # input, hidden, hidden, classes
GLOBAL_BATCH = 256       # 32 rows per device
STEPS = 40


def init_params(key):
    keys = jax.random.split(key, len(SIZES) - 1)
    return [{"w": jax.random.normal(k, (fan_in, fan_out)) / jnp.sqrt(fan_in),
             "b": jnp.zeros(fan_out)} for k, fan_in, fan_out in zip(keys, SIZES[:-1], SIZES[1:])]


def loss_fn(params, x, y):
    """Mean softmax cross-entropy; x: (batch, 16), y: (batch,) integer labels."""
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    logits = x @ params[-1]["w"] + params[-1]["b"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def batches(steps, seed=0):
    rng = np.random.default_rng(seed)
    teacher = rng.normal(size=(SIZES[0], SIZES[-1]))
    for _ in range(steps):
        x = rng.normal(size=(GLOBAL_BATCH, SIZES[0])).astype(np.float32)
        yield x, np.argmax(x @ teacher, axis=1).astype(np.int32)


params0 = init_params(jax.random.key(0))
for path, leaf in jax.tree_util.tree_leaves_with_path(params0):
    print(f"{jax.tree_util.keystr(path):<12} {str(leaf.shape):<9} {leaf.nbytes:>6} bytes")

# %% [markdown]
# ## 2. The training step
#
# `jax.shard_map` runs one function on every device at once. `in_specs` says how each argument
# is cut: `P()` **replicated** (the parameters and optimizer state: every device holds the
# whole model), `P("dp")` **split along the first dimension** (device i gets rows 32i..32i+31
# of the batch). Each device computes the gradient of the loss on its own 32 rows; the
# average over "dp" is the gradient on all 256, so every device applies the same
# [optax](https://optax.readthedocs.io) Adam update and the 8 copies stay identical. The
# average is the allreduce, the only line that differs between our two steps.
#
# The step passes `check_vma=False`, so that `jax.grad` returns each device's own gradient. With
# the check on, JAX would return the gradient of the replicated parameters already summed over the
# devices, and a mean on top would give 8 times the mean: notebook 02, [section
# 7](02_allgather_reduce_scatter.ipynb#7-check_vma-typed-results), shows both and the alternative
# (`lax.pcast`).

# %%
optimizer = optax.adam(1e-2)


def make_step(average):
    """The jitted data-parallel step; `average(tree)` averages a pytree over "dp"."""
    @jax.jit
    @partial(jax.shard_map, mesh=mesh,
             in_specs=(P(), P(), P("dp"), P("dp")),   # params, opt_state, x, y
             out_specs=(P(), P(), P()), check_vma=False)
    def step(params, opt_state, x, y):                 # x: (32, 16), y: (32,) on each device
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads, loss = average((grads, loss))           # the allreduce: one call for the whole tree
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return step


def ring_mean(tree):
    return jaxcoll.ring_allreduce(tree, axis="dp", op="mean")


def xla_mean(tree):
    return lax.pmean(tree, "dp")


ring_step, pmean_step = make_step(ring_mean), make_step(xla_mean)

# %% [markdown]
# ## 3. The same bits on every device, not the same bits as `lax.pmean`
#
# With `check_vma=False`, `out_specs=P()` is our promise that every device holds the same
# values. We check it: returned with `out_specs=P("dp")` on a new leading axis, the 8 copies of
# the averaged gradients can be compared.

# %%
sharded = NamedSharding(mesh, P("dp"))
x0, y0 = (jax.device_put(a, sharded) for a in next(batches(1)))
opt_state0 = optimizer.init(params0)


def averaged_on_every_device(average):
    @jax.jit
    @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P("dp"), P("dp")), out_specs=P("dp"),
             check_vma=False)
    def copies(params, x, y):
        return jax.tree.map(lambda g: g[None], average(jax.grad(loss_fn)(params, x, y)))
    flat = [np.asarray(g).reshape(n_devices, -1) for g in jax.tree.leaves(copies(params0, x0, y0))]
    return np.concatenate(flat, axis=1)                # (8 devices, all gradient values)


ring_g, pmean_g = averaged_on_every_device(ring_mean), averaged_on_every_device(xla_mean)
assert (ring_g == ring_g[0]).all() and (pmean_g == pmean_g[0]).all()
differ = int(np.sum(ring_g[0] != pmean_g[0]))
scale = np.abs(pmean_g).max()
assert differ > 0                                                  # not pmean's bits
assert np.abs(ring_g - pmean_g).max() <= 16 * 2.0**-24 * scale     # but a few roundings off
print(f"every device holds the same bits (ring and pmean alike); ring vs pmean: {differ} of "
      f"{ring_g.shape[1]} values differ, by at most {np.abs(ring_g - pmean_g).max() / scale:.1g} "
      f"of the largest gradient")

# %% [markdown]
# The ring reduces each chunk once, on one device, then only copies the finished chunk round,
# so all devices hold the same bits. They differ from `lax.pmean`'s in many values (printed), by a
# few float32 roundings of the largest gradient, because float addition is not associative: the
# ring adds the 8 contributions in ring order, starting from a different device for each chunk,
# and XLA in an order of its own.

# %%
v = np.random.default_rng(2).normal(size=8).astype(np.float32)   # one value from each device
orders = {"0, 1, ..., 7": ((((((v[0] + v[1]) + v[2]) + v[3]) + v[4]) + v[5]) + v[6]) + v[7],
          "3, 4, ..., 2": ((((((v[3] + v[4]) + v[5]) + v[6]) + v[7]) + v[0]) + v[1]) + v[2],
          "pairwise": ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))}
assert len(set(orders.values())) > 1
print({order: repr(total) for order, total in orders.items()})

# %% [markdown]
# ## 4. Training both, step for step
#
# Both runs start from the same parameters and see the same batches. We wait for each step
# (`float(loss)`) before sending the next: with several steps in flight, jaxlib 0.10's CPU
# runtime occasionally hung a collective (docs/guide/training.md).

# %%
def train(step):
    params, opt_state, losses = params0, optimizer.init(params0), []
    began = time.perf_counter()
    for x, y in batches(STEPS):
        params, opt_state, loss = step(params, opt_state, jax.device_put(x, sharded),
                                       jax.device_put(y, sharded))
        losses.append(float(loss))
    return np.array(losses), params, time.perf_counter() - began


ring_losses, ring_params, ring_seconds = train(ring_step)     # the first step compiles
pmean_losses, pmean_params, pmean_seconds = train(pmean_step)
np.testing.assert_allclose(ring_losses, pmean_losses, rtol=1e-5)   # step for step
assert pmean_losses[-1] < 0.5 * pmean_losses[0]                    # and it learns
print(f"loss {pmean_losses[0]:.4f} -> {pmean_losses[-1]:.4f} (lax.pmean), "
      f"{ring_losses[0]:.4f} -> {ring_losses[-1]:.4f} (ring); the same bits at "
      f"{int(np.sum(ring_losses == pmean_losses))} of {STEPS} steps")
print(f"wall time, compiling included: ring {ring_seconds:.1f} s, lax.pmean {pmean_seconds:.1f} s "
      "(fake CPU devices: not a benchmark)")
pictures.step_by_step(pmean_losses, ring_losses, ("lax.pmean", "jaxcoll.ring_allreduce(op='mean')"),
                      f"data-parallel MLP on {n_devices} fake CPU devices, Adam: the training loss")

# %% [markdown]
# ## 5. Buckets: one collective per bucket, not per leaf
#
# The step passes the whole `(grads, loss)` pytree to **one** `ring_allreduce`. jaxcoll packs
# the leaves of one dtype, in tree order, into flat **buckets** of at most `bucket_bytes`
# (default 25 MiB, PyTorch DDP's `bucket_cap_mb`), runs one collective per bucket and unpacks.
# A leaf is never split: one that does not fit starts the next bucket, and one larger than
# `bucket_bytes` is a bucket of its own. The lecture gives this
# advice for broadcasts ("如果你频繁广播小数据，建议合并成一次大广播，减少启动开销": "if you
# broadcast small data often, merge it into one big broadcast to cut start-up costs"); here it
# is applied to allreduces of gradients.
#
# A ring allreduce compiles to two loops (reduce-scatter, allgather), each with one
# `collective-permute` that runs 7 times, so a step holds 2 per bucket:

# %%
leaf_bytes = [leaf.nbytes for leaf in jax.tree.leaves((params0, jnp.zeros(())))]
print(f"{len(leaf_bytes)} float32 leaves, in tree order: {leaf_bytes} bytes, "
      f"{size_label(sum(leaf_bytes))} in all")
args = (params0, opt_state0, x0, y0)
plans, compiled = {}, {}               # compiled: {bucket_bytes: the step's optimised HLO}
for bucket_bytes in (jaxcoll.BUCKET_BYTES, 4096, 1):
    step = ring_step if bucket_bytes == jaxcoll.BUCKET_BYTES else make_step(
        lambda t, b=bucket_bytes: jaxcoll.ring_allreduce(t, "dp", op="mean", bucket_bytes=b))
    compiled[bucket_bytes] = lesson.compiled_text(step, *args)
    permutes = len(re.findall(r"collective-permute(?:-start)?\(", compiled[bucket_bytes]))
    plans[bucket_bytes] = bucket_plan(leaf_bytes, bucket_bytes)
    assert permutes == 2 * len(plans[bucket_bytes])
    runs = len(plans[bucket_bytes]) * 2 * (n_devices - 1)
    print(f"bucket_bytes={bucket_bytes:<9} buckets {str(plans[bucket_bytes]):<36} "
          f"{permutes} collective-permutes, {runs} run per step")

in_jax = pmean_step.lower(*args).as_text().count("all_reduce")
in_xla = lesson.collectives_in(pmean_step, *args)["all-reduce"]
assert in_xla < in_jax
print(f"lax.pmean: {in_jax} all-reduces as JAX lowers it, {in_xla} after XLA's combiner")

# %% [markdown]
# With the default, the whole tree is one bucket: 14 `ppermute`s per step. With
# `bucket_bytes=1` each leaf is its own: 98, for the same bytes. XLA does the same for the
# built-in: its all-reduce combiner merges the all-reduces of `lax.pmean` of a tree.
#
# **What buckets are worth.** The bytes are the same either way; the difference is a start-up
# per `ppermute`. We price it in the α-β-γ model with the CPU calibration, and on the links of
# one DGX H100 (`jaxcoll.analysis.systems`, 05_choosing_an_algorithm, section 4), whose α of
# 3.4 µs is NCCL's step inside one kernel (`gpu.json` assumes 15 µs per jaxcoll round, a
# `ppermute` launched on its own):

# %%
ring8 = jaxcoll.schedule("allreduce", "ring", n_devices)
cpu, h100 = jaxcoll.calibration("cpu").plain(), systems.dgx("h100")
PRICES = {"CPU calibration": lambda b: jaxcoll.cost(ring8, b, alpha=cpu.alpha, beta=cpu.beta,
                                                     gamma=cpu.gamma).seconds,
          "1 x DGX H100": lambda b: jaxcoll.simulate(ring8, b, h100).seconds}
for where, price in PRICES.items():
    one, per_leaf = (sum(price(sum(leaf_bytes[i] for i in bucket)) for bucket in plans[b])
                     for b in (jaxcoll.BUCKET_BYTES, 1))
    startups = price(0.0)                              # the ring with no bytes: its start-ups
    assert startups / one > 0.9                        # small gradients: almost all start-ups
    assert per_leaf / one > 0.9 * len(plans[1])        # nearly the number of buckets
    print(f"{where:<16} one bucket {one * 1e6:8.1f} µs, one per leaf {per_leaf * 1e6:8.1f} µs: "
          f"{per_leaf / one:.1f}x; start-ups are {startups / one:.0%} of the one bucket")

# %% [markdown]
# For gradients this small (about 22 KiB, printed above) the time is almost all start-ups, on
# either, so one bucket wins by nearly the number of buckets. On fake CPU devices, where every
# byte moved is a memory copy, the training benchmark (docs/guide/training.md) found large buckets
# *losing* to smaller ones; on real links the model says the opposite. Bucket size is a measured
# choice.
#
# ## 6. Buckets and the backward pass: what DDP overlaps, and what happens here
#
# **What PyTorch DDP does.** DDP registers a hook on every parameter's gradient. The backward
# pass produces gradients from the last layer to the first, and DDP assigns parameters to
# buckets in roughly that order (the reverse of `model.parameters()`), so the first bucket
# holds the last layer's gradients. When a bucket's last gradient is ready, its hook launches
# that bucket's allreduce asynchronously, on a communication stream, while the backward goes
# on computing the earlier layers. One bucket's allreduce then runs beside the next layers'
# backward compute; only what is left after the last layer's backward is exposed.
#
# **What jaxcoll's buckets do.** They cut the number of collectives, nothing more: the leaves
# are packed in tree order (layer 0 first), and there are no hooks. Inside one `jax.jit`
# program, XLA's scheduler places each bucket's collectives anywhere after the gradients they
# read, and on GPU its latency-hiding scheduler may overlap them with compute. Here is what it
# did on this CPU backend, for the step with `bucket_bytes=4096` (5 buckets): the order of the
# backward's matmuls (the weight gradients `dW`) and of the buckets' ring loops in the
# compiled, scheduled program:

# %%
entry = compiled[4096].split("\nENTRY ")[1]   # the 5-bucket step's scheduled main program
weight_shapes = {f"{fan_in},{fan_out}": f"dW{layer}"                  # dW_l: (fan_in, fan_out)
                 for layer, (fan_in, fan_out) in enumerate(zip(SIZES[:-1], SIZES[1:]))}
instructions = re.findall(r"= (?:f32\[([\d,]+)\]\S*|\(.*?\)) ([\w-]+)\((.*)", entry)
order = ["loop" if op == "while" else weight_shapes[shape]  # a matmul: a dot, or (jaxlib 0.12.1
         for shape, op, rest in instructions                 # on CPU) a library kCustom fusion
         if op == "while" or shape in weight_shapes and (op == "dot" or "kind=kCustom" in rest)]
print("compiled order:", " ".join(order))
matmuls = [op for op in order if op != "loop"]
assert matmuls == ["dW2", "dW1", "dW0"]             # the backward: last layer first (data flow)
assert order.count("loop") == 2 * len(plans[4096])  # 2 ring loops per bucket; where: XLA's choice
assert "collective-permute-start" not in entry      # and each transfer synchronous on CPU

# %% [markdown]
# The backward computes dW2, dW1, dW0, last layer first: data flow forces it. Where the 10 ring
# loops (2 per bucket) go is the scheduler's choice, within what data flow allows: jaxlib 0.10
# puts them all after the last matmul, jaxlib 0.12 one of them before dW0 (a loop of a bucket
# that holds none of dW0), and another backend or version may do otherwise. Either way
# nothing runs *beside* the backward on this backend, since a CPU `collective-permute` is
# synchronous (no `-start`/`-done` pair, notebook 07). What no scheduler can change is that a
# bucket's collective waits for every gradient in it. In tree order the *first* bucket holds
# layer 0's gradients, the last the backward computes.
#
# **What the overlap is worth: a timeline model.** Take a network of L equal layers, each with
# one bucket of gradients, on real GPUs. The backward computes layer l in time b; a bucket's
# allreduce takes a; allreduces run one at a time, each starting when its bucket is ready and
# the previous allreduce is done. DDP's order (the last layer's bucket first) against a
# single allreduce after the whole backward, with a priced two ways (`simulate`'s `runtime`):
# *lock-step*, as jaxcoll's XLA executor runs a ring (a round starts when the one before has
# ended everywhere, each paying its α), in one channel; and *pipelined* in NCCL's 8 channels
# (each a ring leaving a node by its own NIC, the buffer in 512 KiB slices, each forwarded as
# soon as it has arrived), as NCCL runs it:

# %%
def ddp_finish(backward, allreduce):
    """When the last allreduce ends: bucket k (the k-th layer the backward finishes) is ready
    at sum(backward[:k+1]); allreduces run one at a time, in that order."""
    ready, done = np.cumsum(backward), 0.0
    for ready_k, a_k in zip(ready, allreduce):
        done = max(done, ready_k) + a_k
    return done


LAYERS, LAYER_PARAMS, TOKENS = 24, 6 << 20, 4096      # per GPU: 6M parameters a layer, 4096 tokens
grad_bytes = 4 * LAYER_PARAMS                           # float32: one 24 MiB bucket a layer
H100_FLOPS = 0.4 * 989e12                               # H100 SXM dense bf16 peak, 40% of it
b = 4 * LAYER_PARAMS * TOKENS / H100_FLOPS              # backward ~ 2x forward's 2·params·tokens
RUNTIMES = {"lock-step, 1 channel": dict(runtime="lockstep", channels=1),
            "pipelined, 8 channels": dict(runtime="pipelined", channels=8)}
steps = {}
for nodes in (1, 2):
    links = systems.dgx("h100", nodes)
    ring_nodes = jaxcoll.schedule("allreduce", "ring", 8 * nodes)
    for runtime, how in RUNTIMES.items():
        a, a_all = (jaxcoll.simulate(ring_nodes, nbytes, links, **how).seconds
                    for nbytes in (grad_bytes, LAYERS * grad_bytes))
        after, ddp = LAYERS * b + a_all, ddp_finish([b] * LAYERS, [a] * LAYERS)
        assert np.isclose(ddp, b + LAYERS * a if a >= b else LAYERS * b + a)  # one side exposed
        steps[nodes, runtime] = (a, a_all, after, ddp)
        print(f"{nodes} node(s), {runtime:<21}: b = {b * 1e3:.2f} ms, a = {a * 1e3:.2f} ms; "
              f"backward then one allreduce {after * 1e3:5.2f} ms, DDP buckets "
              f"{ddp * 1e3:5.2f} ms ({ddp / after - 1:+.0%})")
for runtime in RUNTIMES:
    a1, _, after1, ddp1 = steps[1, runtime]
    assert a1 < b and 0.65 < ddp1 / after1 < 0.75   # one node: each hides, ~30% shorter
a2, a_all2, after2, ddp2 = steps[2, "lock-step, 1 channel"]
extra, hidden = LAYERS * a2 - a_all2, (LAYERS - 1) * b
assert a2 > b and np.isclose(ddp2 - after2, extra - hidden) and ddp2 > after2  # loses
a8, _, after8, ddp8 = steps[2, "pipelined, 8 channels"]
assert a8 < 1.1 * b and ddp8 < 0.8 * after8      # NCCL's way across two nodes: it pays
print(f"lock-step, 2 nodes: {LAYERS} buckets' allreduces cost {extra * 1e3:.2f} ms more than "
      f"one, against {hidden * 1e3:.2f} ms of backward they hide")

# %% [markdown]
# In one node a bucket's allreduce (a) is shorter than a layer's backward (b) either way: each
# hides behind the next layer's compute, only the last bucket's is exposed (L·b + a), and the
# step is about 30% shorter than backward-then-allreduce. Across two nodes the runtimes part.
# Lock-step in one channel, a bucket's ring of 16 ranks crosses one 50 GB/s NIC and pays 30
# rounds of α (10 µs per NIC hop): a > b, the allreduces set the pace (b + L·a), and 24 of them
# cost more than one by more than the 23 layers of backward they hide, so DDP's buckets lose
# (the lock-step line). Pipelined in 8 channels, each bucket's bytes leave by 8 NICs and its
# rounds overlap: a comes down to about b, and the overlap pays as in one node, as DDP's users
# see. The lesson is about the runtime, not about overlap: a lock-step, one-channel ring (what
# jaxcoll's XLA executor runs) makes small buckets expensive across nodes; NCCL's does not.
#
# In tree order (jaxcoll's packing, layer 0 first), buckets that run one at a time could start
# only after the whole backward, no better than one bucket: to get DDP's order, pass the
# gradients last layer first, and let the compiler schedule the rest. This is a model with
# stated assumptions (40% of peak, the FLOP count, equal layers), not a measurement.
#
# ## Summary
#
# - A data-parallel step: gradients on 1/n of the batch, an **allreduce-mean**, the same update
#   everywhere. In JAX: `jax.jit(jax.shard_map(...))`, parameters `P()`, batch `P("dp")`.
# - `jaxcoll.ring_allreduce(grads, "dp", op="mean")` replaces `lax.pmean`; the losses agree to
#   1e-5 step for step, not bit for bit (another order of additions), and every device holds
#   the same bits.
# - A pytree goes in **buckets**: one collective per bucket, 2 `collective-permute`s each in
#   the compiled ring step; for small gradients one bucket is nearly n-buckets times faster.
# - DDP overlaps a bucket's allreduce with the rest of the backward (hooks, last layer's bucket
#   first). jaxcoll's buckets only cut the number of collectives; in one `jax.jit` program XLA
#   schedules them, and on CPU it ran them all after the backward, synchronously. In the
#   timeline model overlap hides ~30% in one node, and across two nodes too when the ring runs
#   as NCCL runs it (8 channels, pipelined); lock-step in one channel, the extra buckets'
#   start-ups cost more than the compute they hide.
#
# ## Try it
#
# Replace the ring by `jaxcoll.allreduce(tree, "dp", op="mean")`, whose `algorithm="auto"`
# picks the schedule the cost model prices cheapest for the bucket. **How many
# `collective-permute`s will the compiled step hold?**
#
# *Hint*: ask `jaxcoll.choose("allreduce", 8, sum(leaf_bytes))`, then print that schedule: the
# executor turns every run of consecutive rounds with the same partners into one loop with one
# `collective-permute`.
#
# <details><summary>Answer</summary>
#
# `auto` picks recursive doubling (3 rounds, the fewest, at 22 KiB), whose partners change
# every round (distance 1, 2, 4): 3 `collective-permute`s.
# </details>

# %%
my_prediction = None  # an int

if my_prediction is None:
    print("not done yet: set my_prediction")
else:
    auto_step = make_step(lambda t: jaxcoll.allreduce(t, "dp", op="mean"))
    actual = lesson.collectives_in(auto_step, *args)["collective-permute"]
    assert my_prediction == actual, f"not quite: the compiled step holds {actual}"
    print(f"right: auto runs {jaxcoll.choose('allreduce', n_devices, sum(leaf_bytes))!r}, "
          f"{actual} collective-permutes")
