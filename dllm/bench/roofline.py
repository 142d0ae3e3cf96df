"""Lower bounds on one forward's time: bytes it must read from device memory and its FLOPs.

bytes = every weight once (the embedding table only for the rows gathered) + the K/V each layer
attends (rows x keys x K/V heads x head_dim, K and V); activations are not counted, so the bound
is optimistic. FLOPs = 2 x the tokens x the matmul weights + the attention products
(4 x tokens x keys x heads x head_dim per layer). The ceiling time is the larger of bytes /
peak bandwidth and FLOPs / peak throughput; measured / ceiling is how far from it a forward is.
"""
from __future__ import annotations

from dataclasses import dataclass

from dllm.bench.device_peaks import DevicePeak


@dataclass(frozen=True, slots=True)
class ForwardCost:
    bytes_read: int
    flops: int

    def memory_seconds(self, peak: DevicePeak) -> float | None:
        return None if not peak.bandwidth_gbs else self.bytes_read / (peak.bandwidth_gbs * 1e9)

    def compute_seconds(self, peak: DevicePeak) -> float | None:
        return None if not peak.bf16_tflops else self.flops / (peak.bf16_tflops * 1e12)

    def ceiling_seconds(self, peak: DevicePeak) -> float | None:
        """The roofline time: the slower of reading the bytes and doing the FLOPs (known peaks only)."""
        bounds = [t for t in (self.memory_seconds(peak), self.compute_seconds(peak)) if t is not None]
        return max(bounds) if bounds else None


def forward_cost(model, *, rows: int, queries: int, keys: int) -> ForwardCost:
    """Bytes and FLOPs of one forward of ``rows`` x ``queries`` tokens over ``keys`` keys."""
    cfg = model.config
    element = model.dtype.itemsize
    embed = model.embed.weight
    matmul_params = sum(p.numel() for name, p in model.named_parameters() if name != "embed.weight")
    if cfg.tie_embeddings:
        matmul_params += embed.numel()  # the LM head reads the shared table
    tokens = rows * queries
    gathered = min(tokens, embed.shape[0]) * embed.shape[1]
    kv = 2 * cfg.n_layers * rows * keys * cfg.n_kv_heads * cfg.head_dim
    attention_flops = 4 * cfg.n_layers * tokens * keys * cfg.n_heads * cfg.head_dim
    return ForwardCost(bytes_read=(matmul_params + gathered + kv) * element,
                       flops=2 * tokens * matmul_params + attention_flops)
