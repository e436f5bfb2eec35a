"""``python -m jaxcoll``: check every algorithm against the lax built-ins on fake CPU devices."""

import argparse
import sys


def draw_main(argv) -> int:
    """``python -m jaxcoll draw PRIMITIVE ALGORITHM --n N -o FILE``: picture a schedule."""
    parser = argparse.ArgumentParser(
        prog="python -m jaxcoll draw",
        description="Draw a schedule: one panel per round, ranks as rows, chunks as columns "
                    "(.png and .gif need matplotlib: pip install 'jaxcoll[viz]'; .html, a page "
                    "that steps through the rounds, needs nothing).")
    parser.add_argument("primitive")
    parser.add_argument("algorithm")
    parser.add_argument("--n", type=_ranks_or_levels, default=4,
                        help="rank count (default 4); for hierarchical the levels' sizes, "
                             "outermost first: 2,4 or 2,2,2")
    parser.add_argument("--root", type=int, default=0)
    parser.add_argument("--pieces", type=int, default=1, help="pipeline pieces (trees)")
    parser.add_argument("-o", "--output", required=True,
                        help="a .png, a .gif to animate, or a .html page to step through")
    args = parser.parse_args(argv)
    import jaxcoll

    try:
        schedule = jaxcoll.schedule(args.primitive, args.algorithm, args.n, root=args.root,
                                    pieces=args.pieces)
    except ValueError as error:
        parser.error(str(error))
    suffix = args.output.lower().rsplit(".", 1)[-1]
    if suffix in ("html", "htm"):
        path = jaxcoll.pictures.html(schedule, args.output)
    else:
        path = jaxcoll.draw(schedule, args.output, gif=suffix == "gif")
    print(f"wrote {path}: {schedule!r}")
    return 0


def _ranks_or_levels(text: str) -> int | tuple[int, ...]:
    """``--n``: an int, or comma-separated ints (a hierarchical schedule's levels)."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an int or comma-separated ints, got {text!r}")
    return values if "," in text else values[0]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["draw"]:
        return draw_main(argv[1:])
    if argv[:1] == ["calibrate"]:  # time auto's algorithms on this machine, keep them
        from .calibration_cache import main as calibrate_main

        return calibrate_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m jaxcoll",
        description="Run every primitive x algorithm against the xla reference and print a "
                    "table; exit status 1 on any mismatch. (`python -m jaxcoll draw --help`: "
                    "pictures of schedules; `python -m jaxcoll calibrate --help`: time auto's "
                    "algorithms on this machine.)")
    parser.add_argument("--devices", type=int, default=8,
                        help="number of fake CPU devices to start (default 8); on GPU/TPU the "
                             "local devices are used, at most this many; under python -m "
                             "jaxcoll.launch its --devices-per-proc decides, per process")
    parser.add_argument("--ranks", default=None,
                        help="comma-separated rank counts to check, each at most --devices "
                             "(default 8,5; across processes: all the devices)")
    parser.add_argument("--counts", default="1,7,1000,262144",
                        help="comma-separated float32 element counts per rank "
                             "(default 1,7,1000,262144)")
    args = parser.parse_args(argv)
    if args.devices < 1:
        parser.error(f"--devices must be >= 1, got {args.devices}")
    counts = _int_list(parser, "--counts", args.counts, minimum=0)
    ranks = _int_list(parser, "--ranks", args.ranks or "8,5", minimum=1)

    import jax  # after parsing, so --help is instant

    from . import distributed

    processes = distributed.initialize()  # several under a launcher or a cluster; else 1
    if processes == 1:
        jax.config.update("jax_num_cpu_devices", args.devices)
    from .check import format_table, run_checks

    available = len(jax.devices()) if processes > 1 else min(args.devices, len(jax.devices()))
    if processes > 1:  # a sub-mesh would leave some processes nothing to check
        if args.ranks is not None and set(ranks) != {available}:
            parser.error(f"--ranks {args.ranks}: across {processes} processes the checks run "
                         f"on all {available} devices (--ranks {available})")
        ranks = [available]
    if max(ranks) > available:
        parser.error(f"--ranks {args.ranks}: only {available} devices are available")
    rows = [row for n in ranks for row in run_checks(n, counts)]
    if jax.process_index() == 0:
        print(format_table(rows))
    bad = [r for r in rows if not r.ok]
    where = (f"process {jax.process_index()} of {processes}, " if processes > 1 else "")
    print(f"\njax {jax.__version__}, backend {jax.default_backend()}, {where}{available} "
          f"devices: {len(rows) - len(bad)} of {len(rows)} checks match the xla reference "
          f"exactly")
    return 1 if bad else 0


def _int_list(parser, flag: str, text: str, minimum: int) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        parser.error(f"{flag} must be comma-separated integers, got {text!r}")
    if any(v < minimum for v in values):
        parser.error(f"{flag} values must be >= {minimum}, got {text!r}")
    return values


if __name__ == "__main__":
    sys.exit(main())
