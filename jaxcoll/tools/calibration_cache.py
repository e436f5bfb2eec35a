"""auto's calibration of this machine: the first time ``auto`` decides a collective on n ranks
with no timings of this machine, the algorithms it chooses from that could be the fastest
(:func:`measure`) are timed over a size sweep (a progress bar on a terminal), saved in the
user's cache directory and used from then on.

- Where: ``$JAXCOLL_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxcoll``, else ``~/.cache/jaxcoll``;
  one JSON file per machine fingerprint (:func:`fingerprint`: host, CPU, platform, device
  kind and counts, processes, Python, jax, jaxlib, jaxcoll, XLA_FLAGS), one entry per
  (collective, n). A file that can't be read, of another format or of another fingerprint, or
  an entry whose algorithms are not today's, is ignored (with a warning) and measured again.
- ``$JAXCOLL_CALIBRATE``: ``1`` (default) measure where needed; ``quiet`` the same without
  the progress bar; ``0`` never measure and read no cache: the calibrations shipped with
  jaxcoll (``jaxcoll/analysis/calibrations/``), as where measuring can't run (the test suite
  sets it).
- Inside a trace (``auto`` decides while ``jit`` or ``shard_map`` traces), the measuring runs
  in a thread of its own, outside that trace, on the first n devices (across processes: all of
  them, every process at once, agreeing on the medians and on the cache's entry).
- ``python -m jaxcoll calibrate`` measures explicitly (jaxcoll/tools/cli.py).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import logging
import math
import os
import platform
import socket
import sys
import threading
import time
import warnings
from dataclasses import replace
from functools import lru_cache
from importlib import metadata
from pathlib import Path

import jax
import jaxlib
import numpy as np
from jax.sharding import Mesh

from jaxcoll.analysis.model import Calibration, auto_candidates, ranking, shipped
from jaxcoll.ir.families import SCHEDULES
from jaxcoll.ir.records import RECORDS
from jaxcoll.tools.console import Progress
from jaxcoll.tools.distributed import gather, transport
from jaxcoll.tools.timing import time_algorithms

FORMAT = 1  # of the cache files; another is ignored
MODE = "JAXCOLL_CALIBRATE"
CACHE_DIR = "JAXCOLL_CACHE_DIR"
# nccl-tests' size S (the larger of one rank's input and output) of the sweep; between two
# timed sizes whose fastest differ, their geometric mean is timed too (down to FINEST apart)
SIZES = (1 << 10, 1 << 14, 1 << 18, 1 << 22)  # 1 KiB, 16 KiB, 256 KiB, 4 MiB (above: scaled)
FINEST = 4.0
# at each size, only the algorithms estimated within this x the fastest are timed: at the
# first, by the shipped model alone (another machine's); then corrected by the times so far
FIRST_WITHIN, WITHIN = 2.0, 1.6
REPEATS = 5  # timed calls per algorithm and size, at least (alternating; medians)
BUDGET = 1.0  # seconds: batches of REPEATS more (up to 5) while the order is not CLEAR
CLEAR = 1.3  # the order is clear when the runner-up is this x the fastest
KEEP_WITHIN = 2.0  # after a batch, those slower than this x the fastest are not timed again
TIE = 1.05  # two sizes whose fastest are within this of each other have the same fastest

log = logging.getLogger("jaxcoll")
_entries: dict[Path, dict] = {}  # cache file -> its entries, as read or written here
_cached: dict[Path, Calibration | None] = {}  # cache file -> cached()'s answer
_settled: set[tuple[Path, str]] = set()  # (file, entry) auto has measured or agreed on
_lock = threading.RLock()  # the dicts above and the files (never held while measuring)
_measuring = threading.Lock()  # one measurement at a time (never taken by the measuring)
WORKER = "jaxcoll-calibrate"  # the thread that measures


def mode() -> str:
    """``$JAXCOLL_CALIBRATE``: "1" (default), "quiet" or "0" (see the module docstring)."""
    value = os.environ.get(MODE, "1").strip().lower()
    if value in ("0", "off", "false", "no"):
        return "0"
    return "quiet" if value == "quiet" else "1"


def cache_dir() -> Path:
    """Where calibrations of this machine are kept."""
    if os.environ.get(CACHE_DIR):
        return Path(os.environ[CACHE_DIR]).expanduser()
    try:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    except RuntimeError:  # no home directory to be found
        base = Path(os.getcwd()) / ".cache"
    return Path(base).expanduser() / "jaxcoll"


@lru_cache(maxsize=None)
def _cpu_model() -> str:
    """The CPU's model name (Linux), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def fingerprint() -> dict:
    """What a calibration is of: this host, its CPU and devices, and the software timed."""
    return dict(_devices_and_software(), xla_flags=os.environ.get("XLA_FLAGS", ""))


