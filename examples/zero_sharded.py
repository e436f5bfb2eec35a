"""A ZeRO-2 style step (sharded gradients and optimizer state) with jaxcoll, on 8 fake CPU devices.

    python examples/zero_sharded.py            # train 300 steps, print the loss
    python examples/zero_sharded.py --check    # 100 steps, also unsharded (lax.pmean + the
                                               # whole optax update): losses and final
                                               # parameters must agree (rtol 1e-5)

The model, data and unsharded step are examples/data_parallel.py's. Every device holds the
whole parameters for the forward and backward pass, but only its 1/n of the optimizer state.
In one jitted step each device:

1. computes its gradients on its part of the batch;
2. ``reduce_scatter``s them (op="mean"): every leaf flattened and zero-padded to a multiple of
   n, so device i gets the mean gradient of block i of every leaf, half of an allreduce's
   traffic;
3. updates block i of the parameters with optax (Adam is elementwise, so updating blocks is
   the same as updating the whole);
4. ``allgather``s the updated blocks (and the losses) back into whole parameters, the other
   half of the allreduce's traffic.

FSDP (ZeRO-3) would also keep only the blocks of the parameters between steps and gather
them before each use. Optimizers that look across elements (``clip_by_global_norm``, ...)
need a collective of their own on the shards.
"""

from __future__ import annotations

import sys
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import PartitionSpec as P

import jaxcoll
from data_parallel import (AXIS, CHECK_RTOL, arguments, compare, loss_fn, make_step, pmean,
                           start)


def padded(leaf, n: int):
    """The leaf flattened and zero-padded to a multiple of n: (n * block,)."""
    flat = leaf.reshape(-1)  # (size,)
    return jnp.pad(flat, (0, -flat.size % n))


def unpadded(flat, like):
    """``padded``'s inverse: (n * block,) -> like.shape."""
    return flat[:like.size].reshape(like.shape)


def my_block(leaf, n: int):
    """This device's block of ``padded(leaf)``: (block,)."""
    flat = padded(leaf, n)
    block = flat.size // n
    return lax.dynamic_slice_in_dim(flat, lax.axis_index(AXIS) * block, block)


def sharded_state(optimizer, params, n: int):
    """The optimizer state of the padded parameters, and its specs: blocks of every vector
    (P(AXIS)), scalars such as Adam's step count on every device (P())."""
    state = optimizer.init(jax.tree.map(lambda p: padded(p, n), params))
    return state, jax.tree.map(lambda s: P(AXIS) if s.ndim else P(), state)


def make_zero_step(mesh, optimizer, state_specs):
    """The jitted ZeRO-2 step: (params, state blocks, x, y) -> (params, state blocks, loss)."""
    n = mesh.size

    @jax.jit
    @partial(jax.shard_map, mesh=mesh, in_specs=(P(), state_specs, P(AXIS), P(AXIS)),
             out_specs=(P(), state_specs, P()), check_vma=False)
    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grad_blocks = jaxcoll.ring_reduce_scatter(jax.tree.map(lambda g: padded(g, n), grads),
                                                  AXIS, op="mean", tiled=True)  # (block,) each
        param_blocks = jax.tree.map(lambda p: my_block(p, n), params)
        updates, state = optimizer.update(grad_blocks, state, param_blocks)
        new_blocks = optax.apply_updates(param_blocks, updates)
        # The blocks come first: the allgather waits for the reduce_scatter (jaxlib 0.10:
        # docs/guide/typing.md)
        flat, losses = jaxcoll.ring_allgather((new_blocks, loss[None]), AXIS, tiled=True)
        return jax.tree.map(unpadded, flat, params), state, losses.mean()  # losses: (n,)
    return step


def main(argv=None) -> int:
    args = arguments(argv, __doc__.splitlines()[0])
    mesh, optimizer, params, opt_state = start(args.devices)
    state, specs = sharded_state(optimizer, params, mesh.size)
    final, unsharded = compare(
        args, mesh, params, (make_zero_step(mesh, optimizer, specs), state),
        (make_step(mesh, optimizer, pmean), opt_state),
        "ZeRO-2: jaxcoll ring reduce_scatter + allgather", "the unsharded step's")
    if args.check:
        for got, want in zip(jax.tree.leaves(final), jax.tree.leaves(unsharded)):
            np.testing.assert_allclose(got, want, rtol=CHECK_RTOL, atol=1e-6)
        print("check: the final parameters agree with the unsharded step's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
