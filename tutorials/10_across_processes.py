# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% [markdown]
# # 10 · Across real processes
#
# Every notebook so far ran its 8 "devices" as threads of one Python process, sharing one
# memory. There `lax.psum` is a reduction over buffers it can read directly, and a jaxcoll
# ring is a chain of memory copies. This notebook starts several processes that share
# nothing and talk over TCP, runs the same collectives across them, and looks at what
# changes.
#
# **What you will learn**
#
# - how `python -m jaxcoll.launch` starts P processes and how `jaxcoll.distributed.initialize()`
#   joins them into one mesh, so that unchanged jaxcoll code runs across them;
# - that `jaxcoll.ring_allreduce` still equals `lax.psum` bit for bit, and still compiles to
#   nothing but `collective-permute`s;
# - what the transport is on CPU (gloo over TCP on 127.0.0.1), what one `psum` and one
#   `ppermute` each turn into there, and why this is a fairer comparison than fake devices;
# - how to read the timings (printed, not asserted: this machine is shared and noisy).
#
# **Prerequisites**: notebook 01 (the ring) and notebook 05 (the α-β model and `auto`).
#
# The notebook itself only starts other Python processes; all their JAX work happens there.
# Its own first cell still sets up 8 fake CPU devices, as in every notebook, but only
# `jaxcoll`'s cost model is used here.

# %%
import os
os.environ["JAX_PLATFORMS"] = "cpu"          # fake devices live on the CPU, even where a GPU is present
import jax
jax.config.update("jax_num_cpu_devices", 8)  # 8 fake CPU devices; must come before any JAX work

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import jaxcoll
from lesson import size_label                # tutorials/lesson.py: the notebooks' plumbing

PROCESSES = 4                                # processes for the correctness run
DEMO = Path("_across_processes_demo.py").resolve()  # the script each process runs
# The launched processes get their coordinates from the launcher, not from this kernel:
CLEAN_ENV = {key: value for key, value in os.environ.items() if not key.startswith("JAX_")}


def launch(nproc, *command):
    """Run `command` as nproc one-device processes under jaxcoll.launch; their output."""
    done = subprocess.run([sys.executable, "-m", "jaxcoll.launch", "--nproc", str(nproc),
                           "--devices-per-proc", "1", "--timeout", "240", "--", *command],
                          capture_output=True, text=True, timeout=300, env=CLEAN_ENV)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def medians(path):
    """(meta, {(size, algorithm): median µs}) from a jaxcoll.bench --json file, all exact."""
    report = json.loads(Path(path).read_text())
    assert all(row["wrong"] == 0 for row in report["results"])
    return report["meta"], {(row["size"], row["algorithm"]): row["time_us_median"]
                            for row in report["results"]}

# %% [markdown]
# ## 1. The launcher
#
# `python -m jaxcoll.launch --nproc P --devices-per-proc D -- COMMAND` starts P copies of
# COMMAND. It plays the part `torchrun` plays for PyTorch on one machine: it picks a free
# port on 127.0.0.1 for a coordinator and tells each process who it is through its
# environment. Here is what each of 4 processes finds:

# %%
keys = ["JAX_PROCESS_ID", "JAX_NUM_PROCESSES", "JAX_COORDINATOR_ADDRESS", "JAX_NUM_CPU_DEVICES",
        "JAX_CPU_COLLECTIVES_IMPLEMENTATION"]
show = f"import os; print(*(os.environ[k] for k in {keys}))"  # a one-line script
output = launch(PROCESSES, sys.executable, "-c", show)
print(output)
lines = sorted(output.splitlines())
assert [line.split()[:4] for line in lines] == [
    ["[rank", f"{k}]", str(k), str(PROCESSES)] for k in range(PROCESSES)]
assert len({line.split()[4] for line in lines}) == 1     # one coordinator address for all
assert all(line.split()[-1] == "gloo" for line in lines)

