# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 02 · AllGather and ReduceScatter: the two halves of AllReduce
#
# **What you will learn**
#
# - what AllGather and ReduceScatter do, each written by hand with `jax.lax.ppermute` (the
#   seed's ring pseudocode), then with `jaxcoll`, and checked against JAX's built-ins
#   `lax.all_gather` and `lax.psum_scatter`;
# - that ring AllReduce *is* ring ReduceScatter followed by ring AllGather: in jaxcoll the
#   AllReduce schedule is literally the concatenation of the other two;
# - how many bytes each moves, and why the seed's "splitting AllReduce halves the
#   communication" is wrong: the bytes are the same; the gain is elsewhere;
# - where the gain is: a ZeRO/FSDP-style sharded optimizer step (each rank keeps 1/n of the
#   optimizer state), checked against the ordinary data-parallel step.
#
# **Prerequisites**: Python and numpy; notebook 01 (ring AllReduce) helps but is not required:
# the JAX you need is recalled below.
#
# The seed lecture is `shared/seed/000_67aa4e9e96814775.txt` (Chinese), section 3.2; short
# quotes are translated.
#
# **Notation.** The seed writes N for the number of ranks; here **n = number of ranks** (8) and
# **N = bytes per rank**. The pieces a schedule moves are called **chunks** (as in the
# drawings): each rank's data is cut into n of them.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
import jax
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

import tempfile
from functools import partial

import jax.numpy as jnp
import numpy as np
from IPython.display import Image, display
from jax import lax
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, PartitionSpec as P

import jaxcoll

print(jax.devices())

# %% [markdown]
# ## 1. The two collectives
#
# The seed: *"AllGather 和 ReduceScatter 其实是 AllReduce 的两个'半成品'"* — "AllGather and
# ReduceScatter are really AllReduce's two 'half-finished products'."
#
# Cut every rank's data into n chunks, one per rank.
#
# - **ReduceScatter**: rank i ends with chunk i of the *sum* over all ranks: every rank does
#   1/n of the reducing, and keeps only its 1/n of the result.
# - **AllGather**: rank i starts with one chunk; every rank ends with all n chunks, in rank
#   order.
#
# The seed also says that AllGather *"相当于只做 Broadcast 那一步"* ("amounts to doing only the
# Broadcast step" of AllReduce = Reduce + Broadcast) and ReduceScatter *"相当于只做 Reduce 那一步"*
# ("only the Reduce step"). The roles are right: ReduceScatter does the reducing, AllGather the
# spreading. But neither is *one* step with one root. ReduceScatter is **n Reduces** of 1/n of
# the data each, one into every rank (chunk i is reduced into rank i); AllGather is **n
# Broadcasts**, one from every rank (rank i broadcasts its chunk), all running at the same
# time. The seed gets it right a few lines later: *"AllGather 就是 Broadcast 的'全员版'"* —
# "AllGather is the everyone-version of Broadcast". Notebook 04
# ([How the primitives relate](04_how_they_relate.ipynb)) checks both decompositions on the
# schedules.
#
# In numpy, with row r of a `(n, ...)` array being rank r's data:

# %%
n = 8
rng = np.random.default_rng(0)
chunk_len = 3
x = rng.integers(-8, 9, size=(n, n, chunk_len)).astype(np.float32)  # (rank, chunk, chunk_len)

reduce_scatter_answer = x.sum(axis=0)      # (n, chunk_len): rank i should get row i
own_chunks = x[:, 0]                       # (n, chunk_len): rank i's one chunk, for AllGather
allgather_answer = own_chunks              # every rank should get all n chunks, in rank order
print("rank 2's data, chunk by chunk:\n", x[2])
print("ReduceScatter: rank 2 gets chunk 2 of the sum:", reduce_scatter_answer[2])

