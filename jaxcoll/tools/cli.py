"""The command line: ``python -m jaxcoll [COMMAND]``, one entry for every tool.

``check`` (the default: what ``python -m jaxcoll`` alone runs) checks every algorithm against
the lax built-ins; ``draw``, ``msccl``, ``bench``, ``calibrate`` and ``launch`` picture, read,
benchmark and time schedules and start processes (``bench`` and ``launch`` are also
``python -m jaxcoll.tools.bench`` and ``python -m jaxcoll.tools.launch``). A mistake on the
command line is one line on stderr and exit status 2 (:class:`~jaxcoll.tools.console.Parser`).
"""

from __future__ import annotations

import argparse
import difflib
import sys
import time

import jax

from jaxcoll import collectives
from jaxcoll.analysis import systems
from jaxcoll.analysis.model import bounds, cost
from jaxcoll.analysis.topology import simulate
from jaxcoll.ir import msccl
from jaxcoll.ir.schedules import ScheduleError
from jaxcoll.ir.symbolic import verify
from jaxcoll.tools import bench, launch, pictures
from jaxcoll.tools import calibration_cache as cache
from jaxcoll.tools.auto import calibration
from jaxcoll.tools.bench import ops_arg
from jaxcoll.tools.check import HEADER, cases, format_row, iter_checks
from jaxcoll.tools.console import (
    Parser,
    Progress,
    format_size,
    needs,
    parse_size,
    readable,
    size_arg,
    start_jax,
    writable,
)

PROG = "python -m jaxcoll"


def draw_main(argv) -> int:
    """``python -m jaxcoll draw PRIMITIVE ALGORITHM --n N -o FILE``: picture a schedule."""
    parser = Parser(
        prog=f"{PROG} draw",
        description="Draw a schedule: one panel per round, ranks as rows, chunks as columns "
                    "(.png and .gif need matplotlib: pip install 'jaxcoll[viz]'; .html, a page "
                    "that steps through the rounds, needs nothing).")
    parser.add_argument("primitive", help="a primitive, or an MSCCL .xml file to draw")
    parser.add_argument("algorithm", nargs="?",
                        help="an algorithm of the primitive (python -c 'import jaxcoll; "
                             "print(jaxcoll.algorithms(\"allreduce\"))' lists them)")
    parser.add_argument("--n", type=_ranks_or_levels, default=4,
                        help="rank count (default 4); for hierarchical the levels' sizes, "
                             "outermost first: 2,4 or 2,2,2")
    parser.add_argument("--root", type=int, default=0,
                        help="the root of a rooted collective (default 0)")
    parser.add_argument("--pieces", type=int, default=1, help="pipeline pieces (trees)")
    parser.add_argument("--calibration", choices=("cpu", "gloo", "gpu"), default=None,
                        help=".html: price each round with this calibration (jaxcoll.calibration"
                             "(...): this machine's if measured, else the shipped one); without "
                             "it the page shows rounds and bytes, no times")
    parser.add_argument("--topology", choices=("mi300x", "dgx-h100", "dgx-a100"), default=None,
                        help=".html: place the ranks on these GPUs' links, show each round's "
                             "link loads and price it with jaxcoll.simulate (DGX: nodes of 8, "
                             "the rank count a multiple of 8)")
    parser.add_argument("-o", "--output", required=True,
                        help="a .png, a .gif to animate, or a .html page to step through")
    args = parser.parse_args(argv)
    suffix = args.output.lower().rsplit(".", 1)[-1]
    if suffix not in ("html", "htm", "png", "gif"):
        parser.error(f"argument -o/--output: {args.output}: write a .png, .gif or .html")
    if suffix in ("png", "gif"):
        needs(parser, "matplotlib", "viz", f"a .{suffix} picture")
    writable(parser, "-o/--output", args.output)
    try:
        if args.primitive.lower().endswith(".xml"):  # an MSCCL algorithm, as the runtimes run it
            readable(parser, args.primitive)
            schedule = msccl.load(args.primitive)
        elif args.algorithm is None:
            parser.error("an algorithm is needed after the primitive (or give an .xml file)")
        else:
            schedule = collectives.schedule(args.primitive, args.algorithm, args.n, root=args.root,
                                        pieces=args.pieces)
    except ValueError as error:
        parser.error(str(error))
    if suffix in ("html", "htm"):
        named = None if args.calibration is None else calibration(args.calibration)
        path = pictures.html(schedule, args.output, calibration=named,
                             topology=_gpus(parser, args.topology, schedule.n_ranks))
    else:
        path = pictures.draw(schedule, args.output, gif=suffix == "gif")
    print(f"wrote {path}: {schedule!r}")
    return 0


