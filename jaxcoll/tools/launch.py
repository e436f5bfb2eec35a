"""``python -m jaxcoll.tools.launch --nproc P --devices-per-proc D -- COMMAND ...``: P local
processes.

A test and development convenience, like ``torchrun`` on one machine: it starts P copies of
COMMAND, each with D fake CPU devices and JAX's CPU collectives over gloo, all joined by a
coordinator on a free loopback port (127.0.0.1 only). Each process finds in its environment

    JAX_COORDINATOR_ADDRESS=127.0.0.1:PORT  JAX_NUM_PROCESSES=P  JAX_PROCESS_ID=k
    JAX_NUM_CPU_DEVICES=D  JAX_PLATFORMS=cpu  JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo

which ``jaxcoll.tools.distributed.initialize()`` reads. Their output is streamed with a ``[rank k]``
prefix. When every process has exited 0 the launcher exits 0; as soon as one fails (or is
killed), the others are stopped (SIGTERM, then SIGKILL after ``--grace`` seconds), the launcher
names the rank and why, and exits with that rank's code (128 + signal when killed). On a
cluster, use its launcher instead (``srun``, ``mpirun``): ``jax.distributed.initialize()``
detects it.

What a process's Python prints arrives in whole lines, apart from native output. Native code
writes to the same file descriptors 1 and 2 as Python does (gloo's C++ prints its connection
lines from several threads at once, a few characters per write), which would split Python's
lines and leave fragments on lines of their own. So each process gets a second pair of pipes
for native output, named in ``JAXCOLL_LAUNCH_NATIVE_OUTPUT_FDS``: ``initialize()`` points file
descriptors 1 and 2 at them and keeps ``sys.stdout`` and ``sys.stderr`` on the first pair. What
comes through the second pair (native code's output, and that of programs the process starts
after ``initialize()``) is streamed with a ``[rank k native]`` prefix, to stdout or stderr as
written; gloo's lines may still be jumbled among themselves there. A program that does not call
``initialize()`` (or is not Python) has all its output under ``[rank k]``. Lines that arrive on
different pipes keep no order between them.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

# In a process's environment: "OUT,ERR", its file descriptors for native output (see the
# module's docstring); jaxcoll.tools.distributed.initialize() takes them (and removes it).
from jaxcoll.tools.console import Parser
from jaxcoll.tools.distributed import NATIVE_OUTPUT_FDS

POLL_SECONDS = 0.05


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rank_environment(rank: int, nproc: int, devices: int, port: int,
                     base: dict | None = None) -> dict:
    """The environment of process ``rank``: the caller's, plus who it is and where to meet."""
    env = dict(os.environ if base is None else base)
    env.update({
        "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
        "JAX_COORDINATOR_BIND_ADDRESS": f"127.0.0.1:{port}",  # not every interface
        "JAX_NUM_PROCESSES": str(nproc),
        "JAX_PROCESS_ID": str(rank),
        "JAX_NUM_CPU_DEVICES": str(devices),
        "JAX_PLATFORMS": "cpu",
        "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
        "PYTHONUNBUFFERED": "1",  # lines reach the launcher as they are printed
    })
    return env