# %% [markdown]
# Small integers in float32 are summed exactly in any order, so every correct algorithm must
# match the built-ins **bit for bit**.
#
# The JAX pieces (as in notebook 01): a `Mesh` of the 8 fake devices with one axis `"i"`;
# `jax.shard_map` runs a function on every rank at once; inside it `lax.axis_index("i")` is
# the rank and `lax.ppermute(v, "i", perm)` sends `v` from `src` to `dst` for every pair in
# `perm`. `on_every_rank(f)` feeds row r of its input to rank r and stacks the results.
#
# Each algorithm and each reference below is a jitted program of its own, because of a
# CPU-only jaxlib 0.10 bug (notebook 01; the README's
# [sharp bit](../README.md#sharp-bit-jaxlib-010-on-cpu-runs-independent-collectives-into-each-other)):
# two *independent* collectives in one program can crash the process (`jaxcoll.execute.after`
# orders them where they must share one). Collectives that depend on each other, like the
# steps of one ring, are fine.

# %%
AXIS = "i"
mesh = Mesh(np.array(jax.devices()), (AXIS,))


def on_every_rank(fn):
    """jit(shard_map(fn)): rank r runs fn on row r of the input; its result is row r of the output."""
    return jax.jit(jax.shard_map(lambda rows: fn(rows[0])[None],   # rows: (1, ...) on each rank
                                 mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)))


RIGHT = [(r, (r + 1) % n) for r in range(n)]       # every rank sends to rank + 1

# The built-ins, the reference (each in a program of its own: see the note above)
psum_scatter = on_every_rank(lambda v: lax.psum_scatter(v, AXIS))   # (n, chunk_len) -> (chunk_len,)
all_gather = on_every_rank(lambda v: lax.all_gather(v, AXIS))       # (chunk_len,) -> (n, chunk_len)
np.testing.assert_array_equal(psum_scatter(x), reduce_scatter_answer)
np.testing.assert_array_equal(all_gather(own_chunks), np.broadcast_to(allgather_answer, (n, n, chunk_len)))
print("lax.psum_scatter and lax.all_gather do what the numpy answers say")

# %% [markdown]
# ## 2. AllGather by hand
#
# The seed's ring AllGather:
#
# ```
# // each rank holds its own chunk   (the seed writes N for n, the number of ranks)
# for step in range(n-1):
#     send_chunk = (rank - step) % n
#     recv_chunk = (rank - step - 1) % n
#     send(data[send_chunk], next_rank)
#     recv(data[recv_chunk], prev_rank)
# ```
#
# Rank r puts its chunk in slot r of an n-slot buffer. In step 0 it passes its own chunk to
# the right; in every later step it passes on the chunk it just received. After n − 1 steps
# every chunk has visited every rank. `send` + `recv` are one `ppermute` to the right.

# %%
def ring_allgather_by_hand(chunk):                 # chunk: (chunk_len,), this rank's
    rank = lax.axis_index(AXIS)
    data = jnp.zeros((n,) + chunk.shape, chunk.dtype).at[rank].set(chunk)   # (n, chunk_len)
    for step in range(n - 1):
        send_chunk = (rank - step) % n
        recv_chunk = (rank - step - 1) % n
        temp = lax.ppermute(data[send_chunk], AXIS, perm=RIGHT)
        data = data.at[recv_chunk].set(temp)
    return data                                    # (n, chunk_len): every rank's chunk


np.testing.assert_array_equal(on_every_rank(ring_allgather_by_hand)(own_chunks), all_gather(own_chunks))
print("hand-written ring AllGather == lax.all_gather on every rank")

# %% [markdown]
# ## 3. ReduceScatter by hand
#
# This is the first half of notebook 01's ring: each step, send a partial sum to the right and
# add what arrives from the left. The seed's indices (`send_chunk = (rank - step) % n`) leave
# rank r with the complete sum of chunk r + 1. Starting one chunk earlier,
# `send_chunk = (rank - step - 1) % n`, leaves rank r with chunk r, which is what
# `lax.psum_scatter` promises.

# %%
def ring_reduce_scatter_by_hand(data):             # data: (n, chunk_len), this rank's n chunks
    rank = lax.axis_index(AXIS)
    for step in range(n - 1):
        send_chunk = (rank - step - 1) % n         # the seed's index, one chunk earlier
        recv_chunk = (rank - step - 2) % n
        temp = lax.ppermute(data[send_chunk], AXIS, perm=RIGHT)
        data = data.at[recv_chunk].add(temp)
    return data[rank]                              # (chunk_len,): chunk `rank` of the sum


np.testing.assert_array_equal(on_every_rank(ring_reduce_scatter_by_hand)(x), psum_scatter(x))
print("hand-written ring ReduceScatter == lax.psum_scatter on every rank")

