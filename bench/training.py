"""Training-step benchmarks on fake CPU devices (not a test): bucketing, mixed precision, grads.

    python bench/training.py

1. **Bucketing.** A pytree shaped like ResNet-50's gradients (161 leaves, 25.6M float32
   values, ``resnet50_shapes``) is summed over 8 devices: by ``lax.psum`` over the tree (one
   XLA all-reduce), by one ``jaxcoll.ring_allreduce`` call with 25 MiB buckets (the default),
   one bucket, 4 MiB and 1 MiB buckets, and by one ring allreduce per leaf. The programs run
   in alternation (``jaxcoll.bench.time_alternating``); medians. Inputs are small integers,
   so every result must equal psum's bit for bit.
2. **Mixed precision.** Random normal bfloat16 data (8 ranks, ``--accuracy-count`` values
   each) summed by the ring and by psum, in bfloat16 and with ``accum_dtype=float32``: max
   and mean absolute error against the float64 sum of the same bfloat16 values.
3. **Gradient rule.** Compile and run time of ``jax.grad`` through a ring allreduce, with
   JAX's automatic transpose of the executor and with a ``custom_vjp`` whose backward pass is
   another ring allreduce of the cotangent.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

AXIS = "dp"


def resnet50_shapes() -> list[tuple[int, ...]]:
    """The parameter shapes of ResNet-50 (v1.5, HWIO kernels, batch-norm scale and bias), in
    the order of the network: stem, 16 bottleneck blocks of stages (3, 4, 6, 3), fc."""
    shapes = [(7, 7, 3, 64), (64,), (64,)]
    in_channels = 64
    for blocks, width in ((3, 64), (4, 128), (6, 256), (3, 512)):
        for block in range(blocks):
            for kernel in ((1, 1, in_channels, width), (3, 3, width, width),
                           (1, 1, width, 4 * width)):
                shapes += [kernel, (kernel[-1],), (kernel[-1],)]
            if block == 0:  # projection shortcut
                shapes += [(1, 1, in_channels, 4 * width), (4 * width,), (4 * width,)]
            in_channels = 4 * width
    return shapes + [(2048, 1000), (1000,)]


def _spmd(mesh, fn):
    """jit(shard_map(fn)) over the mesh's one axis; arguments and results have a leading
    rank axis, which ``fn`` does not see."""
    import jax
    from jax.sharding import PartitionSpec as P

    def body(x):
        out = fn(jax.tree.map(lambda a: a[0], x))
        return jax.tree.map(lambda y: y[None], out)
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)))


def _ready(program):
    """``program``, returning one array that is ready once all its results are."""
    import jax
    return lambda x: jax.tree.leaves(jax.block_until_ready(program(x)))[-1]


def _compiled(programs: dict, x) -> dict:
    """Each program compiled (and timed doing it): name -> (call, seconds)."""
    compiled = {}
    for name, program in programs.items():
        start = time.perf_counter()
        executable = program.lower(x).compile()
        compiled[name] = (executable, time.perf_counter() - start)
    return compiled


def _check(compiled: dict, x, baseline: str) -> None:
    """Every compiled program's results equal ``baseline``'s, bit for bit."""
    want = [np.asarray(v) for v in compiled[baseline][0](x)]
    for name, (program, _) in compiled.items():
        wrong = sum(int(np.sum(np.asarray(g) != w)) for g, w in zip(program(x), want))
        assert wrong == 0, f"{name}: {wrong} elements differ from {baseline}"


def _timed(compiled: dict, x, iters: int) -> None:
    """Time compiled programs in alternation; print a table (ratios to the first)."""
    from jaxcoll.bench import time_alternating

    times = time_alternating({k: _ready(call) for k, (call, _) in compiled.items()}, x, iters)
    first = statistics.median(times[next(iter(compiled))])
    print(f"  {'program':<28}{'compile (s)':>12}{'median (ms)':>13}{'min (ms)':>10}"
          f"{'/ first':>10}")
    for name, (_, compile_s) in compiled.items():
        median = statistics.median(times[name])
        print(f"  {name:<28}{compile_s:>12.1f}{median * 1e3:>13.1f}"
              f"{min(times[name]) * 1e3:>10.1f}{median / first:>10.2f}")


def bucketing(mesh, iters: int) -> None:
    """Part 1: the ResNet-50 gradient tree, bucketed vs per leaf vs psum."""
    import jax
    from jax import lax
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jaxcoll
    from jaxcoll.execute import in_sequence

    n = mesh.size
    shapes = resnet50_shapes()
    count = sum(int(np.prod(s)) for s in shapes)
    print(f"1. ResNet-50 gradients: {len(shapes)} leaves, {count / 1e6:.2f}M float32 "
          f"({count * 4 / 2**20:.1f} MiB) per rank, {n} ranks, {iters} alternating calls")
    rng = np.random.default_rng(0)
    sharding = NamedSharding(mesh, P(AXIS))
    x = [jax.device_put(rng.integers(-8, 9, size=(n, *s)).astype(np.float32), sharding)
         for s in shapes]
    programs = {"psum (xla, tree)": _spmd(mesh, lambda g: lax.psum(g, AXIS))}
    for mib in (25, None, 4, 1):
        name = f"ring, {mib} MiB buckets" if mib else "ring, one bucket"
        programs[name] = _spmd(mesh, lambda g, mib=mib: jaxcoll.ring_allreduce(
            g, AXIS, bucket_bytes=mib and mib * 2**20))
    programs["ring per leaf"] = _spmd(mesh, lambda g: in_sequence(
        lambda leaf: jaxcoll.ring_allreduce(leaf, AXIS), g))
    compiled = _compiled(programs, x)
    _check(compiled, x, "psum (xla, tree)")
    _timed(compiled, x, iters)
    for backend in ("cpu", "gpu"):
        _modelled([int(np.prod(s)) * 4 for s in shapes], n, backend)


def _modelled(nbytes: list[int], n: int, backend: str) -> None:
    """The α-β-γ model's time for the ring on these leaves, per leaf and in buckets."""
    import jaxcoll
    from jaxcoll.collectives import bucket_plan

    fit = jaxcoll.calibration(backend)
    ring = jaxcoll.schedule("allreduce", "ring", n)

    def seconds(bucket_bytes) -> float:
        plan = bucket_plan(nbytes, bucket_bytes)
        return sum(jaxcoll.cost(ring, sum(nbytes[i] for i in bucket), alpha=fit.alpha,
                                beta=fit.beta, gamma=fit.gamma).seconds for bucket in plan)

    sizes = {"25 MiB": 25 * 2**20, "one bucket": None, "4 MiB": 4 * 2**20, "1 MiB": 2**20,
             "per leaf": 1}
    print(f"  model, {backend}.json ({'measured' if backend == 'cpu' else 'an estimate'}): "
          + ", ".join(f"{k} {seconds(v) * 1e3:.1f} ms" for k, v in sizes.items()))


