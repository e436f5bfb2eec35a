"""Whole-step compile benchmark (not a test): a data-parallel training step of a 12-layer
transformer LM (148 parameter leaves; loss, grad, gradient mean over ranks, optax AdamW) under
``jax.jit(jax.shard_map(...))``, its gradients averaged by ``lax.pmean`` or by
``jaxcoll.allreduce(op="mean")``; trace, lower and compile seconds and the step's run time.

    JAXCOLL_CALIBRATE=0 python bench/compile_step.py [--repeats 3] [--algorithms ring,auto]

Every program is new: a fresh function whose learning rate is a constant of its own, so no
cache (JAX's in-memory ones, or a persistent one, which must be off) can hand back an earlier
compile. The variants alternate (A B C, A B C, ...); medians; ``/ pmean`` is the compile time
(wall clock, and the process' CPU time, steadier on a shared machine) and the total (trace +
lower + compile) over pmean's; ``step ms`` is one compiled step's run time. ``JAXCOLL_CALIBRATE=0``: ``auto`` reads the shipped calibration
instead of timing anything.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time

AXIS = "dp"
VOCAB, WIDTH, HEADS, LAYERS, SEQ, BATCH = 256, 64, 4, 12, 32, 2  # BATCH sequences per rank


def init_params(key) -> dict:
    """A pre-norm transformer LM: embeddings, LAYERS blocks of 12 leaves, a final norm (148)."""
    import jax
    import jax.numpy as jnp

    def dense(key, fan_in, fan_out):
        return {"w": jax.random.normal(key, (fan_in, fan_out)) / jnp.sqrt(fan_in),
                "b": jnp.zeros(fan_out)}

    def norm():
        return {"scale": jnp.ones(WIDTH), "bias": jnp.zeros(WIDTH)}

    keys = iter(jax.random.split(key, 2 + 4 * LAYERS))
    blocks = [{"norm1": norm(), "qkv": dense(next(keys), WIDTH, 3 * WIDTH),
               "out": dense(next(keys), WIDTH, WIDTH), "norm2": norm(),
               "up": dense(next(keys), WIDTH, 4 * WIDTH), "down": dense(next(keys), 4 * WIDTH, WIDTH)}
              for _ in range(LAYERS)]
    return {"embed": jax.random.normal(next(keys), (VOCAB, WIDTH)) * 0.02,
            "position": jax.random.normal(next(keys), (SEQ, WIDTH)) * 0.02,
            "blocks": blocks, "final": norm()}


def loss_fn(params, tokens):
    """Mean next-token cross-entropy of the LM on (batch, SEQ + 1) tokens (causal attention)."""
    import jax
    import jax.numpy as jnp
    import optax

    def normed(x, p):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["bias"]

    def dense(x, p):
        return x @ p["w"] + p["b"]

    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    x = params["embed"][inputs] + params["position"]  # (batch, SEQ, WIDTH)
    causal = jnp.tril(jnp.ones((SEQ, SEQ), bool))
    for block in params["blocks"]:
        q, k, v = jnp.split(dense(normed(x, block["norm1"]), block["qkv"]), 3, axis=-1)
        q, k, v = (a.reshape(*a.shape[:-1], HEADS, WIDTH // HEADS) for a in (q, k, v))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(WIDTH // HEADS)
        attention = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
        mixed = jnp.einsum("bhqk,bkhd->bqhd", attention, v).reshape(x.shape)
        x = x + dense(mixed, block["out"])
        x = x + dense(jax.nn.gelu(dense(normed(x, block["norm2"]), block["up"])), block["down"])
    logits = normed(x, params["final"]) @ params["embed"].T  # (batch, SEQ, VOCAB)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def averages(algorithms: list[str]) -> dict:
    """name -> average(tree) over AXIS: lax.pmean and jaxcoll's allreduce(op="mean")."""
    import jaxcoll
    from jax import lax

    found = {"pmean": lambda tree: lax.pmean(tree, AXIS)}
    for algorithm in algorithms:
        found[f"jaxcoll {algorithm}"] = (
            lambda tree, a=algorithm: jaxcoll.allreduce(tree, AXIS, op="mean", algorithm=a))
    return found


