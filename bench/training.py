"""Training-step benchmarks on fake CPU devices (not a test): bucketing, mixed precision, grads.

    python bench/training.py

1. **Bucketing.** A pytree shaped like ResNet-50's gradients (161 leaves, 25.6M float32
   values, ``resnet50_shapes``) is summed over 8 devices: by ``lax.psum`` over the tree (one
   XLA all-reduce), by one ``jaxcoll.ring_allreduce`` call with 25 MiB buckets (the default),
   one bucket, 4 MiB and 1 MiB buckets, and by one ring allreduce per leaf. The programs run
   in alternation (``jaxcoll.tools.bench.time_alternating``); medians. Inputs are small integers,
   so every result must equal psum's bit for bit.
2. **Mixed precision.** Random normal bfloat16 data (8 ranks, ``--accuracy-count`` values
   each) summed by the ring and by psum, in bfloat16 and with ``accum_dtype=float32``: max
   and mean absolute error against the float64 sum of the same bfloat16 values.
3. **Gradient rule.** Run time of ``jax.grad`` through an allreduce of the ResNet-50 tree
   against its forward pass, for ``lax.psum`` and for jaxcoll's ring (whose transpose rule
   runs one ring on the dual schedule).
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


def _spmd(mesh, fn, check_vma: bool = True):
    """jit(shard_map(fn)) over the mesh's one axis; arguments and results have a leading
    rank axis, which ``fn`` does not see."""
    import jax
    from jax.sharding import PartitionSpec as P

    def body(x):
        out = fn(jax.tree.map(lambda a: a[0], x))
        return jax.tree.map(lambda y: y[None], out)
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                                 check_vma=check_vma))


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


def _timed(compiled: dict, x, iters: int, ratios: dict | None = None) -> None:
    """Time compiled programs in alternation; print a table (ratios to the first, or to the
    program ``ratios`` names for each)."""
    from jaxcoll.tools.bench import time_alternating

    times = time_alternating({k: _ready(call) for k, (call, _) in compiled.items()}, x, iters)
    medians = {name: statistics.median(t) for name, t in times.items()}
    first = next(iter(compiled))
    print(f"  {'program':<28}{'compile (s)':>12}{'median (ms)':>13}{'min (ms)':>10}"
          f"{'ratio':>8}  to")
    for name, (_, compile_s) in compiled.items():
        to = (ratios or {}).get(name, first)
        print(f"  {name:<28}{compile_s:>12.1f}{medians[name] * 1e3:>13.1f}"
              f"{min(times[name]) * 1e3:>10.1f}{medians[name] / medians[to]:>8.2f}  {to}")


def bucketing(mesh, iters: int) -> None:
    """Part 1: the ResNet-50 gradient tree, bucketed vs per leaf vs psum."""
    import jax
    from jax import lax
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jaxcoll
    from jaxcoll.lowering.execute import in_sequence

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
    from jaxcoll.packing import bucket_plan

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


def gradient_rule(mesh, iters: int) -> None:
    """Part 3: jax.grad through an allreduce of the ResNet-50 tree against its forward pass:
    psum, and jaxcoll's ring, whose transpose is one ring on the dual schedule."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jaxcoll

    def forward(allreduce):
        return lambda tree: allreduce(tree)

    def backward(allreduce):  # the loss is cheap next to the collectives: half the squares
        def loss(tree):
            return sum(0.5 * jnp.vdot(leaf, leaf) for leaf in jax.tree.leaves(allreduce(tree)))
        return jax.grad(loss)

    n, shapes = mesh.size, resnet50_shapes()
    rng = np.random.default_rng(3)
    tree = [jax.device_put(rng.integers(-8, 9, (n, *shape)).astype(np.float32),
                           NamedSharding(mesh, P(AXIS))) for shape in shapes]
    megabytes = sum(np.prod(s) for s in shapes) * 4 / 2**20
    print(f"3. jax.grad vs forward: allreduce of the ResNet-50 tree ({len(shapes)} leaves, "
          f"{megabytes:.1f} MiB per rank), {n} ranks, {iters} alternating calls")
    psum = lambda t: lax.psum(t, AXIS)  # noqa: E731
    ring = lambda t: jaxcoll.ring_allreduce(t, AXIS)  # noqa: E731
    # Under check_vma=True an allreduce's transpose is a cast (JAX's psum rule: nothing
    # moves); under check_vma=False it is a second allreduce (jaxcoll: the dual schedule).
    programs = {"psum forward": _spmd(mesh, forward(psum)),
                "psum grad": _spmd(mesh, backward(psum)),
                "psum grad, check_vma=False": _spmd(mesh, backward(psum), check_vma=False),
                "ring forward": _spmd(mesh, forward(ring)),
                "ring grad": _spmd(mesh, backward(ring)),
                "ring grad, check_vma=False": _spmd(mesh, backward(ring), check_vma=False)}
    compiled = _compiled(programs, tree)
    _timed(compiled, tree, iters, ratios={
        name: name.split(" grad")[0] + " forward" for name in programs if " grad" in name})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--iters", type=int, default=9, help="timed calls per program")
    parser.add_argument("--parts", default="1,2,3", help="comma-separated: 1, 2, 3")
    parser.add_argument("--accuracy-count", type=int, default=1 << 20)
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
        gradient_rule(mesh, args.iters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
