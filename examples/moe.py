"""A mixture-of-experts layer with top-k routing on 8 fake CPU devices, its tokens dispatched and
combined by jaxcoll.ragged_alltoall.

    python examples/moe.py            # one layer: tokens per expert, bytes moved, the output
    python examples/moe.py --check    # output and gradients (input, router, experts) equal a
                                      # one-device reference, with naive and bruck alltoalls

Expert parallelism as in GShard and Switch Transformer, without their capacity: each device
holds T tokens and E/n experts. A router scores the E experts for every token and keeps the top
k; each device sorts its T·k (token, expert) pairs by expert, so expert e's tokens are one
slice of rows, and ``ragged_alltoall`` sends slice e to the device that holds expert e (its
size known only at run time). The receiver groups the rows by its experts, applies them, and a
second ``ragged_alltoall`` with the roles swapped brings every row home, where each token sums
its k answers weighted by the router's gates. No token is dropped: the output buffer holds the
worst case (every token of every device to one device).
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

import jaxcoll

AXIS = "ep"
TOKENS, WIDTH, HIDDEN, EXPERTS, TOP_K = 16, 8, 16, 16, 2  # per device; experts in all


def route(x, router):
    """Top-k experts of each token and their gates (softmax over the k kept scores)."""
    scores, experts = jax.lax.top_k(x @ router, TOP_K)  # (T, k) each
    return experts, jax.nn.softmax(scores, axis=-1)


def expert_mlp(x, w_in, w_out):
    return jax.nn.gelu(x @ w_in) @ w_out


def reference(x, router, w_in, w_out):
    """Every device's tokens on one device: each token's k experts, weighted by its gates."""
    experts, gates = route(x, router)  # x: (all tokens, D)
    answer = lambda token, e: expert_mlp(token, w_in[e], w_out[e])
    answers = jax.vmap(jax.vmap(answer, (None, 0)))(x, experts)  # (T, k, D)
    return jnp.einsum("tk,tkd->td", gates, answers)


def exclusive_cumsum(sizes, axis=-1):
    return jnp.cumsum(sizes, axis=axis) - sizes


def moe_layer(x, router, w_in, w_out, *, n: int, algorithm: str):
    """One device's part: x (T, D) its tokens; w_in, w_out its E/n experts' weights."""
    local = EXPERTS // n
    me = jax.lax.axis_index(AXIS)
    experts, gates = route(x, router)
    order = jnp.argsort(experts.reshape(-1), stable=True)  # (T·k,): pairs sorted by expert
    token = order // TOP_K
    counts = jnp.bincount(experts.reshape(-1), length=EXPERTS)  # (E,): my rows per expert
    every = jaxcoll.allgather(counts, AXIS, algorithm=algorithm)  # (n, E): everyone's counts
    # on device d, rows arrive grouped by expert, then by source: rows[d][j][s] = every[s, d·L+j]
    rows = every.reshape(n, n, local).transpose(1, 2, 0)  # (d, j, s)
    place = exclusive_cumsum(rows.reshape(n, -1)).reshape(n, local, n)  # where (j, s) starts
    mine = rows[me]  # (j, s): the sizes I receive
    dispatch = dict(input_offsets=exclusive_cumsum(counts), send_sizes=counts,
                    output_offsets=place[:, :, me].reshape(-1),  # my slice (d, j) lands there
                    recv_sizes=mine.T.reshape(-1))  # slice s·L + j: from s, for expert j
    buffer = jnp.zeros((n * TOKENS * TOP_K, WIDTH), x.dtype)  # the worst case: no drops
    received = jaxcoll.ragged_alltoall(x[token], buffer, axis=AXIS, algorithm=algorithm,
                                       **dispatch)
    # each received row's expert: rows of local expert j fill [start_j, start_j + size_j)
    size = mine.sum(axis=1)  # (j,)
    row_expert = jnp.searchsorted(jnp.cumsum(size), jnp.arange(buffer.shape[0]), side="right")
    row_expert = jnp.minimum(row_expert, local - 1)
    answers = jax.vmap(expert_mlp)(received, w_in[row_expert], w_out[row_expert])
    combine = dict(input_offsets=place[me].T.reshape(-1), send_sizes=mine.T.reshape(-1),
                   output_offsets=exclusive_cumsum(every).reshape(n, n, local)[:, me].reshape(-1),
                   recv_sizes=counts)  # the dispatch with the roles swapped
    back = jaxcoll.ragged_alltoall(answers, jnp.zeros((TOKENS * TOP_K, WIDTH), x.dtype),
                                   axis=AXIS, algorithm=algorithm, **combine)
    weighted = back * gates.reshape(-1)[order][:, None]  # row i: pair order[i]
    return jnp.zeros_like(x).at[token].add(weighted)


def build(mesh, algorithm: str):
    """jit(shard_map) of the layer: tokens and experts sharded over the devices, router shared."""
    layer = partial(moe_layer, n=mesh.size, algorithm=algorithm)
    return jax.jit(jax.shard_map(layer, mesh=mesh, in_specs=(P(AXIS), P(), P(AXIS), P(AXIS)),
                                 out_specs=P(AXIS)))


def inputs(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
    return (normal(n * TOKENS, WIDTH), normal(WIDTH, EXPERTS) * 2,
            normal(EXPERTS, WIDTH, HIDDEN) / WIDTH ** 0.5,
            normal(EXPERTS, HIDDEN, WIDTH) / HIDDEN ** 0.5)


def check(mesh) -> bool:
    """Output and gradients of a loss equal the one-device reference's, for both algorithms."""
    args = inputs(mesh.size)
    loss = lambda layer: lambda *a: jnp.sum(jnp.sin(layer(*a)))
    want = reference(*args)
    want_grads = jax.grad(loss(reference), argnums=(0, 1, 2, 3))(*args)
    ok = True
    for algorithm in ("naive", "bruck"):
        layer = build(mesh, algorithm)
        out_error = float(jnp.max(jnp.abs(layer(*args) - want)))
        grads = jax.grad(loss(layer), argnums=(0, 1, 2, 3))(*args)
        grad_error = max(float(jnp.max(jnp.abs(g - w))) for g, w in zip(grads, want_grads))
        good = out_error <= 1e-5 and grad_error <= 1e-4
        ok &= good
        print(f"{algorithm}: output max error {out_error:.1e}, gradients (x, router, w_in, "
              f"w_out) max error {grad_error:.1e}: {'ok' if good else 'MISMATCH'}")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with a one-device "
                        "reference (output and gradients) and exit 1 on a mismatch")
    args = parser.parse_args(argv)
    mesh = Mesh(np.array(jax.devices()), (AXIS,))
    if mesh.size != 8 or EXPERTS % mesh.size:
        print("needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8")
        return 1
    if args.check:
        return 0 if check(mesh) else 1
    x, router, *_ = data = inputs(mesh.size)
    experts, _ = route(x, router)
    per_device = np.bincount(np.asarray(experts).reshape(-1) // (EXPERTS // mesh.size),
                             minlength=mesh.size)
    print("rows per device (of", TOKENS * TOP_K, "each sends):", per_device.tolist())
    slots = jaxcoll.ragged.padded_bytes(jnp.zeros((TOKENS * TOP_K, WIDTH)),
                                        jnp.zeros((mesh.size * TOKENS * TOP_K, WIDTH)), EXPERTS)
    print(f"dispatch: {per_device.sum() * WIDTH * 4 // mesh.size} B of tokens per device on "
          f"average, in static slots of {slots} B")
    print("output[:2]:", np.asarray(build(mesh, "bruck")(*data)[:2]).round(3))
    return 0


if __name__ == "__main__":
    jax.config.update("jax_num_cpu_devices", 8)
    sys.exit(main())
