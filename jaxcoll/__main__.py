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
    parser.add_argument("primitive", help="a primitive, or an MSCCL .xml file to draw")
    parser.add_argument("algorithm", nargs="?")
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
        if args.primitive.lower().endswith(".xml"):  # an MSCCL algorithm, as the runtimes run it
            schedule = jaxcoll.ir.msccl.load(args.primitive)
        elif args.algorithm is None:
            parser.error("an algorithm is needed after the primitive (or give an .xml file)")
        else:
            schedule = jaxcoll.schedule(args.primitive, args.algorithm, args.n, root=args.root,
                                        pieces=args.pieces)
    except ValueError as error:
        parser.error(str(error))
    suffix = args.output.lower().rsplit(".", 1)[-1]
    if suffix in ("html", "htm"):
        path = jaxcoll.tools.pictures.html(schedule, args.output)
    else:
        path = jaxcoll.draw(schedule, args.output, gif=suffix == "gif")
    print(f"wrote {path}: {schedule!r}")
    return 0


def msccl_main(argv) -> int:
    """``python -m jaxcoll msccl FILE...``: what each MSCCL XML algorithm is, whether it
    verifies, its gap to the bounds and its time on a topology."""
    parser = argparse.ArgumentParser(
        prog="python -m jaxcoll msccl",
        description="Read MSCCL XML algorithms (what RCCL and msccl-executor-nccl run) by the "
                    "runtimes' rules: for each, its collective, ranks, rounds and bytes, "
                    "whether it verifies, its gap to jaxcoll.bounds, and its time on a "
                    "topology (jaxcoll.simulate, every transfer of a round at once). Exit "
                    "status 1 if any file is refused or does not verify.")
    parser.add_argument("files", nargs="+")
    parser.add_argument("--size", default="1M",
                        help="bytes per rank, as nccl-tests counts them (default 1M)")
    parser.add_argument("--topology", default="mi300x",
                        choices=("mi300x", "dgx-h100", "dgx-a100"),
                        help="fully connected MI300X GPUs (the files' own, default) or DGX "
                             "nodes of 8 on NVSwitch (the rank count must be a multiple of 8)")
    args = parser.parse_args(argv)
    from jaxcoll import bounds, cost, simulate, verify
    from jaxcoll.ir import msccl
    from jaxcoll.analysis import systems
    from jaxcoll.tools.bench import format_size, parse_size
    from jaxcoll.ir.schedules import ScheduleError

    nbytes = parse_size(args.size)
    bad = 0
    for path in args.files:
        print(path)
        try:
            program = msccl.parse(path)
            modes = [inplace for inplace, allowed in ((True, program.inplace),
                                                      (False, program.outofplace)) if allowed]
            schedules = [msccl.load(path, inplace=inplace) for inplace in modes]
        except ScheduleError as error:
            print(f"  refused: {error}")
            bad += 1
            continue
        n = program.ngpus
        if args.topology == "mi300x":
            topology = systems.mi300x(n)
        elif n % 8:
            print(f"  {n} ranks: not whole DGX nodes of 8; pass --topology mi300x")
            topology = None
        else:
            topology = systems.dgx(args.topology.split("-")[1], n // 8)
        print(f"  {program.coll} on {n} GPUs, {program.nchunks} chunks per loop, "
              f"{program.nchannels} channels, {program.proto}, sizes "
              f"{format_size(program.min_bytes)}.."
              f"{format_size(program.max_bytes) if program.max_bytes else 'any'}")
        for schedule in schedules:
            try:
                verify(schedule)
                verdict = f"verified: every rank ends with what {schedule.primitive} promises"
            except ScheduleError as error:
                verdict, bad = f"DOES NOT VERIFY: {error}", bad + 1
            where = "in place" if schedule.in_place else "out of place"
            priced = cost(schedule, nbytes, alpha=0.0, beta=1.0)
            bound = bounds(schedule.primitive, n, nbytes)
            print(f"  {where}: {_count(schedule.n_rounds, 'round')} of "
                  f"{_count(priced.messages, 'ppermute')}, "
                  f"{_count(schedule.n_scratch, 'scratch chunk')}; {verdict}")
            print(f"    the busiest rank sends {format_size(priced.bytes_sent)} of "
                  f"{format_size(nbytes)} (bound {format_size(bound.path_bytes)}: "
                  f"x{priced.bytes_sent / max(bound.path_bytes, 1):.2f}); "
                  f"{_count(priced.messages, 'message')} one after another on one port "
                  f"(bound {bound.rounds}: x{priced.messages / max(bound.rounds, 1):.2f})")
            if topology is not None:
                seconds = simulate(schedule, nbytes, topology).seconds
                print(f"    {seconds * 1e6:.1f} µs on {topology.name}")
    return 1 if bad else 0


def _count(k: int, thing: str) -> str:
    return f"{k} {thing}{'' if k == 1 else 's'}"


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
    if argv[:1] == ["msccl"]:
        return msccl_main(argv[1:])
    if argv[:1] == ["calibrate"]:  # time auto's algorithms on this machine, keep them
        from jaxcoll.tools.calibration_cache import main as calibrate_main

        return calibrate_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m jaxcoll",
        description="Run every primitive x algorithm against the xla reference and print a "
                    "table; exit status 1 on any mismatch. (`python -m jaxcoll draw --help`: "
                    "pictures of schedules; `python -m jaxcoll msccl --help`: MSCCL XML "
                    "algorithms read, verified and priced; `python -m jaxcoll calibrate "
                    "--help`: time auto's algorithms on this machine.)")
    parser.add_argument("--devices", type=int, default=8,
                        help="number of fake CPU devices to start (default 8); on GPU/TPU the "
                             "local devices are used, at most this many; under python -m "
                             "jaxcoll.tools.launch its --devices-per-proc decides, per process")
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

    from jaxcoll.tools import distributed

    processes = distributed.initialize()  # several under a launcher or a cluster; else 1
    if processes == 1:
        jax.config.update("jax_num_cpu_devices", args.devices)
    from jaxcoll.tools.check import format_table, run_checks

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
