"""Shared linen building blocks: the small Llama-style decoder and its cache."""

from jaxlab.nn.sampling import generate
from jaxlab.nn.transformer import (
    Attention,
    Block,
    KVCache,
    RMSNorm,
    SwiGLU,
    Transformer,
    TransformerConfig,
    apply_rope,
    default_dense,
    init_cache,
    swiglu_ffn,
)

__all__ = [
    "Attention", "Block", "KVCache", "RMSNorm", "SwiGLU", "Transformer", "TransformerConfig",
    "apply_rope", "default_dense", "generate", "init_cache", "swiglu_ffn",
]