def _gpus(parser, name: str | None, n: int):
    """--topology's GPUs for n ranks (None: none named)."""
    if name is None:
        return None
    if name == "mi300x":
        return systems.mi300x(n)
    if n % 8:
        parser.error(f"--topology {name}: {n} ranks are not whole DGX nodes of 8")
    return systems.dgx(name.split("-")[1], n // 8)


def msccl_main(argv) -> int:
    """``python -m jaxcoll msccl FILE...``: what each MSCCL XML algorithm is, whether it
    verifies, its gap to the bounds and its time on a topology."""
    parser = Parser(
        prog=f"{PROG} msccl",
        description="Read MSCCL XML algorithms (what RCCL and msccl-executor-nccl run) by the "
                    "runtimes' rules: for each, its collective, ranks, rounds and bytes, "
                    "whether it verifies, its gap to jaxcoll.bounds, and its time on a "
                    "topology (jaxcoll.simulate, every transfer of a round at once). Exit "
                    "status 1 if any file is refused or does not verify.")
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="MSCCL XML algorithm files (RCCL's tools/msccl-algorithms/, "
                             "msccl-tools' output, jaxcoll.msccl.dump's)")
    parser.add_argument("--size", default="1M", type=size_arg,
                        help="bytes per rank, as nccl-tests counts them (default 1M)")
    parser.add_argument("--topology", default="mi300x",
                        choices=("mi300x", "dgx-h100", "dgx-a100"),
                        help="fully connected MI300X GPUs (the files' own, default) or DGX "
                             "nodes of 8 on NVSwitch (the rank count must be a multiple of 8)")
    args = parser.parse_args(argv)
    nbytes = args.size
    for path in args.files:
        readable(parser, path)
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
              f"{_count(program.nchannels, 'channel')}, {program.proto}, sizes "
              f"{format_size(program.min_bytes)}.."
              f"{format_size(program.max_bytes) if program.max_bytes else 'any'}")
        for schedule in schedules:
            try:
                verify(schedule)
                verdict = f"verified: every rank ends with what {schedule.collective} promises"
            except ScheduleError as error:
                verdict, bad = f"DOES NOT VERIFY: {error}", bad + 1
            where = "in place" if schedule.in_place else "out of place"
            priced = cost(schedule, nbytes, alpha=0.0, beta=1.0)
            bound = bounds(schedule.collective, n, nbytes)
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