# %% [markdown]
# ## 4. The same with jaxcoll
#
# `jaxcoll.reduce_scatter` and `jaxcoll.allgather` take the same arguments as
# `lax.psum_scatter` and `lax.all_gather` (`dim=` for the dimension, `tiled=` to concatenate
# instead of stacking), plus `algorithm=`:

# %%
jaxcoll_rs = on_every_rank(lambda v: jaxcoll.reduce_scatter(v, AXIS, algorithm="ring"))
jaxcoll_ag = on_every_rank(lambda v: jaxcoll.allgather(v, AXIS, algorithm="ring"))
np.testing.assert_array_equal(jaxcoll_rs(x), psum_scatter(x))
np.testing.assert_array_equal(jaxcoll_ag(own_chunks), all_gather(own_chunks))
print("jaxcoll ring reduce_scatter == lax.psum_scatter, jaxcoll ring allgather == lax.all_gather")

# %% [markdown]
# Their schedules, drawn on 4 ranks (rows: ranks, columns: chunks; a cell is striped with the
# colours of the ranks whose data it holds; each panel is the state *after* that round, arrows
# are the round's transfers, dashed: added in, solid: copied; the long arrow is the ring's
# wrap-around, rank 3 -> rank 0). In ReduceScatter each rank ends with one complete chunk, its
# own: the cell with all four colours (rank r's is in column r). The other striped cells are
# partial sums the ring left behind on its way, never read again; `reduce_scatter` returns only
# the complete chunk. In AllGather each rank starts with one chunk, its own colour, and ends
# with all four.

# %%
pictures = tempfile.mkdtemp()                      # a scratch folder, outside the repository


def draw(schedule, name):
    """jaxcoll.draw's PNG of ``schedule``, shown in the notebook."""
    path = jaxcoll.draw(schedule, os.path.join(pictures, name))
    return Image(filename=path)


reduce_scatter4 = jaxcoll.schedule("reduce_scatter", "ring", 4)
allgather4 = jaxcoll.schedule("allgather", "ring", 4)
display(draw(reduce_scatter4, "ring_reduce_scatter_4.png"))
display(draw(allgather4, "ring_allgather_4.png"))

# %% [markdown]
# ## 5. AllReduce = ReduceScatter + AllGather
#
# After the ReduceScatter, rank i holds chunk i of the sum; an AllGather of those chunks gives
# every rank the whole sum: an AllReduce. In jaxcoll this is not an analogy but a line of
# code: the ring AllReduce schedule is built as `reduce_scatter(n) + allgather(n)`, and its
# rounds are exactly the other two's rounds, one after the other:

# %%
for ranks in range(1, 17):
    allreduce_rounds = jaxcoll.schedule("allreduce", "ring", ranks).rounds
    rs, ag = jaxcoll.schedule("reduce_scatter", "ring", ranks), jaxcoll.schedule("allgather", "ring", ranks)
    assert allreduce_rounds == rs.rounds + ag.rounds
    assert len(rs.rounds) == len(ag.rounds) == ranks - 1
print("for n = 1..16: ring allreduce rounds == ring reduce_scatter rounds + ring allgather rounds")
print(jaxcoll.schedule("allreduce", "ring", 4))

# %% [markdown]
# And with real data: our two hand-written halves, one after the other, are an AllReduce,
# equal to `lax.psum`; so are jaxcoll's (`tiled=True` makes `allgather` concatenate the chunks
# into one vector instead of stacking them).

# %%
psum = on_every_rank(lambda v: lax.psum(v, AXIS))
by_hand = on_every_rank(lambda v: ring_allgather_by_hand(ring_reduce_scatter_by_hand(v)))
with_jaxcoll = on_every_rank(lambda v: jaxcoll.allgather(
    jaxcoll.reduce_scatter(v, AXIS, algorithm="ring"), AXIS, algorithm="ring"))
np.testing.assert_array_equal(by_hand(x), psum(x))
np.testing.assert_array_equal(with_jaxcoll(x), psum(x))
np.testing.assert_array_equal(
    on_every_rank(lambda v: jaxcoll.allgather(jaxcoll.reduce_scatter(v, AXIS, tiled=True), AXIS, tiled=True))(
        x.reshape(n, -1)),                         # (n, n * chunk_len): flat vectors
    psum(x).reshape(n, -1))
