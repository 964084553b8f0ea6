"""morphcache: provably correct prefix-cache reuse for hybrid-attention LLM serving."""

__version__ = "0.1.0"
