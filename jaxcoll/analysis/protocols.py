"""NCCL's three protocols, LL, LL128 and Simple: what each puts on the wire, how it cuts a
buffer into steps, and the latencies NCCL's tuner charges for it. No JAX, and no other module
of the analysis: :mod:`jaxcoll.analysis.pipelined` prices a schedule in a protocol from here,
:mod:`jaxcoll.analysis.nccl` repeats NCCL's tuner with the same tables.

Version: NVIDIA/nccl v2.28.9-1 (commit dbc86fd06e8b0c4517b95d8958a09ccacf9520c9), as
:mod:`jaxcoll.analysis.nccl`; every number names its file and symbol there.

- **LL** (low latency): 16-byte lines of two 4-byte data words and two 4-byte flags
  (``union ncclLLFifoLine``, src/include/device.h): the receiver polls the flags, so no
  fence and no separate signal per step, and half of every byte on the wire is flag.
- **LL128**: 128-byte lines of 15 data words and one flag word
  (``NCCL_LL128_LINEELEMS``, ``NCCL_LL128_DATAELEMS``): 120 of 128 bytes are data, relying
  on NVLink delivering 128-byte lines whole.
- **Simple**: the data as it is, and a flag written after a memory fence per step: full
  bandwidth, the most latency per step.

A step is a buffer over ``NCCL_STEPS`` = 8 (src/include/device.h); the buffers are
src/init.cc's ``DEFAULT_LL_BUFFSIZE`` (NCCL_LL_LINES_PER_THREAD 8 x NCCL_LL_MAX_NTHREADS 512 x
NCCL_STEPS x 16 B = 512 KiB of lines), ``DEFAULT_LL128_BUFFSIZE`` (NCCL_LL128_ELEMS_PER_THREAD
120 x NCCL_LL128_MAX_NTHREADS 640 x NCCL_STEPS x 8 B) and ``DEFAULT_BUFFSIZE`` (4 MiB).
"""

from __future__ import annotations

from dataclasses import dataclass

NCCL_STEPS = 8  # src/include/device.h
PROTOCOLS = ("LL", "LL128", "Simple")  # src/include/plugin/nccl_tuner.h NCCL_PROTO_* order

# tuning.cc ncclTunerConstantsDefaults.baseLatencies, µs, per algorithm: (LL, LL128, Simple)
BASE_LAT = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "collnet_direct": (0, 0, 0),
            "collnet_chain": (0, 0, 0), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0),
            "pat": (8.0, 8.0, 8.0)}
# tuning.cc ncclTunerConstantsDefaults.hwLatencies, µs: [NVLINK, NET][algorithm][protocol] (its
# PCI row is for nodes without NVLink, which cluster() does not describe)
HW_LAT = {
    "nvlink": {"tree": (.6, 1.25, 4.0), "ring": (.6, 1.9, 3.4), "collnet_direct": (0, 0, 3.7),
               "collnet_chain": (0, 0, 2.8), "nvls": (0, 0, 25), "nvls_tree": (0, 0, 25),
               "pat": (0, 0, 4.0)},
    "net": {"tree": (5.0, 8.5, 14), "ring": (2.7, 4.0, 14.0), "collnet_direct": (0, 0, 31),
            "collnet_chain": (0, 0, 30), "nvls": (0, 0, 18), "nvls_tree": (0, 0, 20.9),
            "pat": (0, 0, 14)},
}


@dataclass(frozen=True)
class Protocol:
    """One of NCCL's protocols, as a pipelined runtime's pricing needs it.

    Attributes:
      name: "LL", "LL128" or "Simple".
      wire: bytes on the wire per byte of data (2 for LL, 128/120 for LL128, 1 for Simple).
      step_bytes: the data one step of a connection's buffer carries (its buffer over
        NCCL_STEPS, less the flags): a slice, in :mod:`jaxcoll.analysis.pipelined`.
    """

    name: str
    wire: float
    step_bytes: int

    @property
    def index(self) -> int:
        """Its place in NCCL's tables (PROTOCOLS' order)."""
        return PROTOCOLS.index(self.name)

    def hop_latency(self, kind: str) -> float:
        """NCCL's latency for one ring step over a link of ``kind`` ("nvlink" or "net"), µs
        (tuning.cc hwLatencies' ring row)."""
        return HW_LAT[kind]["ring"][self.index]


_LL_BUFFER = 8 * 512 * NCCL_STEPS * 16  # DEFAULT_LL_BUFFSIZE: 512 KiB of 16-byte lines
_LL128_BUFFER = 120 * 640 * NCCL_STEPS * 8  # DEFAULT_LL128_BUFFSIZE
_SIMPLE_BUFFER = 1 << 22  # DEFAULT_BUFFSIZE, 4 MiB

BY_NAME = {
    "LL": Protocol("LL", 2.0, _LL_BUFFER // NCCL_STEPS // 2),  # half of each line is flags
    "LL128": Protocol("LL128", 128 / 120, _LL128_BUFFER // NCCL_STEPS * 120 // 128),
    "Simple": Protocol("Simple", 1.0, _SIMPLE_BUFFER // NCCL_STEPS),
}


def named(name: str, who: str = "protocol") -> Protocol:
    """The :class:`Protocol` called ``name``, in any case.

    Args:
      name: "LL", "LL128" or "Simple", any case (as ``NCCL_PROTO`` takes it).
      who: what to call the argument in the error.

    Returns:
      The :class:`Protocol`.

    Raises:
      ValueError: ``name`` is not one of them.
    """
    match = next((p for p in PROTOCOLS if isinstance(name, str) and p.lower() == name.lower()),
                 None)
    if match is None:
        raise ValueError(f"{who}={name!r}, must be one of {PROTOCOLS} (any case)")
    return BY_NAME[match]