# %% [markdown]
# Process k is told its id, the process count, where the coordinator listens, how many fake
# CPU devices to make (`--devices-per-proc`), and that JAX's CPU collectives should go over
# **gloo**, Meta's collective library (PyTorch's CPU backend), over TCP. The launcher prefixes
# every line with `[rank k]` (what native code such as gloo prints, once a script has called
# `initialize()`, with `[rank k native]`), and if one process fails it stops the others and
# exits with that process's code.
#
# A script joins the run with `jaxcoll.distributed.initialize()` before any other JAX work.
# Under the launcher it calls `jax.distributed.initialize` with those coordinates. On a
# cluster (`srun`, `mpirun`) it lets JAX detect the cluster, and alone it does nothing. After
# it, `jax.devices()` lists every process's devices, process 0's first, so a `Mesh` over them
# spans the processes. Nothing else in the script changes.
#
# ## 2. The same allreduce, across 4 processes
#
# Each of the 4 processes runs this script, with one device each, so every rank of the mesh
# is in a process of its own and every transfer crosses a process boundary:

# %%
print(DEMO.read_text())

# %% [markdown]
# Every process builds the same input, so each can check its own ranks' results against the
# exact sum (integer values: every order of summation gives the same bits). The counts of
# mismatches are then added up over processes with `jaxcoll.distributed.gather` (JAX's
# `process_allgather`). Process 0 prints the result:

# %%
output = launch(PROCESSES, sys.executable, str(DEMO))
print(output)
(line,) = [line for line in output.splitlines() if " RESULT " in line]
result = json.loads(line.split(" RESULT ", 1)[1])
assert (result["processes"], result["ranks"]) == (PROCESSES, PROCESSES)
assert result["wrong"] == {"ring": 0, "psum": 0, "auto": 0}
print("ring, psum and auto: every rank in every process has the exact sum")

# %% [markdown]
# Now what each program compiled to. In one process of each, the collective ops in the
# optimized HLO, and the trip counts of its loops:

# %%
for name in ("ring", "psum", "auto"):
    trips = result["loop_trips"][name]
    loops = f"in loops run {trips} times" if trips else "no loops"
    print(f"{name:>5}: {result['hlo'][name]}, {loops}")
assert set(result["hlo"]["ring"]) == {"collective-permute"}      # nothing but ppermutes
assert set(result["hlo"]["psum"]) == {"all-reduce"}
assert "all-reduce" not in result["hlo"]["auto"]
ring = jaxcoll.schedule("allreduce", "ring", PROCESSES)
assert sum(result["loop_trips"]["ring"]) == ring.n_rounds == 2 * (PROCESSES - 1)
chosen = result["auto"]  # what auto ran in the processes, for the script's 100000 float32
assert result["transport"] == "gloo"  # so auto ranked with the calibration measured over gloo
assert chosen == jaxcoll.choose("allreduce", PROCESSES, 100_000 * 4, jaxcoll.calibration("gloo"))
print(f"auto chose {chosen!r} for 400 kB on {PROCESSES} ranks; the ring has {ring.n_rounds} "
      "rounds")

# %% [markdown]
# The ring is two loops, reduce-scatter then allgather, each running one `collective-permute`
# n-1 = 3 times: 6 rounds, as its schedule says. `psum` is a single `all-reduce`. `auto`
# knew it runs across processes (`jaxcoll.model.transport()` is `"gloo"`), so it ranked the
# algorithms with the calibration measured over gloo, not the one-process one, and compiled
# to `collective-permute`s only.
#
# ## 3. What changes across processes
#
# What those ops do at run time, in XLA's CPU runtime with gloo
# (`xla/backends/cpu/collectives/gloo_communicator.cc`):
#
# - **`all-reduce`** (`psum`) is **one call** to `gloo::allreduce`, and XLA asks it for
#   gloo's **ring** algorithm. So `psum` here runs the same algorithm as jaxcoll's ring, a
#   ring reduce-scatter and then a ring allgather, but all of it inside gloo's C++, without
#   returning to XLA between steps.
# - **`collective-permute`** (one `ppermute`) is one gloo `send` to the target process and
#   one `recv` from the source, both waited for before the op ends. jaxcoll's ring runs 2(n-1)
#   of them, one after another. Each is a separate trip through XLA's runtime, and a separate
#   gloo exchange with its own start-up and its own wait.
#
# In one process things are different. There `psum` reads the other "devices'" buffers
# directly after one rendezvous of threads, while a ring of `ppermute`s copies every chunk
# and waits for its partner 2(n-1) times: the shared memory favours the built-in. Across
# processes nothing is shared. Both go through the same TCP sockets on the same loopback
# interface and run the same ring algorithm, so what is left between them is the cost of
# 2(n-1) separate exchanges against one: α, in the terms of notebook 05. That is the fair
# fight.
#
# ## 4. Timings
#
# The same benchmark twice: `python -m jaxcoll.bench` in one process with P fake devices,
# then under the launcher, P processes of one device each. The benchmark times the
# algorithms in alternation (`jaxcoll.timing.time_alternating`) and reports medians. Across
# processes a call's time is its slowest process's. It also checks every result against
# `psum` (`xla` in its tables), with zero tolerance.
#
# One process per core at most: with more processes than cores, a process that is not
# running holds up every other one, and the timings measure the operating system's
# scheduler instead.

