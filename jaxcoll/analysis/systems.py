"""Real systems as topologies, with where each number comes from, and the published
measurements the simulator is checked against (bench/MODEL.md, "Real links").

:func:`cluster` describes A100/H100/H200/B200/MI300X nodes from NCCL's (RCCL's) own topology
constants and carries a :class:`System` for :func:`jaxcoll.analysis.nccl.predict`; :func:`dgx`
and :func:`mi300x` are the simulator's older presets, below.

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

import dataclasses
from dataclasses import dataclass

from jaxcoll.analysis.topology import Topology, fully_connected, nodes, simulate
from jaxcoll.ir.families import build_schedule
from jaxcoll.ir.records import RECORDS

NVLINK_ALPHA = 3.4e-6
NIC_ALPHA = 10e-6


def dgx(gpu: str = "h100", n_nodes: int = 1, nics: int = 8) -> Topology:
    """``n_nodes`` DGX-like nodes of 8 ``gpu`` on NVSwitch, ``nics`` NICs each (see above).

    Args:
      gpu: "a100" or "h100" (a key of ``GPUS``): its NVLink and NIC bandwidths.
      n_nodes: how many nodes.
      nics: NICs per node.

    Returns:
      The :func:`~jaxcoll.analysis.topology.nodes` topology of n_nodes x 8 ranks (NVLink α
      3.4 µs, NIC α 10 µs; each node's NVSwitch reduces (NVLS) where the GPU's does: H100).
    """
    nvlink_gbs, nic_gbs = GPUS[gpu]
    return nodes(n_nodes, 8, nvlink=(NVLINK_ALPHA, 1 / (nvlink_gbs * 1e9)),
                 nic=(NIC_ALPHA, 1 / (nic_gbs * 1e9)), nics=nics, nvls=SPECS[gpu].nvls,
                 name=f"{n_nodes} x DGX {gpu.upper()} ({nics} NICs per node)")


# AMD Instinct MI300X platform: 8 GPUs, each with 7 Infinity Fabric links, one to every other
# GPU, 128 GB/s per link both ways together (AMD's MI300X data sheet: "peak Infinity Fabric
# link bandwidth 128 GB/s", 896 GB/s of peer bandwidth per GPU); α 5 µs is an assumption (no
# source), near NCCL's NVLink step latency above.
MI300X_LINK_GBS = 64.0  # each way
MI300X_ALPHA = 5e-6


def mi300x(n: int = 8) -> Topology:
    """``n`` MI300X-like GPUs fully connected by Infinity Fabric.

    Args:
      n: how many GPUs (the platform has 8; 16 is two such nodes' GPUs as one fabric, for
        comparison).

    Returns:
      The :func:`~jaxcoll.analysis.topology.fully_connected` topology, a 64 GB/s link each way
      per pair, α 5 µs.
    """
    return fully_connected(n, alpha=MI300X_ALPHA, beta=1 / (MI300X_LINK_GBS * 1e9),
                           name=f"{n} x MI300X, fully connected (Infinity Fabric)")


@dataclass(frozen=True)
class Gpu:
    """One GPU model as NCCL (or RCCL) sees it: its links, PCIe, NVLS and the CPU beside it.

    Attributes:
      name: "a100", "h100", "h200", "b200" or "mi300x".
      arch: NVIDIA compute capability (80, 90, 100) or AMD's "gfx942".
      links: NVLink (or Infinity Fabric) links per GPU.
      link_gbs: GB/s per link each way, as NCCL's topology model counts it.
      pcie_gbs: the GPU's (and its NIC's) PCIe link, GB/s, as NCCL counts it.
      nvls: NVLink SHARP (NVLS) in the node's NVSwitches.
      cpu: the host CPU's vendor, "intel" or "amd" (NCCL's tuner reads it across nodes).
      fabric: what joins a node's GPUs, in words.
    """

    name: str
    arch: object
    links: int
    link_gbs: float
    pcie_gbs: float
    nvls: bool
    cpu: str
    fabric: str


# NVLink GB/s per link: NVIDIA/nccl v2.28.9-1 src/graph/topo.h SM80_NVLINK_BW (20.0), SM90_NVLINK_BW
# (20.6), SM100_NVLINK_BW (40.1); MI300X: ROCm/rccl 0cbce2a7 src/graph/topo.h GFX94X_XGMI_WIDTH
# (48.0). Links: NVIDIA's A100 (12 NVLink3), H100/H200 SXM (18 NVLink4) and B200 (18 NVLink5)
# data sheets; MI300X: 7 Infinity Fabric links, one to each other GPU (RCCL's rome_models.cc,
# rome_model_79/81: nGpus 8, nLinks 7). PCIe: NCCL's topo.cc kvDictPciGen, width x rate / 80:
# Gen4 x16 ("16.0 GT/s PCIe" = 120) 24 GB/s on A100 hosts, Gen5 x16 (240) 48 GB/s after. NVLS:
# NCCL's search.cc runs the NVLS pattern only with NVSwitches and compute capability >= 90. CPU:
# the vendor's reference node: DGX A100 (AMD EPYC 7742), DGX H100/H200 (Intel Xeon 8480C), DGX
# B200 (Intel Xeon 8570); MI300X: an AMD EPYC host (an assumption: platforms vary).
SPECS = {
    "a100": Gpu("a100", 80, 12, 20.0, 24.0, False, "amd", "NVLink3 x12, NVSwitch"),
    "h100": Gpu("h100", 90, 18, 20.6, 48.0, True, "intel", "NVLink4 x18, NVSwitch (NVLS)"),
    "h200": Gpu("h200", 90, 18, 20.6, 48.0, True, "intel", "NVLink4 x18, NVSwitch (NVLS)"),
    "b200": Gpu("b200", 100, 18, 40.1, 48.0, True, "intel", "NVLink5 x18, NVSwitch (NVLS)"),
    "mi300x": Gpu("mi300x", "gfx942", 7, 48.0, 48.0, False, "amd",
                  "Infinity Fabric x7, fully connected"),
}

# dgx()'s GPUs, name: (NVLink GB/s per GPU each way, NIC GB/s each way): the NVLink from SPECS
# (links x NCCL's per-link rate), the NICs InfiniBand HDR 200 and NDR 400 Gb/s
GPUS = {name: (SPECS[name].links * SPECS[name].link_gbs, nic_gbs)
        for name, nic_gbs in (("a100", 25.0), ("h100", 50.0))}


@dataclass(frozen=True)
class System:
    """A cluster as :func:`jaxcoll.analysis.nccl.predict` needs it (:func:`cluster` makes it).

    Attributes:
      gpu: the GPU's :class:`Gpu` (links, PCIe, NVLS, CPU).
      n_nodes: nodes (NCCL's nNodes: for a multi-node NVLink domain, its racks).
      gpus_per_node: GPUs (ranks) per node.
      nics: NICs per node.
      nic_gbps: each NIC's line rate, Gb/s.
      sharp: in-network reduction on the NICs' fabric (InfiniBand SHARP: NCCL's CollNet).
      cpu: the host CPU's vendor, "intel" or "amd".
    """

    gpu: Gpu
    n_nodes: int
    gpus_per_node: int
    nics: int
    nic_gbps: float
    sharp: bool = False
    cpu: str = "intel"

    @property
    def n(self) -> int:
        """Ranks in all."""
        return self.n_nodes * self.gpus_per_node

    @property
    def nvlink_gbs(self) -> float:
        """GB/s each way between a GPU and the rest of its node (all its links)."""
        return self.gpu.links * self.gpu.link_gbs


def cluster(gpu: str, n_nodes: int = 1, *, gpus_per_node: int = 8, nics: int = 8,
            nic_gbps: float = 400.0, sharp: bool = False, cpu: str | None = None) -> Topology:
    """``n_nodes`` nodes of ``gpus_per_node`` ``gpu``, ``nics`` NICs of ``nic_gbps`` each.

    A :func:`~jaxcoll.analysis.topology.nodes` topology carrying its :class:`System`, which
    :func:`jaxcoll.analysis.nccl.predict` prices NCCL's (RCCL's on MI300X) choices on. Inside a
    node: NVSwitch at the GPU's NVLink bandwidth (MI300X: its 7 Infinity Fabric links summed
    into one port, an approximation of the full mesh); NVLS where the GPU has it (H100, H200,
    B200). Parameters and their sources (:data:`SPECS`):

    - NVLink per link: NVIDIA/nccl v2.28.9-1 ``src/graph/topo.h``: ``SM80_NVLINK_BW`` 20.0 GB/s
      (A100, 12 links: 240), ``SM90_NVLINK_BW`` 20.6 (H100, H200, 18 links: 370.8),
      ``SM100_NVLINK_BW`` 40.1 (B200, 18 links: 721.8); MI300X: ROCm/rccl ``topo.h``
      ``GFX94X_XGMI_WIDTH`` 48 GB/s, 7 links (336). Link counts: the vendors' data sheets.
    - PCIe (GPU and NIC): NCCL ``topo.cc`` ``kvDictPciGen``: Gen4 x16 24 GB/s (A100 hosts),
      Gen5 x16 48 GB/s (the others).
    - NICs: ``nic_gbps`` / 8 GB/s each way (NCCL ``topo.cc``: ``net->net.bw = mbps / 8000``).
    - α: NVLink 3.4 µs (NCCL ``tuning.cc`` ``hwLatencies[NVLINK][Ring][Simple]``; MI300X 2.1 µs,
      RCCL ``tuning_model_5``), NIC 14 µs (``hwLatencies[NET][Ring][Simple]``): for
      :func:`~jaxcoll.analysis.topology.simulate`; ``predict`` uses NCCL's own tables.
    - CPU: the vendor's reference node (DGX A100: AMD; DGX H100/H200/B200: Intel; MI300X: AMD,
      assumed).

    Args:
      gpu: "a100", "h100", "h200", "b200" or "mi300x".
      n_nodes: how many nodes (NVLink domains).
      gpus_per_node: GPUs per node (a multi-node NVLink rack: its GPUs).
      nics: NICs per node (used when ``n_nodes`` > 1).
      nic_gbps: each NIC's line rate in Gb/s (400: NDR InfiniBand, 400G Ethernet).
      sharp: the fabric reduces in the network (InfiniBand SHARP: NCCL's CollNet algorithms,
        and in :func:`~jaxcoll.analysis.topology.simulate` in-switch operations across nodes,
        :mod:`jaxcoll.ir.families.collnet`).
      cpu: "intel" or "amd" instead of the reference node's.

    Returns:
      The :class:`~jaxcoll.analysis.topology.Topology`, with ``system`` set.

    Raises:
      ValueError: an unknown ``gpu`` or ``cpu``, or counts or a rate that are not positive.

    Examples:
      >>> from jaxcoll.analysis.systems import cluster
      >>> cluster("h100", 2).system.nvlink_gbs
      370.8
    """
    if gpu not in SPECS:
        raise ValueError(f"cluster: gpu={gpu!r}, must be one of {sorted(SPECS)}")
    if cpu not in (None, "intel", "amd"):
        raise ValueError(f"cluster: cpu={cpu!r}, must be 'intel', 'amd' or None")
    for name, value in (("n_nodes", n_nodes), ("gpus_per_node", gpus_per_node), ("nics", nics)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"cluster: {name}={value!r}, must be an int >= 1")
    if not nic_gbps > 0:
        raise ValueError(f"cluster: nic_gbps={nic_gbps!r}, must be > 0")
    spec = SPECS[gpu]
    system = System(spec, n_nodes, gpus_per_node, nics, float(nic_gbps), bool(sharp),
                    cpu or spec.cpu)
    nvlink_alpha = 2.1e-6 if gpu == "mi300x" else NVLINK_ALPHA
    topology = nodes(n_nodes, gpus_per_node, nvlink=(nvlink_alpha, 1 / (system.nvlink_gbs * 1e9)),
                     nic=(14e-6, 8 / (nic_gbps * 1e9)), nics=nics, nvls=spec.nvls,
                     sharp=bool(sharp), name=f"{n_nodes} x {gpus_per_node} {gpu.upper()} ({spec.fabric}; {nics} x "
                          f"{nic_gbps:g} Gb/s NICs per node{', SHARP' if sharp else ''})")
    return dataclasses.replace(topology, system=system)


@dataclass(frozen=True)
class Published:
    """One measurement from a public source: nccl-tests' busbw of a collective.

    Attributes:
      system: the system measured, in words.
      topology: the :class:`~jaxcoll.analysis.topology.Topology` that describes it.
      primitive: the collective's name ("allreduce", ...).
      nbytes: nccl-tests' size: the buffer per rank, in bytes.
      busbw: the busbw measured, GB/s.
      source: where the number comes from, in words.
      channels: rings NCCL runs at once (its channels), each leaving nodes by its NIC.
    """

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
    """The simulator's busbw against every published measurement.

    Returns:
      A list of (:class:`Published`, predicted busbw in GB/s, relative error) triples, one
      per published measurement; the relative error is predicted / published - 1.
    """
    rows = []
    for published in PUBLISHED:
        predicted = published.predicted_busbw()
        rows.append((published, predicted, predicted / published.busbw - 1))
    return rows
