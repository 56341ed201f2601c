"""Joint descriptions embedded once: a per-process cache in front of a sentence encoder.

Many skeletons share the same functional descriptions ("left hind limb, upper
segment ..."); each distinct text is embedded once and reused. The default
encoder is the offline MiniLM of `jaxlab.text` (384-D, unit norm), loaded on
first use.

Example:
  >>> import numpy as np
  >>> calls = []
  >>> def fake(texts):
  ...   calls.append(list(texts))
  ...   return np.ones((len(texts), 4), np.float32)
  >>> embed = DescriptionEmbedder(fake)
  >>> embed(["a", "b", "a"]).shape, embed(["b"]).shape, calls
  ((3, 4), (1, 4), [['a', 'b']])
"""

from collections.abc import Callable, Sequence

import numpy as np

from jaxlab import text


class DescriptionEmbedder:
  """Embeds texts through `encode`, each distinct text once per embedder.

  Args:
    encode: maps a list of texts to an [n, d] array (e.g. `SentenceEncoder.encode`).
  """

  def __init__(self, encode: Callable[[list[str]], np.ndarray]):
    self._encode = encode
    self._cache: dict[str, np.ndarray] = {}

  def __call__(self, texts: Sequence[str]) -> np.ndarray:
    """[len(texts), d] float32 embeddings, in order."""
    if isinstance(texts, str) or not texts:
      raise ValueError("texts must be a non-empty sequence of strings")
    missing = sorted({t for t in texts if t not in self._cache})
    if missing:
      emb = np.asarray(self._encode(missing), np.float32)
      if emb.shape[0] != len(missing):
        raise ValueError(f"encode returned {emb.shape[0]} rows for {len(missing)} texts")
      self._cache.update(zip(missing, emb, strict=True))
    return np.stack([self._cache[t] for t in texts])

  @property
  def num_cached(self) -> int:
    return len(self._cache)


_MINILM: DescriptionEmbedder | None = None


def minilm_embedder() -> DescriptionEmbedder:
  """The process-wide MiniLM `DescriptionEmbedder` (MiniLM is loaded on the first call).

  Example:
    >>> embed = minilm_embedder()  # doctest: +SKIP
    >>> embed(["left hind limb, upper segment", "tail"]).shape  # doctest: +SKIP
    (2, 384)
    >>> minilm_embedder() is embed  # doctest: +SKIP
    True
  """
  global _MINILM
  if _MINILM is None:
    encoder = text.load_minilm()
    _MINILM = DescriptionEmbedder(lambda texts: np.asarray(encoder.encode(list(texts))))
  return _MINILM
