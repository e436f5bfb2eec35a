"""Where the time of a ring allreduce goes, against the floor any ppermute ring can reach.

    python bench/profile_ring.py            # 16 MiB per device, 8 fake CPU devices

Times, alternating and as medians, on the same input:
- ``psum``: XLA's all-reduce. On fake CPU devices it is one in-memory reduction over the
  devices' buffers: no copies between devices at all.
- ``ring floor``: only the ring's 2(n-1) ppermutes of one chunk each, with the reduce-scatter
  half's adds, on a chunk-sized carry: what any ppermute ring must do at least.
- ``jaxcoll ring``: ``jaxcoll.allreduce(algorithm="ring")``, which also slices each chunk out
  of the whole buffer and writes what it receives back into it.
- ``jaxcoll naive``: reduce into rank 0, then broadcast from it.
and the compiled ring's temporary memory (XLA's memory analysis) as a multiple of the input.
"""

import argparse
import statistics
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="16M", help="bytes per device (default 16M)")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--iters", type=int, default=21)
    args = parser.parse_args(argv)

    import jax
    jax.config.update("jax_num_cpu_devices", args.devices)
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import jaxcoll
    from jaxcoll.tools.bench import parse_size, time_alternating

    n = args.devices
    mesh = Mesh(np.array(jax.devices()[:n]), ("i",))
    count = parse_size(args.size) // 4 // n * n  # float32 elements per device, n chunks
    ring = [(r, (r + 1) % n) for r in range(n)]

    def ring_floor(x):  # (1, count) -> (1, count // n): the ring's messages and adds only
        chunk = x[:, : count // n]
        summed = lax.fori_loop(0, n - 1, lambda _, c: lax.ppermute(c, "i", ring) + chunk, chunk)
        return lax.fori_loop(0, n - 1, lambda _, c: lax.ppermute(c, "i", ring), summed)

    bodies = {"xla": lambda x: lax.psum(x, "i"), "ring floor": ring_floor,
              "jaxcoll ring": lambda x: jaxcoll.allreduce(x, "i", algorithm="ring"),
              "jaxcoll naive": lambda x: jaxcoll.allreduce(x, "i", algorithm="naive")}
    programs = {name: jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"),
                                            out_specs=P("i")))
                for name, body in bodies.items()}
    x = jax.device_put(jnp.ones((n, count), jnp.float32), NamedSharding(mesh, P("i")))
    times = time_alternating(programs, x, args.iters, warmup=2)
    psum = statistics.median(times["xla"])
    print(f"allreduce of {count * 4} B per device, {n} fake CPU devices, jax {jax.__version__}, "
          f"median of {args.iters} alternating calls")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"  {name:<14} {median * 1e3:8.2f} ms   / psum = {median / psum:5.2f}")
    memory = programs["jaxcoll ring"].lower(x).compile().memory_analysis()
    print(f"  jaxcoll ring temporary memory: {memory.temp_size_in_bytes / (count * 4):.2f} x "
          "the input per device")
    return 0


if __name__ == "__main__":
    sys.exit(main())
