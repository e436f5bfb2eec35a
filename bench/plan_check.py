"""What checking the executor's plan against its schedule costs beside making it (not a test).

    python bench/plan_check.py [--ranks 1024] [--repeats 5] [--only naive,ring]

Every registered (non-hierarchical) algorithm's schedule on ``--ranks`` ranks is lowered
(``plan.lower`` without its check) and the plan checked (``validate.check``), alternating,
each the best of ``--repeats`` (garbage collected before each, so one's garbage is not
charged to the other); per algorithm and in total, the check's time over the plan's. Plain
numpy, no JAX.
"""

from __future__ import annotations

import argparse
import gc
import time


def _timed(fn) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", default="", help="algorithm names, comma-separated")
    args = parser.parse_args(argv)
    from jaxcoll.lowering import plan, validate
    from jaxcoll.ir.families import SCHEDULES, build_schedule, two_level

    only = set(filter(None, args.only.split(",")))
    lower, check = plan.lower.__wrapped__, validate.check  # the plan uncached, and its check
    rows = []
    for primitive in sorted(SCHEDULES):
        for name in sorted(SCHEDULES[primitive]):
            if two_level(primitive, name) or (only and name not in only):
                continue
            schedule = build_schedule(primitive, name, args.ranks)
            planned = checked = float("inf")
            for _ in range(args.repeats):
                validate.check = lambda *_: None
                try:
                    segments = []
                    planned = min(planned, _timed(lambda: segments.extend(lower(schedule))))
                finally:
                    validate.check = check
                checked = min(checked, _timed(lambda: check(schedule, segments)))
            rows.append((primitive, name, planned, checked))
            print(f"{primitive:15s} {name:22s} plan {planned * 1e3:9.1f} ms  check "
                  f"{checked * 1e3:8.1f} ms  {checked / planned:6.1%}", flush=True)
    planned, checked = sum(r[2] for r in rows), sum(r[3] for r in rows)
    print(f"all {len(rows)} at {args.ranks} ranks: plan {planned:.2f} s, check {checked:.2f} s "
          f"= {checked / planned:.1%}; largest share "
          f"{max(r[3] / r[2] for r in rows):.0%}")


if __name__ == "__main__":
    main()