def accuracy(mesh, count: int) -> None:
    """Part 2: bfloat16 sums with and without float32 accumulation, against float64."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jaxcoll

    n = mesh.size
    values = np.random.default_rng(1).normal(size=(n, count)).astype(jnp.bfloat16)
    exact = values.astype(np.float64).sum(axis=0)
    x = jax.device_put(values, NamedSharding(mesh, P(AXIS)))
    print(f"2. bfloat16 sum of {n} ranks x {count} normal(0, 1) values; error against the "
          f"float64 sum (bfloat16 spacing at |sum| = 2: {2.0**-6:g})")
    print(f"  {'algorithm':<10}{'accum_dtype':<14}{'max |error|':>12}{'mean |error|':>14}")
    for algorithm in ("ring", "xla"):
        for accum in (None, jnp.float32):
            program = _spmd(mesh, lambda v: jaxcoll.allreduce(
                v, AXIS, algorithm=algorithm, accum_dtype=accum))
            error = np.abs(np.asarray(program(x))[0].astype(np.float64) - exact)
            name = "bfloat16" if accum is None else "float32"
            print(f"  {algorithm:<10}{name:<14}{error.max():>12.4g}{error.mean():>14.4g}")


def gradient_rule(mesh, count: int, iters: int) -> None:
    """Part 3: grad through a ring allreduce, automatic transpose vs a custom_vjp."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jaxcoll

    @jax.custom_vjp
    def custom_ring(x):
        return jaxcoll.ring_allreduce(x, AXIS)

    custom_ring.defvjp(lambda x: (custom_ring(x), None),
                       lambda _, cotangent: (jaxcoll.ring_allreduce(cotangent, AXIS),))

    def grad_through(allreduce):
        return lambda x: jax.grad(lambda v: jnp.sum(jnp.sin(allreduce(v))))(x)

    n = mesh.size
    x = jax.device_put(np.random.default_rng(2).normal(size=(n, count)).astype(np.float32),
                       NamedSharding(mesh, P(AXIS)))
    print(f"3. jax.grad through a ring allreduce of {count} float32 per rank "
          f"({count * 4 / 2**20:g} MiB), {n} ranks, {iters} alternating calls")
    programs = {"automatic transpose": _spmd(mesh, grad_through(
                    lambda v: jaxcoll.ring_allreduce(v, AXIS))),
                "custom_vjp": _spmd(mesh, grad_through(custom_ring))}
    compiled = _compiled(programs, x)
    got, want = (np.asarray(call(x)) for call, _ in compiled.values())
    print(f"  max |difference| of the two gradients: {np.max(np.abs(got - want)):.3g}")
    _timed(compiled, x, iters)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--iters", type=int, default=9, help="timed calls per program")
    parser.add_argument("--parts", default="1,2,3", help="comma-separated: 1, 2, 3")
    parser.add_argument("--accuracy-count", type=int, default=1 << 20)
    parser.add_argument("--grad-count", type=int, default=1 << 22)
    args = parser.parse_args(argv)

    import jax
    jax.config.update("jax_num_cpu_devices", args.devices)
    from jax.sharding import Mesh
    import jaxlib

    mesh = Mesh(np.array(jax.devices()[:args.devices]), (AXIS,))
    print(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, {args.devices} "
          f"{jax.default_backend()} devices, python {sys.version.split()[0]}")
    parts = args.parts.split(",")
    if "1" in parts:
        bucketing(mesh, args.iters)
    if "2" in parts:
        accuracy(mesh, args.accuracy_count)
    if "3" in parts:
        gradient_rule(mesh, args.grad_count, args.iters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