@lru_cache(maxsize=None)
def _devices_and_software() -> dict:
    """The fingerprint but XLA_FLAGS (which a process may change between compiles)."""


    device = jax.devices()[0]
    return dict(transport=transport(), platform=device.platform, device_kind=device.device_kind,
                devices=jax.device_count(), local_devices=jax.local_device_count(),
                processes=jax.process_count(), host=socket.gethostname(), cpu=_cpu_model(),
                cores=os.cpu_count(), machine=platform.machine(),
                python=platform.python_version(), jax=jax.__version__,
                jaxlib=jaxlib.__version__, jaxcoll=metadata.version("jaxcoll"))


def cache_path(print_: dict | None = None) -> Path:
    """The cache file of this machine's fingerprint (or of ``print_``)."""
    print_ = fingerprint() if print_ is None else print_
    digest = hashlib.sha256(json.dumps(print_, sort_keys=True).encode()).hexdigest()[:16]
    kind = "".join(c if c.isalnum() else "-" for c in print_["device_kind"].lower())
    return cache_dir() / f"{print_['transport']}-{kind}-{print_['devices']}-{digest}.json"


# ----------------------------------------------------------------------------- the file

def _key(primitive: str, n: int) -> str:
    return f"{primitive} n={n}"


def _ignore(path: Path, why: str) -> dict:
    warnings.warn(f"jaxcoll: ignoring the calibration cache {path}: {why}; auto measures "
                  "again", stacklevel=3)
    return {}


def read(path: Path, print_: dict) -> dict:
    """{key: entry} of the cache file at ``path`` ({} if there is none; with a warning if it
    can't be read, is of another format or of another fingerprint)."""
    try:
        content = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        return _ignore(path, f"unreadable ({error})")
    if not isinstance(content, dict) or content.get("format") != FORMAT:
        found = content.get("format") if isinstance(content, dict) else None
        return _ignore(path, f"format {found!r}, this jaxcoll reads format {FORMAT}")
    if content.get("fingerprint") != print_:
        return _ignore(path, "made on another machine or with other software")
    entries = content.get("entries")
    return dict(entries) if isinstance(entries, dict) else _ignore(path, "no entries")


def _valid(entry, key: str) -> bool:
    """Whether ``entry`` is the one of ``key``, chose among today's algorithms of its
    collective and timed some of them (those never timed were never estimated near the
    fastest)."""
    try:
        primitive = entry["primitive"]
        rows = [(str(a), int(b), float(s)) for a, b, s in entry["timings"]]
        algorithms = list(entry["algorithms"])
        if _key(primitive, int(entry["n"])) != key or primitive not in SCHEDULES:
            return False
    except (TypeError, KeyError, ValueError):
        return False
    good = all(b > 0 and math.isfinite(s) and s > 0 for _, b, s in rows)
    return (good and bool(rows) and algorithms == auto_candidates(primitive)
            and {a for a, _, _ in rows} <= set(algorithms))


def _write(path: Path, print_: dict, entries: dict) -> None:
    """The cache file with ``entries``, replaced at once (no reader sees half of it). Where it
    can't be written (a read-only home), a warning: the entries stay this process's."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    content = dict(format=FORMAT, fingerprint=print_, entries=entries)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(content, indent=1) + "\n")
        os.replace(partial, path)
    except OSError as error:
        warnings.warn(f"jaxcoll: could not write the calibration cache {path} ({error}); this "
                      "process keeps what it measured", stacklevel=2)
    finally:
        partial.unlink(missing_ok=True)


@contextlib.contextmanager
def _file_lock(path: Path):
    """Held by one process at a time (an advisory lock on a file beside ``path``), so that
    writers of one cache file read, merge and write in turn; nothing where there is no
    ``fcntl`` or the directory can't be written (the write then warns)."""
    try:
        import fcntl  # POSIX only: elsewhere no lock (ImportError below)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.with_name(f".{path.name}.lock"), "a")
    except (ImportError, OSError):
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _file_entries(path: Path, print_: dict) -> dict:
    """The entries of ``path``, read once per process (then kept up to date here)."""
    with _lock:
        if path not in _entries:
            _entries[path] = read(path, print_)
        return _entries[path]


