"""What a miss and a tier move cost: the prefill and transfer model shared by the FLOP-aware policy
and the eviction benchmark's TTFT model.

Prefill cost of one token grows linearly with its position (the attention layers read every
earlier position); a transfer costs its bytes over the link's bandwidth::

    prefill(pos)        = t0 * (1 + pos / P)          seconds per real token at position pos
    prefill(a, b)       = t0 * ((b - a) + (b^2 - a^2) / (2 P))     tokens a..b-1
    fetch(n, source)    = n * kv_bytes_per_token / bandwidth(source)

Constants (``DEFAULT_COST``), for an 8B-parameter hybrid model with one full-attention layer in
four (32 layers, d_model 4096, GQA with 8 KV heads of 128) on one H100 SXM over PCIe Gen5:

* ``t0`` = 32.4 us: 2 x 8e9 FLOPs per token at 50% of the H100's 989 dense BF16 TFLOPS (its
  datasheet figure); the 50% utilisation is an assumption for a long prefill;
* ``P`` = 122,000 tokens: attention adds 4 x d_model FLOPs per earlier position per
  full-attention layer (8 layers), equal to the 16 GFLOPs of the matrix products at 122K;
* ``kv_bytes_per_token`` = 131,072: 32 layers x 8 heads x 128 x (K, V) x 2 bytes (a Llama-3-8B
  sized cache, an upper bound for a hybrid whose other layers keep compressed or windowed KV);
* host link 50 GB/s (PCIe Gen5 x16 is 64 GB/s per direction; 50 assumed achieved from pinned
  memory); disk 5 GB/s (a PCIe Gen4 NVMe drive reads about 7 GB/s; 5 assumed achieved).

No GPU figure is measured in this project (the development machine has none); these constants
are stated once here and used unchanged by every policy and benchmark that prices a miss.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    """Seconds per real token of prefill and of fetching KV from the host or disk tier."""

    prefill_s_per_token: float = 32.4e-6
    attention_doubling_tokens: float = 122_000.0
    kv_bytes_per_token: int = 131_072
    host_bytes_per_s: float = 50e9
    disk_bytes_per_s: float = 5e9

    def prefill_seconds(self, start: int, end: int) -> float:
        """Prefill of the real tokens at positions ``start..end-1``."""
        if end <= start:
            return 0.0
        n = end - start
        return self.prefill_s_per_token * (n + (end * end - start * start) / (2.0 * self.attention_doubling_tokens))

    def fetch_seconds(self, real_tokens: int, source: str) -> float:
        """Bringing the KV of ``real_tokens`` tokens back from ``source`` ("host" or "disk")."""
        bandwidth = self.host_bytes_per_s if source == "host" else self.disk_bytes_per_s
        return real_tokens * self.kv_bytes_per_token / bandwidth

    def bytes_seconds(self, nbytes: int, source: str) -> float:
        """Moving ``nbytes`` bytes from ``source`` ("host" or "disk") to the GPU."""
        return nbytes / (self.host_bytes_per_s if source == "host" else self.disk_bytes_per_s)


DEFAULT_COST = CostModel()
