"""Shared linen building blocks: the small Llama-style decoder and its cache."""

from jaxlab.nn.dense import Dense, matmul
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
    stack_block_params,
    swiglu_ffn,
    unstack_block_params,
)

__all__ = [
    "Attention", "Block", "Dense", "KVCache", "RMSNorm", "SwiGLU", "Transformer", "TransformerConfig",
    "apply_rope", "default_dense", "generate", "init_cache", "matmul",
    "stack_block_params", "swiglu_ffn", "unstack_block_params",
]
