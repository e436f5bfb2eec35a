"""Real systems as topologies, with where each number comes from, and the published
measurements the simulator is checked against (bench/MODEL.md, "Real links").

Link parameters (per GPU, each way):

- NVLink: the effective bandwidth NCCL's own topology model gives one NVLink (NVIDIA/nccl
  src/graph/topo.h: ``SM80_NVLINK_BW`` 20 GB/s for A100, ``SM90_NVLINK_BW`` 20.6 GB/s for H100)
  times the links per GPU (12 on A100, 18 on H100): 240 and 370.8 GB/s. The line rates are 300
  and 450 GB/s; NCCL's developers put the protocol overhead at ~20% (NVIDIA/nccl-tests#212).
- NVLink α: 3.4 µs, NCCL's latency per ring step over NVLink with its Simple protocol
  (src/graph/tuning.cc, ``hwLat``).
- NICs: the InfiniBand line rate (HDR 200 Gb/s = 25 GB/s, NDR 400 Gb/s = 50 GB/s), α 10 µs
  (an assumption, no source: one RDMA message through a switch). It matters: at 128 MiB on
  24 ranks it is 15% of each ring step (bench/MODEL.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxcoll.analysis.topology import Topology, fully_connected, nodes, simulate
from jaxcoll.ir.families import build_schedule
from jaxcoll.ir.records import RECORDS

NVLINK_ALPHA = 3.4e-6
NIC_ALPHA = 10e-6
GPUS = {  # name: (NVLink GB/s per GPU each way, NIC GB/s each way)
    "a100": (12 * 20.0, 25.0),
    "h100": (18 * 20.6, 50.0),
}


def dgx(gpu: str = "h100", n_nodes: int = 1, nics: int = 8) -> Topology:
    """``n_nodes`` DGX-like nodes of 8 ``gpu`` on NVSwitch, ``nics`` NICs each (see above)."""
    nvlink_gbs, nic_gbs = GPUS[gpu]
    return nodes(n_nodes, 8, nvlink=(NVLINK_ALPHA, 1 / (nvlink_gbs * 1e9)),
                 nic=(NIC_ALPHA, 1 / (nic_gbs * 1e9)), nics=nics,
                 name=f"{n_nodes} x DGX {gpu.upper()} ({nics} NICs per node)")


# AMD Instinct MI300X platform: 8 GPUs, each with 7 Infinity Fabric links, one to every other
# GPU, 128 GB/s per link both ways together (AMD's MI300X data sheet: "peak Infinity Fabric
# link bandwidth 128 GB/s", 896 GB/s of peer bandwidth per GPU); α 5 µs is an assumption (no
# source), near NCCL's NVLink step latency above.
MI300X_LINK_GBS = 64.0  # each way
MI300X_ALPHA = 5e-6


def mi300x(n: int = 8) -> Topology:
    """``n`` MI300X-like GPUs fully connected by Infinity Fabric, a 64 GB/s link each way per
    pair (the platform has 8; 16 is two such nodes' GPUs as one fabric, for comparison)."""
    return fully_connected(n, alpha=MI300X_ALPHA, beta=1 / (MI300X_LINK_GBS * 1e9),
                           name=f"{n} x MI300X, fully connected (Infinity Fabric)")


@dataclass(frozen=True)
class Published:
    """One measurement from a public source: nccl-tests' busbw of a collective."""

    system: str
    topology: Topology
    primitive: str
    nbytes: int  # nccl-tests' size: the buffer per rank
    busbw: float  # GB/s, measured
    source: str
    channels: int = 1  # rings NCCL runs at once (its channels), each leaving nodes by its NIC

    def predicted_busbw(self) -> float:
        """busbw (GB/s) the simulator predicts for NCCL's ring on this system."""
        n = self.topology.n
        schedule = build_schedule(self.primitive, "ring", n)
        seconds = simulate(schedule, self.nbytes, self.topology, channels=self.channels).seconds
        return self.nbytes / seconds * RECORDS[self.primitive].busbw_factor(n) / 1e9


PUBLISHED = (
    Published("8 x A100-SXM4, NVSwitch", dgx("a100"), "allreduce", 8 << 30, 230.0,
              "~230 GB/s: the figure NCCL users report for 8 x A100 at large sizes "
              "(NVIDIA/nccl#583, an 8 x A100-SXM4-40GB sweep to 8 GiB)"),
    Published("8 x H100, NVSwitch, NCCL_ALGO=Ring", dgx("h100"), "allreduce", 8 << 30, 370.0,
              "370 GB/s: NCCL's developer on the ring's busbw on 8 x H100 "
              "(NVIDIA/nccl-tests#212)"),
    Published("3 nodes x 8 A100, 4 x HDR 200 Gb/s NICs each", dgx("a100", 3, nics=4),
              "allreduce", 128 << 20, 96.0,
              "peak ~96 GB/s at 128 MiB of a 100 GB/s line rate, 24 ranks (NVIDIA/nccl-tests#119)",
              channels=8),
)


def validation() -> list[tuple[Published, float, float]]:
    """(published, predicted busbw, relative error) for every published measurement."""
    rows = []
    for published in PUBLISHED:
        predicted = published.predicted_busbw()
        rows.append((published, predicted, predicted / published.busbw - 1))
    return rows