def _calibration(entries: dict, path: Path) -> Calibration | None:
    """The shipped calibration of this transport with the timings of ``entries``."""
    rows = tuple((entry["primitive"], entry["n"], a, int(b), float(s))
                 for entry in entries.values() for a, b, s in entry["timings"])
    if not rows:
        return None
    base = shipped(transport())
    return replace(base, timings=rows, source=f"{base.source}; timings of this machine "
                   f"from {path}")


def cached(backend: str) -> Calibration | None:
    """This machine's calibration for ``backend`` as the cache has it (nothing measured);
    None if calibrating is off, ``backend`` is not this process's transport, or none is kept."""
    if mode() == "0" or backend != transport():
        return None
    print_ = fingerprint()
    path = cache_path(print_)
    with _lock:
        if path not in _cached:
            entries = {key: entry for key, entry in _file_entries(path, print_).items()
                       if _valid(entry, key)}
            _cached[path] = _calibration(entries, path)
        return _cached[path]


# ----------------------------------------------------------------------------- measuring

def for_auto(primitive: str, n: int) -> Calibration:
    """The calibration ``auto`` ranks ``primitive`` on n ranks with: this machine's, timed
    now if the cache has no entry for them (where measuring is on and can run), else the
    shipped one."""
    if mode() == "0" or threading.current_thread().name == WORKER:
        return shipped(transport())
    print_ = fingerprint()
    path = cache_path(print_)
    key = _key(primitive, n)
    with _measuring:  # one measurement at a time; the others then find its entry
        if (path, key) not in _settled:
            entry = _file_entries(path, print_).get(key)
            if entry is not None and not _valid(entry, key):
                warnings.warn(f"jaxcoll: the calibration cache {path} has {key} timed for "
                              "other algorithms; auto measures again", stacklevel=3)
                entry = None
            if not _outside_trace(_agreed, entry) and _can_measure(n):
                timings = _measure_outside_trace(primitive, n)
                if timings is not None:
                    _save(primitive, n, timings, print_, path)
            _settled.add((path, key))
    return cached(transport()) or shipped(transport())


def _agreed(entry) -> bool:
    """Whether ``entry`` is valid in every process, and the same (alone: whether it is)."""
    if jax.process_count() == 1:
        return entry is not None

    agreed = ("primitive", "n", "algorithms", "timings")  # not each process's date or seconds
    text = (json.dumps({k: entry.get(k) for k in agreed}, sort_keys=True).encode()
            if entry is not None else b"")
    digest = np.frombuffer(hashlib.sha256(text).digest(), np.uint8)  # (32,)
    everyone = gather(np.concatenate([digest, [entry is not None]]))  # (processes, 33)
    return bool(everyone[:, -1].all() and (everyone == everyone[0]).all())


def _can_measure(n: int) -> bool:
    """Whether n ranks can be timed here: the first n devices of one process, or all the
    devices of several (each process must take part)."""
    if jax.process_count() > 1:
        return n == jax.device_count()
    return 1 < n <= jax.device_count()


def _outside_trace(fn, *args):
    """``fn(*args)`` in a thread of its own: outside any trace of this one (JAX's tracing
    state is per thread), so that it runs computations instead of staging them."""
    outcome = {}

    def run():
        try:
            outcome["value"] = fn(*args)
        except Exception as error:  # noqa: BLE001 - raised again in the caller's thread
            outcome["error"] = error

    worker = threading.Thread(target=run, name=WORKER, daemon=True)
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _measure_outside_trace(primitive: str, n: int) -> list | None:
    """:func:`measure` on the first n devices, outside any trace; None, with a warning, if
    it failed."""
    try:
        return _outside_trace(measure, primitive, _mesh(n))
    except Exception as error:  # noqa: BLE001 - auto falls back; the user is told why
        warnings.warn(f"jaxcoll: calibrating {primitive} on {n} ranks failed "
                      f"({type(error).__name__}: {error}); auto uses the shipped calibration",
                      stacklevel=4)
        return None