def check_main(argv=None) -> int:
    """``python -m jaxcoll [check]``: every algorithm against the lax built-ins, row by row."""
    parser = Parser(
        prog=PROG,
        usage=f"{PROG} [check] [--quick] [--devices D] [--ranks N,...] [--counts C,...]",
        description="Run every primitive x algorithm against the xla reference on fake CPU "
                    "devices and print a row per check as it finishes; exit status 1 on any "
                    "mismatch. Each case compiles one program (one machine's times: "
                    "bench/RESULTS.md), --quick a representative few. Other commands: "
                    + ", ".join(f"{name} ({what})" for name, (what, _) in COMMANDS.items()
                                if name != "check") + f"; {PROG} COMMAND --help for each.")
    parser.add_argument("--quick", action="store_true",
                        help="a representative few: each collective by its ring (or binomial "
                             "tree), the allreduce's recursive doubling, tree and two levels, "
                             "on 5 ranks (unless --ranks), counts 1,7,1000 (unless --counts)")
    parser.add_argument("--devices", type=int, default=8,
                        help="number of fake CPU devices to start (default 8); on GPU/TPU the "
                             "local devices are used, at most this many; under python -m "
                             "jaxcoll.tools.launch its --devices-per-proc decides, per process")
    parser.add_argument("--ranks", default=None,
                        help="comma-separated rank counts to check, each at most --devices "
                             "(default 8,5; with --quick 5; across processes: all the devices)")
    parser.add_argument("--counts", default=None,
                        help="comma-separated float32 element counts per rank "
                             "(default 1,7,1000,262144; with --quick 1,7,1000)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    args = parser.parse_args(argv)
    if args.devices < 1:
        parser.error(f"argument --devices: must be >= 1, got {args.devices}")
    counts = _int_list(parser, "--counts", args.counts or ("1,7,1000" if args.quick else
                                                            "1,7,1000,262144"), minimum=0)
    ranks = _int_list(parser, "--ranks", args.ranks or ("5" if args.quick else "8,5"), minimum=1)
    start_jax(args.devices)
    processes = jax.process_count()
    available = len(jax.devices()) if processes > 1 else min(args.devices, len(jax.devices()))
    if processes > 1:  # a sub-mesh would leave some processes nothing to check
        if args.ranks is not None and set(ranks) != {available}:
            parser.error(f"argument --ranks: {args.ranks}: across {processes} processes the "
                         f"checks run on all {available} devices (--ranks {available})")
        ranks = [available]
    if max(ranks) > available:
        parser.error(f"argument --ranks: {args.ranks}: only {available} devices are available")
    rows = _stream_checks(ranks, counts, args.quick, leader=jax.process_index() == 0,
                          progress=not args.quiet)
    bad = [r for r in rows if not r.ok]
    where = (f"process {jax.process_index()} of {processes}, " if processes > 1 else "")
    print(f"\njax {jax.__version__}, backend {jax.default_backend()}, {where}{available} "
          f"devices: {len(rows) - len(bad)} of {len(rows)} checks match the xla reference "
          f"exactly")
    return 1 if bad else 0


def _stream_checks(ranks: list[int], counts: list[int], quick: bool, leader: bool,
                   progress: bool) -> list:
    """Run the checks, printing each row as soon as its program has run (process 0 only),
    with a progress line on stderr where it is a terminal; return every row."""
    total = sum(len(cases(n, quick)) for n in ranks)
    say = print if leader else (lambda *_, **__: None)
    hint = "" if quick else f" (--quick checks {len(cases(5, quick=True))})"
    say(f"{_count(total, 'case')} on {', '.join(map(str, ranks))} ranks, "
        f"{_count(len(counts), 'size')} each: one program compiled per case{hint}", flush=True)
    say(HEADER + "\n" + "-" * len(HEADER), flush=True)
    bar = Progress(total, enabled=progress and leader and sys.stderr.isatty())
    rows, started = [], time.monotonic()
    for n in ranks:
        for done in iter_checks(n, counts, quick=quick):
            bar.clear()
            say("\n".join(format_row(r) for r in done), flush=True)
            rows += done
            bar.tick()
            left = (time.monotonic() - started) / bar.done * (total - bar.done)
            bar.start(f"{left:.0f} s left")
    bar.clear()
    return rows


def main(argv=None) -> int:
    """``python -m jaxcoll [COMMAND] ...``: the command named first, else ``check``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]][1](argv[1:])
    if argv and not argv[0].startswith("-"):
        close = difflib.get_close_matches(argv[0], COMMANDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        sys.stderr.write(f"{PROG}: error: {argv[0]!r} is not a command; the commands are "
                         f"{', '.join(COMMANDS)}{hint} (see {PROG} --help)\n")
        return 2
    return check_main(argv)


def _int_list(parser, flag: str, text: str, minimum: int) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        parser.error(f"{flag} must be comma-separated integers, got {text!r}")
    if any(v < minimum for v in values):
        parser.error(f"{flag} values must be >= {minimum}, got {text!r}")
    return values


def calibrate_main(argv=None) -> int:
    """``python -m jaxcoll calibrate``: time auto's algorithms on this machine and keep them."""
    parser = Parser(
        prog=f"{PROG} calibrate",
        description="Time every algorithm auto chooses from, over a size sweep, on this "
                    "machine's devices and keep the times in the cache that auto reads "
                    f"({cache.CACHE_DIR}, else $XDG_CACHE_HOME/jaxcoll, else ~/.cache/jaxcoll).")
    parser.add_argument("--op", default="all",
                        help="comma-separated collectives, or 'all' (default)")
    parser.add_argument("--devices", type=int, default=8,
                        help="fake CPU devices to start (default 8); elsewhere the local "
                             "devices; under python -m jaxcoll.tools.launch all of them")
    parser.add_argument("--ranks", type=int, default=None,
                        help="n: time on the first N devices (default all)")
    parser.add_argument("--sizes", default=",".join(format_size(s).replace(" ", "")
                                                    .replace("iB", "") for s in cache.SIZES),
                        help="comma-separated sizes S (nccl-tests': the larger of one rank's "
                             "input and output), e.g. 1K,16K,256K,4M (the default)")
    parser.add_argument("--repeats", type=int, default=cache.REPEATS,
                        help="timed calls per algorithm and size, at least "
                             f"(default {cache.REPEATS})")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        sizes = [parse_size(text) for text in args.sizes.split(",")]
    except ValueError as error:
        parser.error(f"argument --sizes: {error}")
    if args.devices < 1 or args.repeats < 1 or min(sizes) < 1:
        parser.error("--devices, --repeats and every --sizes must be >= 1")
    start_jax(args.devices)
    ops = ops_arg(parser, args.op)
    n = args.ranks or jax.device_count()
    if not cache._can_measure(n):
        allowed = (f"{jax.device_count()} (all the devices of the {jax.process_count()} "
                   "processes)" if jax.process_count() > 1 else f"2..{jax.device_count()}")
        parser.error(f"argument --ranks: {n}; allowed: {allowed}")
    say = print if jax.process_index() == 0 else (lambda *_, **__: None)
    for op in ops:
        entry = cache.calibrate(op, n, sizes, args.repeats, progress=not args.quiet)
        say(summary(entry), flush=True)
    say(f"wrote {cache.cache_path()}" + (f" ({cache.MODE}=0 is set: auto won't read it)"
                                           if cache.mode() == "0" else ""))
    return 0


def summary(entry: dict) -> str:
    """One line per size of a cache entry: the fastest algorithm, its time, the runner-up."""
    lines = []
    for size in entry["sizes"]:
        times = sorted((s, a) for a, b, s in entry["timings"] if b == size)
        (best, name), rest = times[0], times[1:]
        after = f"   next: {rest[0][1]} x{rest[0][0] / best:.2f}" if rest else ""
        lines.append(f"{entry['primitive']:<15} n={entry['n']}  {format_size(size):>10} per "
                     f"rank  {name:<20} {best * 1e6:10.1f} us{after}")
    return "\n".join(lines)


COMMANDS = {  # name: (what it does, its main)
    "check": ("every algorithm against the lax built-ins; the default", check_main),
    "draw": ("a schedule or an MSCCL file as a picture or a page", draw_main),
    "msccl": ("MSCCL XML algorithms read, verified and priced", msccl_main),
    "bench": ("the nccl-tests style benchmark", bench.main),
    "calibrate": ("time auto's algorithms on this machine", calibrate_main),
    "launch": ("P local processes joined by jax.distributed", launch.main),
}