print("ReduceScatter then AllGather == psum (by hand, with jaxcoll, and tiled on flat vectors)")

# %% [markdown]
# ## 6. Bytes: does splitting "halve the communication"?
#
# The seed: *"我曾经在训练时，把 AllReduce 拆成 ReduceScatter + AllGather，通信量直接减半。为什么？因为
# AllReduce 要传 2 倍数据，而 ReduceScatter 只传 1 倍，AllGather 再传 1 倍，但中间可以跟计算重叠。"*
# — "Once in training I split AllReduce into ReduceScatter + AllGather and the communication
# was halved outright. Why? Because AllReduce has to move 2x the data, while ReduceScatter
# moves only 1x and AllGather another 1x, but in between they can overlap with computation."
#
# Its own arithmetic already says otherwise: 1x + 1x = 2x. Count the bytes each rank sends,
# from the schedules, for a vector of N bytes per rank (ReduceScatter's input, AllGather's
# output, AllReduce's buffer: the same N):

# %%
def bytes_sent_per_rank(schedule, nbytes):
    """Bytes each rank sends over the whole schedule, for a buffer of nbytes per rank."""
    chunk = nbytes / schedule.n_chunks
    sent = np.zeros(schedule.n_ranks)
    for round_ in schedule.rounds:
        for t in round_:
            sent[t.src] += len(t.chunks) * chunk
    return sent


N = 1.0                                            # bytes per rank: count in units of N
schedules = {name: jaxcoll.schedule(name, "ring", n) for name in ("reduce_scatter", "allgather", "allreduce")}
sent = {name: bytes_sent_per_rank(s, N) for name, s in schedules.items()}
for name, per_rank in sent.items():
    print(f"{name:>15}: every rank sends {per_rank[0]:.3f} N in {schedules[name].n_rounds} rounds")

assert np.allclose(sent["reduce_scatter"], (n - 1) / n * N)
assert np.allclose(sent["allgather"], (n - 1) / n * N)
assert np.allclose(sent["allreduce"], sent["reduce_scatter"] + sent["allgather"])   # the same bytes, not half
assert np.allclose(sent["allreduce"], 2 * (n - 1) / n * N)

# The α-β-γ model (notebook 01: α per ppermute, and every ring round here is one ppermute)
# agrees: the two halves cost exactly what the AllReduce costs.
gpu = jaxcoll.calibration("gpu")                   # an estimate for H100/H200-class GPUs, not a measurement
price = partial(jaxcoll.cost, nbytes=2.0**24, alpha=gpu.alpha, beta=gpu.beta, gamma=gpu.gamma)
halves = price(schedules["reduce_scatter"]).seconds + price(schedules["allgather"]).seconds
assert np.isclose(halves, price(schedules["allreduce"]).seconds)
print(f"\nmodel, 16 MiB per rank: reduce_scatter + allgather {halves * 1e6:.0f} µs "
      f"= allreduce {price(schedules['allreduce']).seconds * 1e6:.0f} µs")

