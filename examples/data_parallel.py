"""Data-parallel training of an MLP on 8 fake CPU devices, gradients averaged by jaxcoll.

    python examples/data_parallel.py            # train 300 steps, print the loss
    python examples/data_parallel.py --check    # 100 steps with jaxcoll and with lax.pmean:
                                                # the losses must agree (rtol 1e-5)
    python examples/data_parallel.py --compress int8 --check
        # 200 steps with gradients averaged in int8 (error feedback carried in the step's
        # state), without error feedback, and uncompressed: the compressed run's loss must be
        # within 1% of the uncompressed run's (mean of the last 20 steps); without feedback
        # the drift is shown, not checked

Every device holds the whole model and optimizer state (``in_specs=P()``) and 1/8 of each
batch (``P("dp")``). Inside one ``jax.jit(jax.shard_map(...))`` step it computes its gradients,
averages them (and the loss) over ``"dp"`` with one ``jaxcoll.ring_allreduce`` call, which is
what PyTorch DDP does for you, and applies the same optax update as every other device.
``check_vma=False`` so that ``jax.grad`` returns each device's own gradient (with the check
on, JAX sums the gradients of replicated parameters itself; docs/guide/typing.md). Needs optax
(``pip install -e ".[examples]"``).
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jaxcoll

AXIS = "dp"
SIZES = (32, 128, 128, 10)  # input, hidden, hidden, classes
CHECK_RTOL = 1e-5  # ring and psum add in different orders: float32 rounding only
COMPRESSED_RTOL = 0.01  # --compress --check: the final loss within 1% of the uncompressed


def init_params(key):
    """An MLP's weights and biases: a list of {"w": (fan_in, fan_out), "b": (fan_out,)}."""
    keys = jax.random.split(key, len(SIZES) - 1)
    return [{"w": jax.random.normal(k, (fan_in, fan_out)) / jnp.sqrt(fan_in),
             "b": jnp.zeros(fan_out)}
            for k, fan_in, fan_out in zip(keys, SIZES[:-1], SIZES[1:])]


def loss_fn(params, x, y):
    """Mean softmax cross-entropy of the MLP on a batch x: (batch, 32), y: (batch,) labels."""
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    logits = x @ params[-1]["w"] + params[-1]["b"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def batches(steps: int, batch: int, seed: int = 0):
    """``steps`` batches (x, y) of a fixed synthetic task: y = argmax(x @ teacher)."""
    rng = np.random.default_rng(seed)
    teacher = rng.normal(size=(SIZES[0], SIZES[-1]))
    for _ in range(steps):
        x = rng.normal(size=(batch, SIZES[0])).astype(np.float32)
        yield x, np.argmax(x @ teacher, axis=1).astype(np.int32)


def make_step(mesh, optimizer, average):
    """The jitted training step; ``average(tree)`` averages a pytree over ``AXIS``."""
    @jax.jit
    @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P(), P(AXIS), P(AXIS)),
             out_specs=(P(), P(), P()), check_vma=False)
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads, loss = average((grads, loss))  # one call: every leaf, one collective per bucket
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return step


def jaxcoll_mean(tree):
    return jaxcoll.ring_allreduce(tree, AXIS, op="mean")


def make_compressed_step(mesh, optimizer, compress: str, feedback: bool):
    """The training step with gradients averaged by a compressed allreduce; ``feedback``: what
    compression dropped on each device is carried in the step's state (one residual per device:
    a leading device axis, ``P(AXIS)``) and added to the next step's gradients."""
    @jax.jit
    @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P(), P(AXIS), P(AXIS), P(AXIS)),
             out_specs=(P(), P(), P(), P(AXIS)), check_vma=False)
    def step(params, opt_state, residual, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        loss = jaxcoll.allreduce(loss, AXIS, op="mean")
        mine = jax.tree.map(lambda r: r[0], residual)  # (1, ...) -> this device's residual
        if feedback:
            grads, mine = jaxcoll.allreduce_with_feedback(grads, mine, AXIS, compress=compress,
                                                          op="mean")
        else:
            grads = jaxcoll.allreduce(grads, AXIS, op="mean", compress=compress)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, loss,
                jax.tree.map(lambda r: r[None], mine))
    return step


def train_compressed(step, params, opt_state, mesh, steps: int, batch: int) -> list[float]:
    """The losses of ``steps`` steps of a compressed ``step``, its residuals starting at zero."""
    devices = mesh.size
    residual = jax.tree.map(lambda p: jnp.zeros((devices, *p.shape), jnp.float32), params)
    sharded = NamedSharding(mesh, P(AXIS))
    losses = []
    for x, y in batches(steps, batch):
        params, opt_state, loss, residual = step(params, opt_state, residual,
                                                 jax.device_put(x, sharded),
                                                 jax.device_put(y, sharded))
        losses.append(float(loss))  # waits for the step: see train()
    return losses


