"""WordPiece tokenisation with the `tokenizers` package, padded to length buckets.

The tokenizer is the model's own `tokenizer.json` (BERT normaliser: lower-case,
accents stripped, CJK characters split; `[CLS] ... [SEP]` template). The file
ships with truncation at 128 and fixed padding; sentence-transformers overrides
both at call time (truncate at `max_seq_length`, 256 for all-MiniLM-L6-v2 per
its `sentence_bert_config.json`, pad to the longest), and so does
`load_tokenizer`. Padding is done here, to a bucket length, so that the jitted
encoder sees few distinct shapes.

Example:
  >>> from jaxlab.text import find_model_dir, load_tokenizer, tokenize
  >>> tok = load_tokenizer(find_model_dir(), max_length=256)
  >>> ids, mask = tokenize(tok, ["Hello world", ""], max_length=256)
  >>> ids.shape, mask.sum(axis=1).tolist()
  ((2, 8), [4, 2])
"""

import os
from collections.abc import Sequence

import numpy as np
import tokenizers
from jaxtyping import Int

MIN_BUCKET = 8


def load_tokenizer(model_dir: str, max_length: int) -> tokenizers.Tokenizer:
  """The model's `tokenizer.json`, truncating at `max_length` tokens (special tokens
  included) and not padding.

  Example:
    >>> from jaxlab.text import find_model_dir
    >>> tok = load_tokenizer(find_model_dir(), max_length=4)
    >>> tok.encode("hello big world today").ids  # [CLS] hello big [SEP]: truncated to 4
    [101, 7592, 2502, 102]
  """
  if max_length < 2:
    raise ValueError(f"max_length must be >= 2 ([CLS] and [SEP]), got {max_length}")
  tok = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
  tok.enable_truncation(max_length)
  tok.no_padding()
  return tok


def bucket_length(n: int, max_length: int) -> int:
  """The padded length for `n` tokens: the next power of two >= max(n, 8), capped
  at `max_length` (so at most ~log2(max_length) shapes are ever compiled).

  Example:
    >>> bucket_length(3, 256), bucket_length(100, 256), bucket_length(256, 256)
    (8, 128, 256)
  """
  if n > max_length:
    raise ValueError(f"{n} tokens exceed max_length={max_length}")
  return min(max(MIN_BUCKET, 1 << (max(n, 1) - 1).bit_length()), max_length)


def check_texts(texts) -> list[str]:
  """`texts` as a list of strings, or a ValueError that says what was wrong.

  Example:
    >>> check_texts(("a", "b"))
    ['a', 'b']
    >>> check_texts("abc")
    Traceback (most recent call last):
    ValueError: texts must be a list of strings, got a single str; pass [text]
  """
  if isinstance(texts, str):
    raise ValueError("texts must be a list of strings, got a single str; pass [text]")
  try:
    texts = list(texts)
  except TypeError:
    raise ValueError(f"texts must be a list of strings, got {type(texts).__name__}") from None
  if not texts:
    raise ValueError("texts is empty: pass at least one string")
  bad = [(i, type(t).__name__) for i, t in enumerate(texts) if not isinstance(t, str)]
  if bad:
    i, name = bad[0]
    raise ValueError(f"texts must all be str; texts[{i}] is {name} "
                     f"({len(bad)} non-string item(s) in all)")
  return texts


def tokenize(tokenizer: tokenizers.Tokenizer, texts: Sequence, *, max_length: int,
             pad_to: int | None = None) -> tuple[Int[np.ndarray, "n t"], Int[np.ndarray, "n t"]]:
  """Token ids and attention mask of `texts`, right-padded with id 0.

  Args:
    tokenizer: from `load_tokenizer` (truncates at `max_length`).
    texts: non-empty list of strings.
    max_length: the tokenizer's truncation length (the bucket cap).
    pad_to: padded length; None pads to `bucket_length` of the longest text.

  Returns:
    (input_ids, attention_mask), int32 [len(texts), pad_to].

  Example:
    >>> from jaxlab.text import find_model_dir
    >>> tok = load_tokenizer(find_model_dir(), max_length=16)
    >>> ids, mask = tokenize(tok, ["hello world", "hi"], max_length=16)
    >>> ids.shape, mask.sum(axis=1).tolist()  # padded to the bucket of the longest
    ((2, 8), [4, 3])
  """
  texts = check_texts(texts)
  encodings = tokenizer.encode_batch(texts)
  longest = max(len(e.ids) for e in encodings)
  if pad_to is None:
    pad_to = bucket_length(longest, max_length)
  elif pad_to < longest:
    raise ValueError(f"pad_to={pad_to} is shorter than the longest text ({longest} tokens)")
  ids = np.zeros((len(texts), pad_to), np.int32)
  mask = np.zeros((len(texts), pad_to), np.int32)
  for row, e in enumerate(encodings):
    ids[row, :len(e.ids)] = e.ids
    mask[row, :len(e.ids)] = e.attention_mask
  return ids, mask