def _stream(pipe, label: str, out, lock: threading.Lock) -> None:
    """Copy ``pipe`` to ``out`` line by line, each line prefixed with ``[label]``."""
    for raw in iter(pipe.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        with lock:
            out.write(f"[{label}] {line}\n")
            out.flush()
    pipe.close()


def describe_exit(code: int) -> str:
    """'exited with code 3' or 'was killed by SIGKILL'."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def shell_code(code: int) -> int:
    """A child's return code as a shell would report it (128 + signal when killed)."""
    return 128 - code if code < 0 else code


@dataclass
class Group:
    """The P processes of one launch and the threads that stream their output."""
    processes: list = field(default_factory=list)
    streams: list = field(default_factory=list)

    def start(self, command: list[str], nproc: int, devices: int) -> None:
        port, lock = free_port(), threading.Lock()
        for rank in range(nproc):
            (native_out, out_end), (native_err, err_end) = os.pipe(), os.pipe()
            env = rank_environment(rank, nproc, devices, port)
            env[NATIVE_OUTPUT_FDS] = f"{out_end},{err_end}"
            try:
                process = subprocess.Popen(
                    command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    pass_fds=(out_end, err_end),
                    start_new_session=True)  # its own process group: stopped with its children
            except BaseException:
                for fd in (native_out, native_err):
                    os.close(fd)
                raise
            finally:  # the child holds the write ends: EOF once it has exited
                os.close(out_end)
                os.close(err_end)
            self.processes.append(process)
            for pipe, label, out in (
                    (process.stdout, f"rank {rank}", sys.stdout),
                    (process.stderr, f"rank {rank}", sys.stderr),
                    (os.fdopen(native_out, "rb"), f"rank {rank} native", sys.stdout),
                    (os.fdopen(native_err, "rb"), f"rank {rank} native", sys.stderr)):
                thread = threading.Thread(target=_stream, args=(pipe, label, out, lock),
                                          daemon=True)
                thread.start()
                self.streams.append(thread)

    def first_failure(self) -> tuple[int, int] | None:
        """(rank, return code) of the first process found failed, if any."""
        for rank, process in enumerate(self.processes):
            code = process.poll()
            if code not in (None, 0):
                return rank, code
        return None

    def running(self) -> bool:
        return any(process.poll() is None for process in self.processes)

    def stop(self, grace: float) -> None:
        """SIGTERM every process group still alive, SIGKILL what is left after ``grace`` s."""
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.running() and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        self._signal(signal.SIGKILL)
        for process in self.processes:
            process.wait()

    def _signal(self, signum: int) -> None:
        for process in self.processes:
            try:  # the whole group: a rank's own children go too
                os.killpg(process.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def finish_output(self) -> None:
        for thread in self.streams:
            thread.join(timeout=5)


def run(command: list[str], nproc: int, devices: int, grace: float = 5.0,
        timeout: float | None = None) -> int:
    """Run ``command`` as ``nproc`` processes; return 0 or the first failing rank's code."""
    group = Group()
    started = time.monotonic()
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

    def interrupted(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for signum in previous:
        signal.signal(signum, interrupted)
    try:
        group.start(command, nproc, devices)
        while group.running():
            failure = group.first_failure()
            if failure is not None:
                rank, code = failure
                _say(f"rank {rank} {describe_exit(code)}; stopping the other "
                     f"{nproc - 1} process{'es' if nproc > 2 else ''}")
                group.stop(grace)
                return shell_code(code)
            if timeout is not None and time.monotonic() - started > timeout:
                _say(f"timed out after {timeout:g} s; stopping all {nproc} processes")
                group.stop(grace)
                return 124
            time.sleep(POLL_SECONDS)
        failure = group.first_failure()
        if failure is not None:
            rank, code = failure
            _say(f"rank {rank} {describe_exit(code)}")
            return shell_code(code)
        return 0
    except KeyboardInterrupt as why:
        _say(f"interrupted ({why or 'SIGINT'}); stopping all {nproc} processes")
        group.stop(grace)
        return 130
    finally:
        group.finish_output()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _say(message: str) -> None:
    print(f"[jaxcoll.tools.launch] {message}", file=sys.stderr, flush=True)


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = Parser(
        prog=prog, usage=f"{prog} [--nproc P] [--devices-per-proc D] -- COMMAND ...",
        description="Start P local processes of COMMAND joined by jax.distributed (gloo CPU "
                    "collectives, D fake CPU devices each, coordinator on 127.0.0.1), stream "
                    "their output prefixed [rank k], and exit with the first failure's code.")
    parser.add_argument("--nproc", type=int, default=2, help="number of processes (default 2)")
    parser.add_argument("--devices-per-proc", type=int, default=4,
                        help="fake CPU devices in each process (default 4)")
    parser.add_argument("--grace", type=float, default=5.0,
                        help="seconds between SIGTERM and SIGKILL when stopping (default 5)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="stop everything after this many seconds (exit 124)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command each process runs, after --")
    return parser


def main(argv=None, prog: str = "python -m jaxcoll launch") -> int:
    """Start the processes of the command line ``argv``; their first failure's exit code."""
    parser = _parser(prog)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error(f"no command given: {parser.prog} --nproc 2 -- python script.py")
    for flag, value in (("--nproc", args.nproc), ("--devices-per-proc", args.devices_per_proc)):
        if value < 1:
            parser.error(f"{flag} must be >= 1, got {value}")
    if args.grace < 0 or (args.timeout is not None and args.timeout <= 0):
        parser.error("--grace must be >= 0 and --timeout > 0")
    return run(command, args.nproc, args.devices_per_proc, args.grace, args.timeout)


if __name__ == "__main__":
    sys.exit(main(prog="python -m jaxcoll.tools.launch"))