# %% [markdown]
# So splitting an AllReduce into its halves moves **exactly the same bytes** in the same
# number of rounds: a ring AllReduce already *is* the two halves. Nothing is halved. (The
# seed's "AllReduce moves 2x" is right: 2(n−1)/n ≈ 2 times the vector; each half moves about
# 1x.) What the split does buy is what the seed mentions only in passing:
#
# 1. **Only one half, where one half is enough.** The seed's own example: *"各卡只维护部分参数，
#    你只需要把梯度归约到对应的卡上，ReduceScatter 就够用了"* — "each GPU maintains only part of
#    the parameters, you only need to reduce the gradients onto the corresponding GPU:
#    ReduceScatter is enough." Then you really do move half: (n−1)/n·N instead of 2(n−1)/n·N.
# 2. **Sharded state in between.** Between the two halves each rank holds only 1/n of the
#    reduced gradient, so it needs to keep, and update, only 1/n of the optimizer state and do
#    1/n of the optimizer's arithmetic: ZeRO
#    ([Rajbhandari et al. 2020](https://arxiv.org/abs/1910.02054)). Section 7 does it.
# 3. **Overlap, and later gathers.** The two halves can run at different times: the
#    ReduceScatter of one layer's gradients while the backward pass computes the next layer,
#    the AllGather of a layer's parameters just before the forward pass needs them, while the
#    previous layer computes (FSDP,
#    [Zhao et al. 2023](https://arxiv.org/abs/2304.11277)). Overlap hides communication time
#    behind compute; it does not reduce the bytes. (A plain AllReduce of gradient buckets can
#    overlap with the backward pass too: PyTorch DDP does that,
#    [Li et al. 2020](https://arxiv.org/abs/2006.15704).)
#
# ## 7. A ZeRO-style sharded update
#
# An ordinary data-parallel step: every rank computes the gradient on its slice of the batch,
# AllReduces it (mean), and then **every rank** applies the same optimizer update to **all**
# the parameters with **all** the optimizer state: n identical copies of the state, and the same
# arithmetic done n times.
#
# The sharded step is ZeRO stage 1 (the optimizer state is sharded): flatten the parameters
# into one vector and cut it into n chunks. Rank i keeps only chunk i of the optimizer state.
# (ZeRO stage 2 also shards the gradient: it reduce-scatters gradient buckets during the
# backward pass and frees each bucket's full gradient right away. Here each rank holds its
# whole local gradient until one ReduceScatter at the end.)
#
# 1. compute the gradient on this rank's slice of the batch (all parameters, as before);
# 2. **ReduceScatter** the gradient (mean): rank i gets chunk i of the averaged gradient;
# 3. update chunk i of the parameters with chunk i of the optimizer state;
# 4. **AllGather** the updated chunks: every rank has all the new parameters.
#
# The optimizer is SGD with momentum (`m = μ·m + g; p = p − lr·m`), elementwise like Adam, so
# updating chunk by chunk gives the same numbers as updating the whole vector. The model is a
# small linear layer with a squared loss. (`examples/zero_sharded.py` does the same with an MLP
# and `optax.adam`.)

# %%
features, outputs, batch_per_rank = 5, 3, 4
params = {"w": rng.normal(size=(features, outputs)).astype(np.float32),
          "b": np.zeros(outputs, np.float32)}
flat_params, unflatten = ravel_pytree(params)      # (n_params,): all parameters in one vector
n_params = flat_params.size                        # 5 * 3 + 3 = 18
chunk_size = -(-n_params // n)                     # ceil(18 / 8) = 3: each rank's chunk
padded_len = n * chunk_size                        # 24: padded so that n chunks fit exactly

inputs = rng.normal(size=(n, batch_per_rank, features)).astype(np.float32)    # row r: rank r's batch
targets = rng.normal(size=(n, batch_per_rank, outputs)).astype(np.float32)
learning_rate, mu = 0.1, 0.9


def loss(flat, x, y):
    p = unflatten(flat)
    return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)


def pad(v):                                        # (n_params,) -> (padded_len,)
    return jnp.pad(v, (0, padded_len - n_params))

# %% [markdown]
# Both steps run in one `shard_map` over the 8 ranks. The parameters are replicated: every
# rank holds all of them, in and out (`P()`). The step passes `check_vma=False`, and we check
# below that the promise `P()` makes holds (every rank holds the same bits: each chunk is
# computed once and copied). The README's
# [sharp bit](../README.md#sharp-bit-check_vma-typed-like-lax) says more.
#
# `check_vma=False` matters here for a reason that is easy to miss: with the check
# on, `jax.grad` of a replicated (`P()`) input inside `shard_map` comes back **already summed
# over the ranks**: JAX inserts the AllReduce itself (the transpose of "replicated -> per rank"
# is a sum). A ReduceScatter or AllReduce on top would then reduce n copies of that same sum:
# with `op="mean"` on top, it averages n identical sums, so you get the sum, n times the mean
# gradient. With the check off, each rank gets the gradient of its own batch, as in PyTorch DDP.

# %%
def per_rank_gradients(check_vma):
    """(n, n_params): row r is what jax.grad returns on rank r."""
    return jax.jit(jax.shard_map(lambda flat, x, y: jax.grad(loss)(flat, x[0], y[0])[None],
                                 mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS)),
                                 out_specs=P(AXIS), check_vma=check_vma))(flat_params, inputs, targets)