# %%
cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
TIMED = max(2, min(PROCESSES, cores))
SIZES = ["-b", "4K", "-e", "4M", "-f", "32"]         # 4 KiB, 128 KiB and 4 MiB per rank
bench = [sys.executable, "-m", "jaxcoll.bench", "--devices", str(TIMED), *SIZES,
         "--op", "allreduce", "--algorithms", "ring,auto", "--iters", "15", "-q"]
scratch = Path(tempfile.mkdtemp())                 # outside the repository

subprocess.run([*bench, "--json", str(scratch / "one.json")], check=True, text=True,
               capture_output=True, timeout=300, env=dict(CLEAN_ENV, JAX_PLATFORMS="cpu"))
print(launch(TIMED, *bench, "--json", str(scratch / "many.json")))

# %% [markdown]
# That is process 0's table (with gloo's connection messages). Side by side with the
# one-process run, in microseconds, followed by what n this machine allowed and which
# algorithms have the same rounds and bytes on that many ranks (the model cannot tell those
# apart, and neither could a table of them):

# %%
(one_meta, one), (many_meta, many) = medians(scratch / "one.json"), medians(scratch / "many.json")
assert (one_meta["processes"], many_meta["processes"]) == (1, TIMED)
sizes = sorted({size for size, _ in one})
print(f"allreduce, median µs per call: one process | {TIMED} processes (gloo over TCP)")
print(f"{'size':>9} |" + " |".join([f"{'psum':>7} {'ring':>7} {'auto':>7} {'ring/psum':>9}"] * 2))
for size in sizes:
    cells = [" ".join(f"{table[size, name]:7.0f}" for name in ("xla", "ring", "auto"))
             + f" {table[size, 'ring'] / table[size, 'xla']:9.2f}" for table in (one, many)]
    print(f"{size_label(size):>9} |" + " |".join(cells))

alike = {}  # (rounds, bytes each rank sends for a 1-byte buffer): the algorithms with them
for name in set(jaxcoll.algorithms("allreduce")) - {"auto", "xla", "hierarchical"}:
    schedule = jaxcoll.schedule("allreduce", name, TIMED)  # (hierarchical needs a 2-D mesh)
    sent = jaxcoll.cost(schedule, 1.0, alpha=0.0, beta=1.0).bytes_sent
    alike.setdefault((schedule.n_rounds, sent), []).append(name)
print(f"\nn = {TIMED} ranks ({cores} cores here): {len(alike)} distinct (rounds, bytes) among "
      f"{sum(map(len, alike.values()))} algorithms")
for (rounds, sent), names in sorted(alike.items()):
    print(f"  rounds {rounds}, {sent:.2f} N sent per rank: {', '.join(sorted(names))}")

gloo = jaxcoll.calibration("gloo")
assert gloo.per_algorithm == () and gloo.links == "shared"  # one medium, one fit for all
for transport in ("cpu", "gloo"):
    print(f"auto picks with the {transport} calibration:",
          {size_label(size): jaxcoll.choose("allreduce", TIMED, size,
                                            jaxcoll.calibration(transport)) for size in sizes})

