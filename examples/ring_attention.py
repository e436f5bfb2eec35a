"""Ring attention on 8 fake CPU devices: exact softmax attention over a sequence sharded along
the mesh, K/V blocks passed round the ring by ``jaxcoll.allgather_fold``.

    python examples/ring_attention.py            # 8 ranks x 256 tokens: time and memory
    python examples/ring_attention.py --check    # causal and not, outputs and gradients
                                                 # against full attention on one device

Each rank holds its own block of queries, keys and values (Liu et al., "Ring Attention with
Blockwise Transformers", 2023). The keys and values travel round the ring; each rank folds
every arriving block into an online softmax (running max ``m``, normaliser ``l``, output
``o``, in float32, as flash attention does), so no rank ever holds the whole K/V: memory per
rank is O(local sequence) and the sequence can be n times longer than one device could hold.

The gradient is a ``custom_vjp`` made of two more folds: K/V pass round again for dQ, and the
query side (Q, dO and the softmax statistics) passes round for dK and dV, each rank adding
what its own keys owe. Causal masking uses each block's ``start``: a key at global position
``start + t`` is seen by queries at or after it. (Every rank computes every block, masked or
not: striped attention evens the causal load out; not done here.)
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import jaxcoll

AXIS = "sp"  # the sequence-parallel axis
CHECK_RTOL = 1e-5  # relative to the largest value: float32 rounding only


def _scores(q, k, q_start, k_start, causal: bool):
    """Scaled scores (q_rows, k_rows), -inf where a query may not see a key."""
    s = (q @ k.T) / jnp.sqrt(jnp.float32(q.shape[-1]))
    if not causal:
        return s
    q_pos = q_start + jnp.arange(q.shape[0])
    k_pos = k_start + jnp.arange(k.shape[0])
    return jnp.where(k_pos[None, :] <= q_pos[:, None], s, -jnp.inf)


def _forward(q, k, v, causal: bool, algorithm: str):
    """This rank's attention output and log-sum-exp of its scores, K/V folded as they arrive."""
    q_start = lax.axis_index(AXIS) * q.shape[0]

    def fold(acc, block, start):  # online softmax over one arriving K/V block
        m, l, o = acc  # (q_rows,), (q_rows,), (q_rows, d)
        s = _scores(q, block["k"], q_start, start, causal)  # (q_rows, k_rows)
        m_new = jnp.maximum(m, s.max(axis=1))
        shift = jnp.where(jnp.isfinite(m_new), m_new, 0)  # rows that have seen nothing yet
        p = jnp.exp(s - shift[:, None])
        rescale = jnp.exp(m - shift)
        return m_new, l * rescale + p.sum(axis=1), o * rescale[:, None] + p @ block["v"]

    rows, d = q.shape
    init = (jnp.full((rows,), -jnp.inf), jnp.zeros((rows,)), jnp.zeros((rows, d)))
    m, l, o = jaxcoll.allgather_fold({"k": k, "v": v}, AXIS, fold, init, algorithm=algorithm)
    return o / l[:, None], m + jnp.log(l)


@partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def ring_attention(q, k, v, causal: bool = False, algorithm: str = "ring"):
    """softmax(q k^T / sqrt(d)) v over the whole sequence, for this rank's block of queries;
    q, k, v: this rank's (rows, d) blocks, float32, inside shard_map over AXIS."""
    return _forward(q, k, v, causal, algorithm)[0]


def _ring_attention_fwd(q, k, v, causal, algorithm):
    out, lse = _forward(q, k, v, causal, algorithm)
    return out, (q, k, v, out, lse)


def _ring_attention_bwd(causal, algorithm, residuals, d_out):
    q, k, v, out, lse = residuals
    me = lax.axis_index(AXIS)
    delta = jnp.sum(d_out * out, axis=1)  # (q_rows,): softmax's backward term

    def d_query(dq, block, start):  # what one arriving K/V block gives dQ
        p = jnp.exp(_scores(q, block["k"], me * q.shape[0], start, causal) - lse[:, None])
        ds = p * (d_out @ block["v"].T - delta[:, None])
        return dq + ds @ block["k"] / jnp.sqrt(jnp.float32(q.shape[1]))

    def d_key_value(acc, block, start):  # what one arriving query block gives dK, dV
        dk, dv = acc
        p = jnp.exp(_scores(block["q"], k, start, me * k.shape[0], causal)
                    - block["lse"][:, None])  # (q_rows, k_rows)
        ds = p * (block["d_out"] @ v.T - block["delta"][:, None])
        return (dk + ds.T @ block["q"] / jnp.sqrt(jnp.float32(q.shape[1])),
                dv + p.T @ block["d_out"])

    dq = jaxcoll.allgather_fold({"k": k, "v": v}, AXIS, d_query, jnp.zeros_like(q),
                                algorithm=algorithm)
    queries = {"q": q, "d_out": d_out, "lse": lse, "delta": delta}
    dk, dv = jaxcoll.allgather_fold(queries, AXIS, d_key_value,
                                    (jnp.zeros_like(k), jnp.zeros_like(v)), algorithm=algorithm)
    return dq, dk, dv


ring_attention.defvjp(_ring_attention_fwd, _ring_attention_bwd)


def full_attention(q, k, v, causal: bool):
    """The reference: plain softmax attention over the whole sequence, on one device."""
    s = _scores(q, k, 0, 0, causal)
    return jax.nn.softmax(s, axis=1) @ v


