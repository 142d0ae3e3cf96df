"""Peak memory bandwidth and dense bf16 throughput of common accelerators, by device name.

The numbers are the vendors' datasheet peaks (HBM/GDDR bandwidth in GB/s, dense bf16 tensor
TFLOP/s without sparsity). They turn a measured forward time into a fraction of the roofline;
a device missing here (or a different SKU) is given with ``--peak-bandwidth-gbs`` /
``--peak-tflops``.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DevicePeak:
    name: str  # the table's name of the device
    bandwidth_gbs: float | None  # GB/s (1e9 bytes per second)
    bf16_tflops: float | None  # dense TFLOP/s
    source: str  # "table", "override" or "unknown"


# (substrings that must all occur in the lower-cased device name, table name, GB/s, TFLOP/s);
# first match wins, so specific SKUs come before their family.
PEAKS: list[tuple[tuple[str, ...], str, float, float]] = [
    (("gh200",), "GH200", 4000.0, 989.0),
    (("h200",), "H200", 4800.0, 989.0),
    (("h100", "nvl"), "H100 NVL", 3900.0, 835.0),
    (("h100", "pcie"), "H100 PCIe", 2000.0, 756.0),
    (("h100",), "H100 SXM", 3350.0, 989.0),
    (("h800",), "H800 SXM", 3350.0, 989.0),
    (("b200",), "B200", 8000.0, 2250.0),
    (("a100", "80gb", "pcie"), "A100 80GB PCIe", 1935.0, 312.0),
    (("a100", "80gb"), "A100 80GB SXM", 2039.0, 312.0),
    (("a100",), "A100 40GB", 1555.0, 312.0),
    (("a800",), "A800 80GB", 2039.0, 312.0),
    (("l40s",), "L40S", 864.0, 362.0),
    (("l40",), "L40", 864.0, 181.0),
    (("l4",), "L4", 300.0, 121.0),
    (("a10g",), "A10G", 600.0, 70.0),
    (("a10",), "A10", 600.0, 125.0),
    (("rtx 6000 ada",), "RTX 6000 Ada", 960.0, 364.0),
    (("4090",), "RTX 4090", 1008.0, 165.0),
    (("3090",), "RTX 3090", 936.0, 71.0),
    (("v100",), "V100", 900.0, 125.0),  # fp16 tensor cores (no bf16)
    (("t4",), "T4", 320.0, 65.0),  # fp16 tensor cores (no bf16)
]


def device_peak(device_name: str, *, bandwidth_gbs: float | None = None,
                tflops: float | None = None) -> DevicePeak:
    """The table's peaks for ``device_name`` (e.g. torch.cuda.get_device_name()), each replaced
    by its override when given."""
    lowered = device_name.lower()
    match = next(((name, bw, tf) for keys, name, bw, tf in PEAKS if all(k in lowered for k in keys)), None)
    name, table_bw, table_tf = match if match else (device_name, None, None)
    overridden = bandwidth_gbs is not None or tflops is not None
    source = "override" if overridden else ("table" if match else "unknown")
    return DevicePeak(name=name, bandwidth_gbs=bandwidth_gbs if bandwidth_gbs is not None else table_bw,
                      bf16_tflops=tflops if tflops is not None else table_tf, source=source)
