"""jaxcoll against the same algorithm written by hand with ``lax.ppermute`` (not a test).

    python bench/handwritten.py [--sizes 64KiB,1MiB,16MiB] [--iters 21]

The hand-written versions are what a user would write from the textbook (as JAX's shard_map
tutorial writes its ring): a ring allreduce (reduce-scatter then allgather, one chunk a step in
a ``fori_loop``) and a recursive-doubling allreduce (log2 n swaps with partners 1, 2, 4, ...
apart; n must be a power of two). Each runs beside ``jaxcoll.allreduce`` with the same
algorithm, alternating, medians; the ratio is jaxcoll's time over the hand-written one's. Both
must give psum's answer bit for bit (small integers as float32).
"""

from __future__ import annotations

import argparse
import statistics
import sys

AXIS = "i"


def ring_by_hand(x, n: int):
    """Ring allreduce of this rank's (count,) x, count a multiple of n: n chunks."""
    import jax.numpy as jnp
    from jax import lax

    me = lax.axis_index(AXIS)
    right = [(r, (r + 1) % n) for r in range(n)]
    chunks = x.reshape(n, -1)  # (n, chunk)

    def reduce_step(step, chunks):  # send chunk me - step, add into chunk me - step - 1
        sent = lax.dynamic_index_in_dim(chunks, (me - step) % n, keepdims=False)
        got = lax.ppermute(sent, AXIS, right)
        into = (me - step - 1) % n
        mine = lax.dynamic_index_in_dim(chunks, into, keepdims=False)
        return lax.dynamic_update_index_in_dim(chunks, mine + got, into, 0)

    def gather_step(step, chunks):  # send the finished chunk me + 1 - step onwards
        sent = lax.dynamic_index_in_dim(chunks, (me + 1 - step) % n, keepdims=False)
        got = lax.ppermute(sent, AXIS, right)
        return lax.dynamic_update_index_in_dim(chunks, got, (me - step) % n, 0)

    chunks = lax.fori_loop(0, n - 1, reduce_step, chunks)
    chunks = lax.fori_loop(0, n - 1, gather_step, chunks)
    return jnp.reshape(chunks, x.shape)


def recursive_doubling_by_hand(x, n: int):
    """Recursive-doubling allreduce (n a power of two): swap with the partner 2^k apart, add."""
    from jax import lax

    distance = 1
    while distance < n:
        partner = [(r, r ^ distance) for r in range(n)]
        x = x + lax.ppermute(x, AXIS, partner)
        distance *= 2
    return x


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64KiB,1MiB,16MiB")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--iters", type=int, default=21)
    args = parser.parse_args(argv)

    import jax
    jax.config.update("jax_num_cpu_devices", args.devices)
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import jaxcoll
    from jaxcoll.tools.bench import parse_size, time_alternating, verifiable_values

    n = args.devices
    mesh = Mesh(np.array(jax.devices()[:n]), (AXIS,))

    def spmd(fn):
        return jax.jit(jax.shard_map(lambda b: fn(b[0])[None], mesh=mesh, in_specs=P(AXIS),
                                     out_specs=P(AXIS), check_vma=False))

    pairs = {"ring": lambda x: ring_by_hand(x, n),
             "recursive_doubling": lambda x: recursive_doubling_by_hand(x, n)}
    print(f"jax {jax.__version__}, {n} {jax.default_backend()} devices, float32, "
          f"{args.iters} alternating calls, medians")
    print(f"{'algorithm':<20}{'bytes/rank':>12}{'by hand ms':>12}{'jaxcoll ms':>12}{'ratio':>8}")
    for size in (parse_size(s) for s in args.sizes.split(",")):
        count = max(n, size // 4 // n * n)
        x = jax.device_put(verifiable_values(n, count, "float32"), NamedSharding(mesh, P(AXIS)))
        want = np.asarray(spmd(lambda v: lax.psum(v, AXIS))(x))
        for name, by_hand in pairs.items():
            programs = {"by hand": spmd(by_hand),
                        "jaxcoll": spmd(lambda v, a=name: jaxcoll.allreduce(v, AXIS, algorithm=a))}
            for label, program in programs.items():
                assert np.array_equal(np.asarray(program(x)), want), f"{name} {label} is wrong"
            times = time_alternating(programs, x, args.iters)
            hand, ours = (statistics.median(times[k]) for k in ("by hand", "jaxcoll"))
            print(f"{name:<20}{count * 4:>12}{hand * 1e3:>12.2f}{ours * 1e3:>12.2f}"
                  f"{ours / hand:>8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