own = np.stack([jax.grad(loss)(flat_params, inputs[r], targets[r]) for r in range(n)])  # (n, n_params)
np.testing.assert_allclose(per_rank_gradients(check_vma=False), own, rtol=1e-6)
np.testing.assert_allclose(per_rank_gradients(check_vma=True), np.broadcast_to(own.sum(0), own.shape),
                           rtol=1e-5, atol=1e-6)
print("check_vma=False: rank r gets its own batch's gradient; "
      "check_vma=True: every rank gets the sum over all ranks (n times the mean)")

# %%
def data_parallel_step(flat, momentum, x, y, reduce_mean):
    """Every rank: the whole momentum (n_params,) and the whole update."""
    grad = jax.grad(loss)(flat, x, y)                        # (n_params,), this rank's batch
    grad = reduce_mean(grad)                                 # AllReduce (mean)
    momentum = mu * momentum + grad
    return flat - learning_rate * momentum, momentum


def zero_step(flat, momentum_chunk, x, y):
    """Rank i: chunk i of the momentum (chunk_size,) and of the update."""
    rank = lax.axis_index(AXIS)
    grad = jax.grad(loss)(flat, x, y)                        # (n_params,), this rank's batch
    grad_chunk = jaxcoll.reduce_scatter(pad(grad), AXIS, op="mean", tiled=True,
                                        algorithm="ring")    # (chunk_size,): chunk `rank` of the mean
    param_chunk = lax.dynamic_slice_in_dim(pad(flat), rank * chunk_size, chunk_size)   # (chunk_size,)
    momentum_chunk = mu * momentum_chunk + grad_chunk
    param_chunk = param_chunk - learning_rate * momentum_chunk
    new_flat = jaxcoll.allgather(param_chunk, AXIS, tiled=True, algorithm="ring")   # (padded_len,)
    return new_flat[:n_params], momentum_chunk


def compile_step(step, momentum_spec):
    batch = P(AXIS)                                          # rank r gets row r of inputs/targets
    return jax.jit(jax.shard_map(
        lambda flat, m, x, y: step(flat, m, x[0], y[0]), mesh=mesh,
        in_specs=(P(), momentum_spec, batch, batch), out_specs=(P(), momentum_spec),
        check_vma=False))


steps = {
    "data parallel, lax.pmean": compile_step(
        partial(data_parallel_step, reduce_mean=lambda g: lax.pmean(g, AXIS)), P()),
    "data parallel, jaxcoll ring allreduce": compile_step(
        partial(data_parallel_step, reduce_mean=lambda g: jaxcoll.allreduce(g, AXIS, op="mean", algorithm="ring")), P()),
    "ZeRO: reduce_scatter + allgather": compile_step(zero_step, P(AXIS)),
}
start_momentum = {name: np.zeros(padded_len if "ZeRO" in name else n_params, np.float32)
                  for name in steps}   # ZeRO: the (padded_len,) momentum, chunk r on rank r

results = {}
for name, step in steps.items():
    flat, momentum = flat_params, start_momentum[name]
    for _ in range(5):                                       # five training steps
        flat, momentum = step(flat, momentum, inputs, targets)
        flat.block_until_ready()
    results[name] = (flat, momentum)
    print(f"{name:>38}: loss {float(loss(flat, inputs.reshape(-1, features), targets.reshape(-1, outputs))):.5f}, "
          f"momentum held per rank: {momentum.addressable_shards[0].data.shape}")

# %% [markdown]
# Now check: the sharded step must give the same parameters as the unsharded one.

# %%
zero_params, zero_momentum = results["ZeRO: reduce_scatter + allgather"]
ring_params, ring_momentum = results["data parallel, jaxcoll ring allreduce"]
pmean_params, _ = results["data parallel, lax.pmean"]

# Against the data-parallel step with a ring AllReduce: bit for bit. The ring AllReduce's first
# half is the same ReduceScatter, so the averaged gradient has the same bits, and the update
# is elementwise.
np.testing.assert_array_equal(zero_params, ring_params)
np.testing.assert_array_equal(np.asarray(zero_momentum)[:n_params], ring_momentum)
# Against lax.pmean: XLA adds the 8 gradients in another order, so the last bits may differ.
np.testing.assert_allclose(zero_params, pmean_params, rtol=1e-5, atol=1e-6)
print("ZeRO step == data-parallel step with ring allreduce (bit for bit), "
      f"== lax.pmean step to {np.max(np.abs(np.asarray(zero_params) - np.asarray(pmean_params))):.1e}")