def make_step(mesh, average, learning_rate: float):
    """A new jitted data-parallel step: grads on this rank's batch, averaged, AdamW."""
    import jax
    import optax
    from jax.sharding import PartitionSpec as P

    optimizer = optax.adamw(learning_rate)

    def step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        grads = average(grads)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss[None]

    return jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P(), P(), P(AXIS)),
                                 out_specs=(P(), P(), P(AXIS)), check_vma=False)), optimizer


def measure(mesh, average, learning_rate: float, args, run_iters: int):
    """(trace s, lower s, compile s, compile CPU s, step run s) of one fresh program."""
    import jax

    program, optimizer = make_step(mesh, average, learning_rate)
    params, tokens = args
    opt_state = optimizer.init(params)
    start = time.perf_counter()
    traced = program.trace(params, opt_state, tokens)
    traced_at = time.perf_counter()
    lowered = traced.lower()
    lowered_at, cpu_at = time.perf_counter(), time.process_time()
    compiled = lowered.compile()
    done, cpu_done = time.perf_counter(), time.process_time()
    jax.block_until_ready(compiled(params, opt_state, tokens))  # warm-up
    runs = []
    for _ in range(run_iters):
        begin = time.perf_counter()
        jax.block_until_ready(compiled(params, opt_state, tokens))
        runs.append(time.perf_counter() - begin)
    return (traced_at - start, lowered_at - traced_at, done - lowered_at, cpu_done - cpu_at,
            statistics.median(runs) if runs else float("nan"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default="ring,auto",
                        help="comma-separated jaxcoll allreduce algorithms (default: ring,auto)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--run-iters", type=int, default=10,
                        help="timed calls of each compiled step (median)")
    parser.add_argument("--devices", type=int, default=8)
    args = parser.parse_args(argv)

    import jax
    jax.config.update("jax_num_cpu_devices", args.devices)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    if jax.config.jax_compilation_cache_dir:
        raise SystemExit("compile_step: a persistent compilation cache is set "
                         f"({jax.config.jax_compilation_cache_dir}); unset it to measure")
    mesh = Mesh(np.array(jax.devices()[:args.devices]), (AXIS,))
    params = init_params(jax.random.key(0))
    tokens = jax.device_put(
        jax.random.randint(jax.random.key(1), (args.devices * BATCH, SEQ + 1), 0, VOCAB),
        NamedSharding(mesh, P(AXIS)))
    leaves = jax.tree.leaves(params)
    print(f"# transformer LM: {len(leaves)} leaves, "
          f"{sum(leaf.size for leaf in leaves) * 4 / 2**20:.2f} MiB of float32 parameters; "
          f"{args.devices} devices, jax {jax.__version__}, optax adamw, medians of "
          f"{args.repeats} fresh compiles (alternating) and of {args.run_iters} runs each")
    variants = averages(args.algorithms.split(","))
    times = {name: [] for name in variants}
    rates = itertools.count(1)
    for _ in range(args.repeats):
        for name, average in variants.items():
            times[name].append(measure(mesh, average, 1e-3 * (1 + next(rates) * 1e-6),
                                       (params, tokens), args.run_iters))
    print(f"{'average':<16} {'trace s':>8} {'lower s':>8} {'compile s':>9} {'(CPU s)':>8} "
          f"{'total s':>8} {'compile / pmean':>15} {'(CPU)':>6} {'total / pmean':>13} "
          f"{'step ms':>8}")
    base = None
    for name, samples in times.items():
        trace, lower, compile_, cpu, run = (statistics.median(t) for t in zip(*samples))
        total = trace + lower + compile_
        base = base or (compile_, cpu, total)
        print(f"{name:<16} {trace:8.2f} {lower:8.2f} {compile_:9.2f} {cpu:8.2f} {total:8.2f} "
              f"{compile_ / base[0]:15.2f} {cpu / base[1]:6.2f} {total / base[2]:13.2f} "
              f"{run * 1e3:8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
