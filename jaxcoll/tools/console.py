"""What the command-line tools share: sizes as people write them, a progress bar, JAX's start,
and one way to refuse a mistake.

``parse_size`` and ``format_size`` speak nccl-tests' units (K = 1024); :class:`Progress` draws
on stderr; :func:`start_jax` joins a launcher's processes or asks for fake CPU devices;
:class:`Parser` says every mistake in one line and exits with status 2, and
:func:`writable`, :func:`readable` and :func:`needs` check outputs, inputs and optional
dependencies before any work starts.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import time

import jax

from jaxcoll.tools.distributed import initialize

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

_SIZE = re.compile(r"(\d+(?:\.\d*)?)\s*([KMG]?)(i?B)?", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from '64', '64B', '1K', '1KiB', '16M', '16MiB', '1G' (K = 1024, as nccl-tests)."""
    match = _SIZE.fullmatch(str(text).strip())
    if not match or (match[3] and match[3][0] in "iI" and not match[2]):
        raise ValueError(f"{text!r} is not a size; use bytes like 64, 1K, 1KiB, 16M, 16MiB, 1G")
    value = float(match[1]) * UNITS[match[2].upper()]
    if value != int(value):
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(value)


class Parser(argparse.ArgumentParser):
    """An ``argparse`` parser whose errors are one line on stderr, ``PROG: error: WHAT (PROG
    --help)``, with exit status 2 (argparse's own adds a usage line)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def size_arg(text: str) -> int:
    """A size for ``type=``: bytes as :func:`parse_size` reads them, at least 1."""
    try:
        nbytes = parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if nbytes < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a size must be at least 1 byte")
    return nbytes


def writable(parser: argparse.ArgumentParser, flag: str, path: str | None) -> None:
    """Refuse ``path`` (an output) now, before any work, if it cannot be written."""
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        parser.error(f"argument {flag}: {path} is a folder, not a file")
    if not os.path.isdir(folder):
        parser.error(f"argument {flag}: {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        parser.error(f"argument {flag}: {path} cannot be written (permission denied)")


def readable(parser: argparse.ArgumentParser, path: str) -> None:
    """Refuse ``path`` (an input file) now if it is missing, a folder or unreadable."""
    if not os.path.exists(path):
        parser.error(f"{path}: no such file")
    if os.path.isdir(path):
        parser.error(f"{path} is a folder, not a file")
    if not os.access(path, os.R_OK):
        parser.error(f"{path} cannot be read (permission denied)")


def needs(parser: argparse.ArgumentParser, module: str, extra: str, what: str) -> None:
    """Refuse ``what`` now if the optional ``module`` is missing, naming the extra to install."""
    if importlib.util.find_spec(module) is None:
        parser.error(f"{what} needs {module}, which is not installed: "
                     f"pip install \"jaxcoll[{extra}]\"")


def format_size(nbytes: float) -> str:
    """'64 B', '1 KiB', '1.5 MiB': the largest binary unit that keeps the number >= 1."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


class Progress:
    """A progress bar on stderr: redrawn in place on a terminal, a line per label otherwise."""

    def __init__(self, total: int, enabled: bool = True, stream=None, width: int = 30):
        self.total, self.done, self.width, self.enabled = total, 0, width, enabled
        self.stream = stream or sys.stderr
        self.tty = enabled and self.stream.isatty()
        self.label, self.drawn_at = "", 0.0

    def start(self, label: str) -> None:
        """Name what runs next (on a line of its own when stderr is not a terminal)."""
        self.label = label
        if self.enabled and not self.tty:
            print(f"[{self.done}/{self.total}] {label}", file=self.stream, flush=True)
        self.draw()

    def tick(self) -> None:
        """One step done."""
        self.done += 1
        if time.monotonic() - self.drawn_at > 0.1 or self.done == self.total:
            self.draw()

    def draw(self) -> None:
        """Redraw the bar (terminal only)."""
        if self.tty:
            filled = self.width * self.done // max(1, self.total)
            bar = "#" * filled + "." * (self.width - filled)
            self.stream.write(f"\r[{bar}] {self.done}/{self.total} {self.label}\033[K")
            self.stream.flush()
            self.drawn_at = time.monotonic()

    def clear(self) -> None:
        """Erase the bar so that other output can be written."""
        if self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()


def start_jax(devices: int) -> None:
    """Join the other processes, if launched with some (their launcher set the devices); else
    ask for ``devices`` fake CPU devices: harmless elsewhere, too late once JAX has started."""
    if initialize() > 1:
        return
    try:
        jax.config.update("jax_num_cpu_devices", devices)
    except RuntimeError:
        pass  # JAX started already (e.g. under pytest): its devices are used