# The promise of out_specs=P() with check_vma=False: every rank holds the same parameters.
copies = [np.asarray(shard.data) for shard in zero_params.addressable_shards]
assert len(copies) == n and all(np.array_equal(c, copies[0]) for c in copies)

# The memory saving: each rank keeps 1/n of the momentum (padded up to whole chunks).
per_rank_zero = zero_momentum.addressable_shards[0].data.size
per_rank_plain = ring_momentum.addressable_shards[0].data.size
assert (per_rank_plain, per_rank_zero) == (n_params, chunk_size)
print(f"momentum floats kept per rank: data parallel {per_rank_plain}, ZeRO {per_rank_zero} "
      f"(= ceil({n_params} / {n}))")

# The communication: the same bytes as the AllReduce, as counted in section 6.
rs, ag, ar = (jaxcoll.schedule(p, "ring", n) for p in ("reduce_scatter", "allgather", "allreduce"))
nbytes = padded_len * 4                                      # float32
assert np.allclose(bytes_sent_per_rank(rs, nbytes) + bytes_sent_per_rank(ag, nbytes),
                   bytes_sent_per_rank(ar, nbytes))
print(f"bytes sent per rank per step: ZeRO {bytes_sent_per_rank(rs, nbytes)[0] + bytes_sent_per_rank(ag, nbytes)[0]:.0f} B"
      f", AllReduce {bytes_sent_per_rank(ar, nbytes)[0]:.0f} B")

# %% [markdown]
# Same parameters, the same bytes on the wire, and 1/n of the optimizer state and of the
# optimizer's arithmetic per rank. With Adam (two state vectors of the parameters' size, often
# in float32 next to bfloat16 parameters) that state is the bulk of training memory, which is
# why ZeRO shards it. FSDP / ZeRO stage 3 goes one step further and keeps only chunk i of the
# *parameters* between steps too, AllGathering each layer's parameters just before it is used.
#
# One thing sharding does cost: an optimizer step that looks *across* elements, such as
# clipping by the global gradient norm, no longer sees the whole gradient on any rank. That
# is the exercise.

# %% [markdown]
# ## Try it
#
# **Global gradient norm from the shards.** Gradient clipping needs
# ‖g‖ = sqrt(Σ g²) of the whole averaged gradient, but after the ReduceScatter rank i only
# has chunk i. Write `my_global_norm(grad_chunk)` (it runs on every rank, inside
# `shard_map`) so that every rank returns the norm of the whole averaged gradient.
#
# *Hint:* each rank can sum the squares of its own chunk; then one more collective, on a single
# number, combines the n partial sums (`jaxcoll.allreduce` or `lax.psum`). The zero padding
# adds nothing to the sum.
#
# <details><summary>Answer</summary>
#
# ```python
# def my_global_norm(grad_chunk):
#     return jnp.sqrt(jaxcoll.allreduce(jnp.sum(grad_chunk ** 2), AXIS))
# ```
# </details>

# %%
def my_global_norm(grad_chunk):                    # grad_chunk: (chunk_size,), this rank's chunk
    raise NotImplementedError("your code here")


def check_exercise(norm_fn):
    def per_rank(flat, x, y):
        grad = jax.grad(loss)(flat, x[0], y[0])
        grad_chunk = jaxcoll.reduce_scatter(pad(grad), AXIS, op="mean", tiled=True)
        return norm_fn(grad_chunk)[None]           # (1,): this rank's answer
    program = jax.jit(jax.shard_map(per_rank, mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS)),
                                    out_specs=P(AXIS), check_vma=False))
    try:
        got = np.asarray(program(flat_params, inputs, targets))          # (n,): one norm per rank
    except NotImplementedError:
        print("not done yet: fill in my_global_norm")
        return
    mean_grad = np.mean([jax.grad(loss)(flat_params, inputs[r], targets[r]) for r in range(n)], axis=0)
    np.testing.assert_allclose(got, np.full(n, np.linalg.norm(mean_grad)), rtol=1e-5)
    print("correct: every rank has the global gradient norm", got[0])


check_exercise(my_global_norm)