def gathered_attention(q, k, v, causal: bool):
    """The unfused alternative: all_gather K and V (the whole sequence on every rank)."""
    k_all, v_all = (lax.all_gather(a, AXIS, tiled=True) for a in (k, v))
    return full_attention_block(q, k_all, v_all, causal)


def full_attention_block(q, k_all, v_all, causal: bool):
    s = _scores(q, k_all, lax.axis_index(AXIS) * q.shape[0], 0, causal)
    return jax.nn.softmax(s, axis=1) @ v_all


def _sharded(fn, mesh):
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)))


def _inputs(n_tokens: int, d: int, seed: int = 0):
    keys = jax.random.split(jax.random.key(seed), 4)
    q, k, v, cotangent = (jax.random.normal(key, (n_tokens, d), jnp.float32) for key in keys)
    return q, k, v, cotangent


def _relative_error(got, want) -> float:
    return float(jnp.max(jnp.abs(got - want)) / jnp.max(jnp.abs(want)))


def check(mesh: Mesh, tokens_per_rank: int = 32, d: int = 16) -> float:
    """Outputs and gradients of ring attention (both rings, causal and not) against full
    attention on one device; returns the worst relative error."""
    n = mesh.size
    q, k, v, cotangent = _inputs(n * tokens_per_rank, d)
    worst = 0.0
    for causal in (False, True):
        want, want_vjp = jax.vjp(partial(full_attention, causal=causal), q, k, v)
        want_grads = want_vjp(cotangent)
        for algorithm in ("ring", "bidirectional_ring"):
            ours = _sharded(partial(ring_attention, causal=causal, algorithm=algorithm), mesh)
            got, got_vjp = jax.vjp(ours, q, k, v)
            errors = [_relative_error(got, want)] + [
                _relative_error(a, b) for a, b in zip(got_vjp(cotangent), want_grads)]
            print(f"  causal={causal!s:5} {algorithm:18} relative error: out {errors[0]:.1e}, "
                  f"dq {errors[1]:.1e}, dk {errors[2]:.1e}, dv {errors[3]:.1e}")
            worst = max(worst, *errors)
    return worst


def check_memory(devices, tokens_per_rank: int = 256, d: int = 64) -> bool:
    """True if XLA's temporary memory per rank for ring attention (forward, and grad) is the
    same on 2 and on 8 ranks at the same tokens per rank (O(local sequence)), while gathering
    K/V grows with the whole sequence."""
    temps = {}
    for n in (2, 8):
        mesh = Mesh(np.array(devices[:n]), (AXIS,))
        q, k, v, _ = _inputs(n * tokens_per_rank, d)
        ring = _sharded(partial(ring_attention, causal=True), mesh)
        ring_grad = jax.jit(jax.grad(lambda q, k, v: jnp.sum(ring(q, k, v)), argnums=(0, 1, 2)))
        gathered = _sharded(partial(gathered_attention, causal=True), mesh)
        temps[n] = [_temp_bytes(fn, q, k, v) for fn in (ring, ring_grad, gathered)]
        print(f"  XLA temp per rank, {n} ranks x {tokens_per_rank} tokens, d = {d}: ring "
              f"attention {temps[n][0] / 1024:.0f} KiB (its grad {temps[n][1] / 1024:.0f} KiB), "
              f"gathered K/V {temps[n][2] / 1024:.0f} KiB")
    flat = all(temps[8][i] <= 1.1 * temps[2][i] for i in (0, 1))
    return flat and temps[8][2] > 2 * temps[2][2]


def _temp_bytes(fn, *args) -> int:
    return fn.lower(*args).compile().memory_analysis().temp_size_in_bytes


def demo(mesh: Mesh, tokens_per_rank: int, d: int, repeats: int) -> None:
    """Time and XLA's temporary memory per rank: ring attention against all_gather of K/V."""
    n = mesh.size
    q, k, v, _ = _inputs(n * tokens_per_rank, d)
    whole_kv = 2 * n * tokens_per_rank * d * 4
    print(f"{n} ranks x {tokens_per_rank} tokens, d = {d}, causal; the whole K and V: "
          f"{whole_kv / 1024:.0f} KiB per rank if gathered")
    programs = {"ring attention (jaxcoll.allgather_fold)":
                _sharded(partial(ring_attention, causal=True), mesh),
                "all_gather K/V, then attention":
                _sharded(partial(gathered_attention, causal=True), mesh)}
    for name, fn in programs.items():
        fn(q, k, v).block_until_ready()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn(q, k, v).block_until_ready()
            times.append(time.perf_counter() - start)
        print(f"  {name:42} {np.median(times) * 1e3:7.2f} ms (median of {repeats}), "
              f"XLA temp {_temp_bytes(fn, q, k, v) / 1024:7.0f} KiB per program")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare outputs and gradients with full attention, then exit")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per rank (demo)")
    parser.add_argument("--dim", type=int, default=64, help="head dimension (demo)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    jax.config.update("jax_num_cpu_devices", 8)
    mesh = Mesh(np.array(jax.devices()[:8]), (AXIS,))
    if args.check:
        worst = check(mesh)
        small = check_memory(jax.devices())
        ok = worst <= CHECK_RTOL and small
        print(f"check: ring attention {'matches' if ok else 'DIFFERS FROM'} full attention "
              f"(worst relative error {worst:.1e}, allowed {CHECK_RTOL:.0e}); memory per rank "
              f"{'does not grow' if small else 'GROWS'} with the number of ranks")
        return 0 if ok else 1
    demo(mesh, args.tokens, args.dim, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
