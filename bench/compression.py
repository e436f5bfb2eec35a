"""Compressed allreduce: measured error against the error model, as the rank count grows
(not a test).

    python bench/compression.py [--count 65536] [--kinds int8,fp8,bf16] [--json F]

For n = 2..8 ranks, the ring (which re-quantizes its partial sum at every hop) and two_shot
(each value quantized at most twice) run compressed on normal float32 inputs and are compared
with the exact float64 sum: the RMS error over the RMS of the sum, the largest error over ΣM
(the sum over ranks of each block's largest magnitude, compression.py), and the model's bound
on that ratio, ((1 + u)^d - 1 + n·2^-24·(1 + u)^d) with d read from the schedule.
"""

from __future__ import annotations

import argparse
import json
import sys

AXIS = "i"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1 << 16, help="values per rank")
    parser.add_argument("--kinds", default="int8,fp8,bf16")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)

    import jax
    jax.config.update("jax_num_cpu_devices", 8)
    import numpy as np
    from jax.sharding import Mesh, PartitionSpec as P

    import jaxcoll
    from jaxcoll.analysis.compression import error_bound, quantizations, sum_of_block_maxima
    from jaxcoll.ir.families import build_schedule

    kinds = args.kinds.split(",")
    print(f"jax {jax.__version__}, {args.count} normal float32 values a rank; error against the "
          "float64 sum")
    print(f"{'n':>3}{'algorithm':>10}{'kind':>6}{'d':>3}{'rms err / rms sum':>19}"
          f"{'max err / ΣM':>14}{'bound':>10}")
    rows = []
    for n in range(2, 9):
        mesh = Mesh(np.array(jax.devices()[:n]), (AXIS,))
        x = np.random.default_rng(n).standard_normal((n, args.count)).astype(np.float32)
        exact = x.astype(np.float64).sum(axis=0)

        def body(x):
            return {(a, k): jaxcoll.allreduce(x[0], AXIS, algorithm=a, compress=k)[None]
                    for a in ("ring", "two_shot") for k in kinds}
        program = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)))
        for (algorithm, kind), got in program(x).items():
            compress = jaxcoll.Compress(kind)
            schedule = build_schedule("allreduce", algorithm, n)
            d = quantizations(schedule, True)
            error = np.asarray(got)[0] - exact
            total_max = sum_of_block_maxima(x, schedule.n_chunks, compress.block)
            row = dict(n=n, algorithm=algorithm, kind=kind, d=d,
                       rms=float(np.sqrt(np.mean(error ** 2) / np.mean(exact ** 2))),
                       max_over_m=float(np.max(np.abs(error) / total_max)),
                       bound=float(error_bound(compress, d, n, 1.0)))
            rows.append(row)
            print(f"{n:>3}{algorithm:>10}{kind:>6}{d:>3}{row['rms']:>19.2e}"
                  f"{row['max_over_m']:>14.2e}{row['bound']:>10.2e}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"jax": jax.__version__, "count": args.count, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
