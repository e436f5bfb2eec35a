"""Compile-time benchmark (not a test): trace, lower and compile seconds of a collective over a
gradient pytree shaped like ResNet-50's (161 leaves), jaxcoll beside ``lax.psum`` in one
process, forward and ``jax.grad``.

    python bench/compile.py [--repeats 3] [--algorithms ring,recursive_doubling] [--leaves 161]

Each program is built anew for every repeat (a new function: no cache of JAX's is reused) and
lowered from shapes alone (``jax.ShapeDtypeStruct``), so nothing is allocated or run; medians.
The ratio column is the total (trace + lower + compile) over psum's for the same pass.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from training import resnet50_shapes  # noqa: E402  (bench/training.py)

AXIS = "dp"


def _programs(algorithms: list[str]):
    """name -> collective(tree) for the tree of one rank."""
    import jaxcoll
    from jax import lax

    programs = {"psum (per leaf)": lambda tree: lax.psum(tree, AXIS)}
    for algorithm in algorithms:
        programs[f"jaxcoll {algorithm}"] = (
            lambda tree, a=algorithm: jaxcoll.allreduce(tree, AXIS, algorithm=a))
    return programs


def _step(collective, mesh, grad: bool):
    """A new jit(shard_map) of the collective over the tree (or of the grad of a loss of it)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    def body(tree):
        mine = jax.tree.map(lambda a: a[0], tree)
        out = collective(mine)
        return jax.tree.map(lambda y: y[None], out)

    spmd = jax.shard_map(body, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS))
    if not grad:
        return jax.jit(spmd)

    def loss(tree):
        return sum(jnp.sum(jnp.sin(leaf)) for leaf in jax.tree.leaves(spmd(tree)))
    return jax.jit(jax.grad(loss))


def measure(collective, mesh, tree, grad: bool) -> tuple[float, float, float]:
    """(trace, lower, compile) seconds of one fresh program."""
    program = _step(collective, mesh, grad)
    start = time.perf_counter()
    traced = program.trace(tree)
    traced_at = time.perf_counter()
    lowered = traced.lower()
    lowered_at = time.perf_counter()
    lowered.compile()
    done = time.perf_counter()
    return traced_at - start, lowered_at - traced_at, done - lowered_at


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default="ring",
                        help="comma-separated jaxcoll allreduce algorithms (default: ring)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--leaves", type=int, default=161,
                        help="use the first LEAVES of ResNet-50's 161 shapes")
    parser.add_argument("--devices", type=int, default=8)
    args = parser.parse_args(argv)

    import jax
    jax.config.update("jax_num_cpu_devices", args.devices)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:args.devices]), (AXIS,))
    where = NamedSharding(mesh, P(AXIS))
    shapes = resnet50_shapes()[:args.leaves]
    tree = [jax.ShapeDtypeStruct((args.devices, *s), jnp.float32, sharding=where)
            for s in shapes]
    print(f"# {len(shapes)} leaves, {sum(np.prod(s) for s in shapes) * 4 / 2**20:.1f} MiB per "
          f"rank, {args.devices} devices, jax {jax.__version__}, medians of {args.repeats}")
    print(f"{'program':<28} {'pass':<8} {'trace s':>8} {'lower s':>8} {'compile s':>9} "
          f"{'total s':>8} {'/ psum':>7}")
    for grad in (False, True):
        baseline = None
        for name, collective in _programs(args.algorithms.split(",")).items():
            times = [measure(collective, mesh, tree, grad) for _ in range(args.repeats)]
            trace, lower, compile_ = (statistics.median(t) for t in zip(*times))
            total = trace + lower + compile_
            baseline = baseline or total
            print(f"{name:<28} {'grad' if grad else 'forward':<8} {trace:8.2f} {lower:8.2f} "
                  f"{compile_:9.2f} {total:8.2f} {total / baseline:7.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