def calibrate(primitive: str, n: int, sizes=SIZES, repeats: int = REPEATS,
              progress: bool = True) -> dict:
    """Time ``primitive``'s algorithms on the first n devices now (:func:`measure`), keep
    them in this machine's cache file and return the entry."""
    print_ = fingerprint()
    path = cache_path(print_)
    started = time.perf_counter()
    timings = measure(primitive, _mesh(n), sizes, repeats, progress)
    with _measuring:
        _settled.add((path, _key(primitive, n)))
        return _save(primitive, n, timings, print_, path, time.perf_counter() - started)


def _save(primitive: str, n: int, timings: list, print_: dict, path: Path,
          seconds: float | None = None) -> dict:
    """``timings`` as the cache's entry for ``primitive`` on n ranks, written now."""
    entry = dict(primitive=primitive, n=n, algorithms=auto_candidates(primitive),
                 sizes=sorted({b for _, b, _ in timings}), timings=timings,
                 date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    if seconds is not None:
        entry["seconds"] = round(seconds, 1)
    with _lock, _file_lock(path):
        # Another process may have written entries since this one read the file: keep them.
        entries = _file_entries(path, print_)
        with warnings.catch_warnings():  # a file read here before was warned of then
            warnings.simplefilter("ignore")
            entries.update(read(path, print_))
        entries[_key(primitive, n)] = entry
        _cached.pop(path, None)
        _write(path, print_, entries)
    log.info("jaxcoll: calibrated %s on %d ranks: %s", primitive, n, path)
    return entry


def _mesh(n: int):
    """The first n devices (the order jax.devices() gives) as a mesh with the bench's axis."""
    return Mesh(np.array(jax.devices()[:n]), ("i",))


def input_bytes(primitive: str, size: int, n: int) -> int:
    """One rank's float32 input for nccl-tests' size S = ``size``: S for the collectives whose
    input is the larger buffer, S / n for allgather and gather (:func:`_whole`)."""
    return _whole(size // n if RECORDS[primitive].layout == "gather" else size, n)


def _whole(nbytes: float, n: int) -> int:
    """``nbytes`` rounded down to whole float32 blocks of n elements (at least one)."""
    return max(n, int(nbytes) // 4 // n * n) * 4


def measure(primitive: str, mesh, sizes=SIZES, repeats: int = REPEATS,
            progress: bool = True) -> list[list]:
    """[[algorithm, input bytes per rank, median seconds], ...] of the algorithms ``auto``
    chooses from for ``primitive`` on ``mesh`` that could be the fastest: at each of
    ``sizes`` (S), smallest first, those the estimates (:func:`_estimates`) put within
    WITHIN of the fastest (FIRST_WITHIN at the first size); then between two timed sizes
    more than FINEST apart whose fastest differ, at their geometric mean, until none are."""
    n, names = mesh.size, auto_candidates(primitive)
    model = _model(primitive, n)
    points = sorted({input_bytes(primitive, size, n) for size in sizes})  # then those between
    bar = _progress(primitive, n, len(points), progress)
    measured = {}  # input bytes -> {algorithm: seconds}
    for point in points:
        _time_point(primitive, mesh, point, names, model, measured, repeats, bar)
    while (between := _next_between(measured, n, seen=points)) is not None:
        points.append(between)
        bar.total += 1
        _time_point(primitive, mesh, between, names, model, measured, repeats, bar)
    bar.clear()
    _never_faster_when_larger(measured)
    return [[name, point, seconds] for point, times in sorted(measured.items())
            for name, seconds in sorted(times.items())]


def _time_point(primitive: str, mesh, point: int, names, model, measured: dict, repeats: int,
                bar) -> None:
    """Time at ``point`` the algorithms estimated to be contenders there, into ``measured``."""
    estimates = _estimates(point, names, model, measured)
    within = WITHIN if measured else FIRST_WITHIN
    contenders = [name for name in names if estimates[name] <= within * min(estimates.values())]
    if contenders == [_fastest_near(point, measured)]:
        bar.tick()
        return  # nothing to decide: the neighbour's fastest, and no other near it
    bar.start(f"{primitive}, {point} B per rank: {len(contenders)} of {len(names)} algorithms")
    started = time.perf_counter()
    measured[point] = time_algorithms(mesh, primitive, point, contenders, repeats,
                                      KEEP_WITHIN, BUDGET, CLEAR)
    log.debug("jaxcoll: %s at %d B per rank in %.1f s: %s", primitive, point,
              time.perf_counter() - started,
              ", ".join(f"{a} {t * 1e6:.0f} us" for a, t in sorted(measured[point].items())))
    _never_faster_when_larger(measured)
    bar.tick()


def _model(primitive: str, n: int):
    """``seconds(input bytes)`` -> {algorithm: seconds} by the shipped calibration's model (what
    the estimates start from: the model of another machine of this transport)."""
    base = shipped(transport())

    @lru_cache(maxsize=None)
    def seconds(point: int) -> dict[str, float]:
        return {name: c.seconds for name, c in ranking(primitive, n, point, base)}
    return seconds


def _estimates(point: int, names, model, measured: dict) -> dict[str, float]:
    """{algorithm: seconds expected at ``point``}: the model's, times the ratio of measured
    to modelled time of that algorithm at the timed size nearest ``point`` (if it was never
    timed, the fastest one's ratio there); the model's alone before any timing."""
    expected = model(point)
    if not measured:
        return {name: expected[name] for name in names}

    near = _nearest(measured, point)
    fastest = min(measured[near], key=measured[near].get)
    untimed = measured[near][fastest] / model(near)[fastest]
    estimates = {}
    for name in names:
        timed = [size for size, times in measured.items() if name in times]
        at = _nearest(timed, point) if timed else None
        ratio = measured[at][name] / model(at)[name] if at else untimed
        estimates[name] = expected[name] * ratio
    return estimates


def _next_between(measured: dict[int, dict[str, float]], n: int, seen) -> int | None:
    """The geometric mean of the first two neighbouring timed sizes more than FINEST apart
    whose fastest differ (beyond a tie: no algorithm within TIE of the fastest at both), if
    it is not in ``seen`` yet; else None."""
    points = sorted(measured)
    for low, high in zip(points, points[1:]):
        between = _whole(math.sqrt(low * high), n)
        if high <= FINEST * low or between in seen:
            continue
        if not _near_fastest(measured[low], TIE) & _near_fastest(measured[high], TIE):
            return between
    return None


def _never_faster_when_larger(measured: dict[int, dict[str, float]]) -> None:
    """Each algorithm's time at a size lowered to its least at any larger size: more bytes
    never take less time, so a time above that is noise (a busy machine's)."""
    least = {}  # algorithm -> its least time at the sizes seen so far, largest first
    for point in sorted(measured, reverse=True):
        for name, seconds in measured[point].items():
            least[name] = measured[point][name] = min(seconds, least.get(name, np.inf))


def _fastest_near(point: int, measured: dict[int, dict[str, float]]) -> str | None:
    """The fastest algorithm at the timed size nearest ``point`` (None before any timing)."""
    if not measured:
        return None
    near = _nearest(measured, point)
    return min(measured[near], key=measured[near].get)


def _nearest(sizes, point: int) -> int:
    """The one of ``sizes`` nearest ``point`` by ratio (the smaller of two as near)."""
    return min(sizes, key=lambda size: (abs(math.log(size / point)), size))


def _near_fastest(times: dict[str, float], within: float) -> set[str]:
    """The algorithms within ``within`` of the fastest of ``times``."""
    fastest = min(times.values())
    return {name for name, seconds in times.items() if seconds <= within * fastest}


def _progress(primitive: str, n: int, total: int, enabled: bool):
    """One line on stderr that says what is timed and how to switch it off (wherever stderr
    goes), then a progress bar on a terminal; neither with JAXCOLL_CALIBRATE=quiet."""
    say = enabled and mode() != "quiet" and jax.process_index() == 0
    if say:
        print(f"jaxcoll: timing every algorithm of {primitive} on {n} x "
              f"{jax.devices()[0].device_kind}, once for this machine (auto picks by it; "
              f"{MODE}=0 turns this off)", file=sys.stderr, flush=True)
    return Progress(total, enabled=say and sys.stderr.isatty())
