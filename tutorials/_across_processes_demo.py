"""One process of tutorial 10's multi-process run; start several with the launcher:

    python -m jaxcoll.launch --nproc 4 --devices-per-proc 1 -- python tutorials/_across_processes_demo.py

Each process joins the others, builds one mesh of every process's devices, and runs the same
allreduce three ways (jaxcoll's ring, lax.psum, jaxcoll's auto) on integer-valued float32
inputs. Process 0 prints one line of JSON: the mismatches (all processes' counts added up),
the collectives each compiled program contains, and the transport and algorithm auto chose.
"""

import jaxcoll.distributed

jaxcoll.distributed.initialize()  # before any other JAX work: join the other processes

import json
import re

import jax
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jaxcoll
from jaxcoll.distributed import gather, local_blocks

AXIS = "i"
mesh = Mesh(np.array(jax.devices()), (AXIS,))  # every process's devices, process 0's first
n = mesh.size


def program(allreduce):
    """jit(shard_map): row r of an (n, count) array is rank r's x; every rank gets the sum."""
    return jax.jit(jax.shard_map(lambda rows: allreduce(rows[0])[None], mesh=mesh,
                                 in_specs=P(AXIS), out_specs=P(AXIS)))


programs = {"ring": program(lambda x: jaxcoll.ring_allreduce(x, AXIS)),
            "psum": program(lambda x: lax.psum(x, AXIS)),
            "auto": program(lambda x: jaxcoll.allreduce(x, AXIS))}

# Every process makes the same (n, count) array and hands JAX the rows it holds.
values = np.random.default_rng(0).integers(-8, 9, (n, 100_000)).astype(np.float32)
x = jax.make_array_from_callback(values.shape, NamedSharding(mesh, P(AXIS)),
                                 lambda index: values[index])
exact = values.sum(axis=0)  # integers: every order of the sum gives these bits

wrong = {}
for name, run in programs.items():
    rows = local_blocks(run(x))  # this process's ranks' results, (1, count) each
    wrong[name] = sum(int(np.sum(row[0] != exact)) for row in rows)
wrong = dict(zip(programs, gather(list(wrong.values())).sum(axis=0).tolist()))

hlo, loops = {}, {}
for name, run in programs.items():
    text = run.lower(x).compile().as_text()
    ops = re.findall(r"= \S+ (all-reduce|collective-permute|all-gather|reduce-scatter|"
                     r"all-to-all)(?:-start)?\(", text)
    hlo[name] = {op: ops.count(op) for op in sorted(set(ops))}
    loops[name] = [int(trips) for trips in re.findall(r'"known_trip_count":\{"n":"(\d+)"', text)]

if jax.process_index() == 0:
    print("RESULT " + json.dumps({"processes": jax.process_count(), "ranks": n,
                                  "wrong": wrong, "hlo": hlo, "loop_trips": loops,
                                  "transport": jaxcoll.model.transport(),
                                  "auto": jaxcoll.choose("allreduce", n, values[0].nbytes)}))