def check_compressed(args, mesh, optimizer, params, opt_state) -> bool:
    """--compress: train with feedback, without, and uncompressed; True if the final loss
    (mean of the last 20 steps) with feedback is within 1% of the uncompressed run's."""
    runs = {}
    for name, feedback in (("with error feedback", True), ("without error feedback", False)):
        began = time.perf_counter()
        step = make_compressed_step(mesh, optimizer, args.compress, feedback)
        runs[name] = train_compressed(step, params, opt_state, mesh, args.steps, args.batch)
        print(f"{args.compress}, {name}: final loss {np.mean(runs[name][-20:]):.4f} "
              f"({time.perf_counter() - began:.1f} s)")
    runs["uncompressed"], _ = train(make_step(mesh, optimizer, jaxcoll_mean), params, opt_state,
                                    mesh, args.steps, args.batch)
    final = {name: float(np.mean(losses[-20:])) for name, losses in runs.items()}
    print(f"uncompressed: final loss {final['uncompressed']:.4f}")
    drift = {name: abs(final[name] - final["uncompressed"]) / final["uncompressed"]
             for name in runs if name != "uncompressed"}
    for name, value in drift.items():
        print(f"  {name}: {100 * value:.2f}% from the uncompressed run's loss")
    ok = drift["with error feedback"] <= COMPRESSED_RTOL
    print(f"check: {args.compress} with error feedback "
          f"{'is' if ok else 'is NOT'} within {100 * COMPRESSED_RTOL:g}% of the uncompressed "
          f"loss after {args.steps} steps")
    return ok


def pmean(tree):
    return lax.pmean(tree, AXIS)


def train(step, params, opt_state, mesh, steps: int, batch: int) -> tuple[list[float], list]:
    """The losses of ``steps`` steps of ``step`` from (params, opt_state), and the params.

    Each step is waited for before the next is dispatched: with several steps in flight,
    jaxlib 0.10's CPU runtime (fake devices) sometimes leaves one device out of a collective's
    rendezvous and aborts the process after 40 s.
    """
    sharded = NamedSharding(mesh, P(AXIS))
    losses = []
    for x, y in batches(steps, batch):
        params, opt_state, loss = step(params, opt_state, jax.device_put(x, sharded),
                                       jax.device_put(y, sharded))
        losses.append(float(loss))  # waits for the step: see the note above
    return losses, params


def start(devices: int):
    """(mesh, optimizer, params, opt_state) on ``devices`` fake CPU devices."""
    jax.config.update("jax_num_cpu_devices", devices)
    mesh = Mesh(np.array(jax.devices()[:devices]), (AXIS,))
    optimizer = optax.adam(1e-3)
    params = init_params(jax.random.key(0))
    return mesh, optimizer, params, optimizer.init(params)


def print_losses(losses: list[float], seconds: float, what: str) -> None:
    for i in range(0, len(losses), max(1, len(losses) // 10)):
        print(f"step {i:4d}  loss {losses[i]:.4f}")
    print(f"step {len(losses) - 1:4d}  loss {losses[-1]:.4f}  ({seconds:.1f} s, {what})")


def check_losses(losses: list[float], reference: list[float], what: str) -> None:
    """Assert the losses agree with the reference's within CHECK_RTOL; say by how much."""
    np.testing.assert_allclose(losses, reference, rtol=CHECK_RTOL)
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, reference))
    print(f"check: {len(losses)} losses agree with {what} (largest relative difference "
          f"{worst:.2g}, tolerance {CHECK_RTOL:g})")


def arguments(argv, description: str, compress: bool = False):
    parser = argparse.ArgumentParser(description=description)
    if compress:
        parser.add_argument("--compress", choices=["bf16", "fp8", "int8"],
                            help="average the gradients compressed, with error feedback "
                                 "(--check: 200 steps against the uncompressed run)")
    parser.add_argument("--check", action="store_true",
                        help="100 steps, also with the reference; assert the losses agree")
    parser.add_argument("--steps", type=int, default=None, help="default: 300, --check 100")
    parser.add_argument("--batch", type=int, default=256, help="global batch")
    parser.add_argument("--devices", type=int, default=8)
    args = parser.parse_args(argv)
    compressed_check = args.check and getattr(args, "compress", None)
    args.steps = args.steps or (200 if compressed_check else 100 if args.check else 300)
    return args


def compare(args, mesh, params, ours: tuple, reference: tuple, what: str, against: str):
    """Train ``ours`` = (step, optimizer state) from ``params`` and print its losses; with
    ``--check`` train ``reference`` too and check the losses agree. Both final params (the
    reference's None without ``--check``)."""
    (step, state), (reference_step, reference_state) = ours, reference
    began = time.perf_counter()
    losses, final = train(step, params, state, mesh, args.steps, args.batch)
    print_losses(losses, time.perf_counter() - began, f"{args.devices} devices, {what}")
    if not args.check:
        return final, None
    expected, final_reference = train(reference_step, params, reference_state, mesh,
                                      args.steps, args.batch)
    check_losses(losses, expected, against)
    return final, final_reference


def main(argv=None) -> int:
    args = arguments(argv, __doc__.splitlines()[0], compress=True)
    mesh, optimizer, params, opt_state = start(args.devices)
    if args.compress and args.check:
        return 0 if check_compressed(args, mesh, optimizer, params, opt_state) else 1
    if args.compress:
        began = time.perf_counter()
        step = make_compressed_step(mesh, optimizer, args.compress, feedback=True)
        losses = train_compressed(step, params, opt_state, mesh, args.steps, args.batch)
        print_losses(losses, time.perf_counter() - began,
                     f"{args.devices} devices, {args.compress} with error feedback")
        return 0
    compare(args, mesh, params, (make_step(mesh, optimizer, jaxcoll_mean), opt_state),
            (make_step(mesh, optimizer, pmean), opt_state), "jaxcoll ring allreduce",
            "lax.pmean's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