# %% [markdown]
# How to read it (the numbers above are from this machine on this run, so check them against
# what follows rather than trusting the words):
#
# - **n**: one process per core at most, so the table is for the n printed under it, which
#   can be far below 8. The fewer the ranks, the fewer distinct schedules (listed under the
#   table): on 2 ranks all but recursive doubling are two rounds sending N per rank, so
#   there the table compares psum's one gloo call with the ring's 2(n-1) `ppermute`s, not
#   algorithms. [bench/RESULTS.md](../bench/RESULTS.md) section 9 times them all on 8
#   processes.
# - **One process**: `psum` is a single in-memory reduction, and the ring pays 2(n-1)
#   rendezvous and copies, so ring/psum is above 1 (notebooks 01 and 05 measure it on 8
#   devices).
# - **Across processes**, every call costs several times more, since each now crosses the
#   kernel's TCP stack between processes. `psum` loses its shared-memory advantage, and
#   ring/psum falls toward 1, or below it. We have not traced where gloo's `allreduce` spends
#   its time. The point is that neither side has a built-in advantage any more.
# - **`auto`** knows where it runs: in one process it ranks with `cpu.json` (fake devices),
#   across processes with `gloo.json`, measured by `jaxcoll.calibrate(links="shared")` under
#   the launcher on 8 processes of this machine. There every message crosses one medium, the
#   host's cores and memory, so a round costs α + (its messages) x overhead + (all its bytes)
#   x β, whichever ranks they join, and the fit needs no per-algorithm factors (asserted
#   above: `per_algorithm == ()`, `links == "shared"`; `jaxcoll.explain` prints it).
#   Calibrate on your own links the same way and pass the result to `jaxcoll.set_calibration`.
# - **Noise**: this machine is shared. The interquartile ranges in the table above say how
#   far to trust each median. None of the comparisons is asserted.
#
# ## 5. On a real cluster
#
# The script of section 2 is what runs on a cluster, unchanged. A cluster's own launcher
# (SLURM's `srun`, Open MPI's `mpirun`, a Kubernetes job) takes the place of
# `jaxcoll.launch`, and `jaxcoll.distributed.initialize()` hands over to
# `jax.distributed.initialize()`, which detects it. On GPUs, JAX uses NCCL instead of gloo.
# There XLA turns `psum` into one NCCL all-reduce kernel (ring or tree, NCCL's choice, with
# the steps pipelined on the GPU), and each `ppermute` into an NCCL send/recv pair. The same
# trade-off applies: jaxcoll's algorithms pay one launch per round, which is why `auto`
# needs a calibration measured on those links (README, "Several processes and hosts").
#
# ## Try it
#
# **Which transfers cross a process boundary?** With `--nproc 2 --devices-per-proc 2` the
# mesh has 4 ranks: ranks 0 and 1 live in process 0, and ranks 2 and 3 in process 1
# (`jax.devices()` lists process 0's devices first). In every round of the ring allreduce,
# rank r sends to rank r + 1 (mod 4), so 2 of the 4 transfers cross processes (1 -> 2 and
# 3 -> 0), and the other 2 are copies inside a process. Each round waits for its slowest
# transfer.
#
# Write `my_crossings(nproc, devices_per_proc, schedule)`: the number of transfers, over all
# rounds of `schedule` (a `jaxcoll.Schedule`: `schedule.rounds`, each round's `.transfers`,
# each transfer's `.src` and `.dst`), that go from one process to another. Then compare the
# ring with `recursive_doubling` on 2 x 4.
#
# *Hint:* rank r lives in process `r // devices_per_proc`.
#
# <details><summary>Answer</summary>
#
# ```python
# def my_crossings(nproc, devices_per_proc, schedule):
#     return sum(t.src // devices_per_proc != t.dst // devices_per_proc
#                for round_ in schedule.rounds for t in round_.transfers)
# ```
#
# On 2 x 4 the ring crosses 2 times a round, 28 times over its 14 rounds. Recursive doubling
# crosses 8 times, all in its one round at distance 4, which sends the whole buffer, not a
# 1/8 chunk.
# </details>

# %%
def my_crossings(nproc, devices_per_proc, schedule):
    raise NotImplementedError("your code here")


def check_exercise(crossings):
    for nproc, per_proc in [(2, 2), (2, 4), (4, 2), (8, 1)]:
        for algorithm in ("ring", "recursive_doubling", "tree"):
            schedule = jaxcoll.schedule("allreduce", algorithm, nproc * per_proc)
            want = sum(t.src // per_proc != t.dst // per_proc
                       for round_ in schedule.rounds for t in round_.transfers)
            try:
                got = crossings(nproc, per_proc, schedule)
            except NotImplementedError:
                print("not done yet: fill in my_crossings")
                return
            assert got == want, f"{algorithm} on {nproc} x {per_proc}: {got}, expected {want}"
    print("correct: you can now count which rounds pay the network's price")


check_exercise(my_crossings)
