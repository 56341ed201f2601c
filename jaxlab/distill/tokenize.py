"""Tokenizers with controlled vocabulary overlap, trained offline with `tokenizers`.

Every tokenizer here sees the same ASCII text and returns character offsets
that partition it (the span construction needs that). Word boundaries are a
Metaspace marker replacing the space: the teacher and most students use GPT-2's
"Ġ"; `with_marker` copies a trained tokenizer with SentencePiece's "▁", which
keeps every token boundary (spans intact) but breaks exact-string vocabulary
overlap (what string-matching KD such as MinED relies on).

Kinds: "bpe" (BPE of a given size), "unigram" (Unigram LM of a given size),
"char" (one token per character), "marker" (the teacher's BPE with "▁").

Example:
  >>> tok = train_tokenizer("char", "", 0)
  >>> ids, offsets = encode(tok, "a b")
  >>> ids.tolist(), offsets.tolist()
  ([97, 32, 98], [[0, 1], [1, 2], [2, 3]])
"""

import json
import os

import numpy as np
from jaxtyping import Float, Int
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

GPT2_MARKER, SP_MARKER = "Ġ", "▁"
NUM_CHARS = 128  # the text is ASCII (see `ascii_text`); characters index next-char distributions
KINDS = ("bpe", "unigram", "char", "marker")
SPECIALS = frozenset({"<unk>"})


def ascii_text(data: np.ndarray | bytes) -> str:
  """Bytes as ASCII text, every byte >= 128 replaced by "?" (one byte = one character).

  jaxlab interpretation: the stdlib corpus is > 99.9 % ASCII; keeping one
  character per byte makes bits per character equal bits per byte.
  """
  arr = np.frombuffer(bytes(data), np.uint8) if isinstance(data, bytes) else np.asarray(data)
  return np.where(arr < NUM_CHARS, arr, ord("?")).astype(np.uint8).tobytes().decode("ascii")


def _alphabet(marker: str) -> list[str]:
  return [marker if i == 32 else chr(i) for i in range(NUM_CHARS)]


def _pre_tokenizer(marker: str):
  return pre_tokenizers.Metaspace(replacement=marker, prepend_scheme="never", split=True)


def train_tokenizer(kind: str, text: str, vocab_size: int, *, marker: str = GPT2_MARKER
                    ) -> Tokenizer:
  """Trains a tokenizer of `kind` ("bpe", "unigram" or "char") on `text`.

  Args:
    kind: "bpe", "unigram" or "char" ("char" ignores `vocab_size` and `text`).
    text: training text (ASCII).
    vocab_size: target vocabulary size (>= 128 + a few for the alphabet).
    marker: word-boundary marker replacing the space.

  Returns:
    A `tokenizers.Tokenizer` whose offsets partition any ASCII input.

  "bpe" and "char" give the same tokenizer every time. "unigram" does not: the `tokenizers`
  Unigram trainer is not deterministic (three trainings of the same 1k vocabulary on the
  same text, in one process, gave three different vocabularies, with or without
  TOKENIZERS_PARALLELISM). Experiments cache trained tokenizers in their workdir, so a
  resumed run keeps its own; a fresh run of the escot quick preset moved its unigram1k
  student's bits per byte by up to 1e-3 (seed std 0.005-0.012).
  """
  alphabet = _alphabet(marker)
  if kind == "char":
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
  elif kind == "bpe":
    if vocab_size <= NUM_CHARS:
      raise ValueError(f"a BPE vocab_size must exceed the {NUM_CHARS}-char alphabet")
    tok = Tokenizer(models.BPE())
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet,
                                  show_progress=False, special_tokens=[])
  elif kind == "unigram":
    if vocab_size <= NUM_CHARS:
      raise ValueError(f"a Unigram vocab_size must exceed the {NUM_CHARS}-char alphabet")
    tok = Tokenizer(models.Unigram())
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, initial_alphabet=alphabet,
                                      show_progress=False, unk_token="<unk>",
                                      special_tokens=["<unk>"])
  else:
    raise ValueError(f"kind must be 'bpe', 'unigram' or 'char', got {kind!r}")
  tok.pre_tokenizer = _pre_tokenizer(marker)
  if kind != "char":
    tok.train_from_iterator([text[i:i + 10_000] for i in range(0, len(text), 10_000)], trainer)
  return tok


def with_marker(tok: Tokenizer, old: str = GPT2_MARKER, new: str = SP_MARKER) -> Tokenizer:
  """The same tokenizer with another word-boundary marker (identical boundaries)."""
  return Tokenizer.from_str(tok.to_str().replace(old, new))


def vocab_strings(tok: Tokenizer) -> list[str]:
  """The vocabulary's strings, indexed by token id."""
  vocab = tok.get_vocab()
  out = [""] * len(vocab)
  for s, i in vocab.items():
    out[i] = s
  return out


def encode(tok: Tokenizer, text: str) -> tuple[np.ndarray, np.ndarray]:
  """(ids [n], offsets [n, 2]) of `text`; raises if the offsets do not partition it."""
  enc = tok.encode(text)
  return _checked(enc, text)


def _checked(enc, text: str) -> tuple[np.ndarray, np.ndarray]:
  ids = np.asarray(enc.ids, np.int32)
  offsets = np.asarray(enc.offsets, np.int64).reshape(-1, 2)
  if (len(ids) == 0 or offsets[0, 0] != 0 or offsets[-1, 1] != len(text)
      or np.any(offsets[1:, 0] != offsets[:-1, 1])):
    raise ValueError(f"tokenizer offsets do not partition the text {text[:40]!r}...")
  return ids, offsets


def encode_batch(tok: Tokenizer, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
  """`encode` of many texts (parallel in Rust)."""
  return [_checked(e, t) for e, t in zip(tok.encode_batch(texts), texts, strict=True)]


def decoded_first_char(strings: list[str], markers: tuple[str, ...] = (GPT2_MARKER, SP_MARKER)
                       ) -> Int[np.ndarray, " v"]:
  """Code (0..127) of each token's first decoded character; a marker decodes to a space,
  special tokens ("<unk>") and non-ASCII to 0."""
  codes = []
  for s in strings:
    if s[:1] in markers:
      codes.append(32)
    elif s in SPECIALS or not s or ord(s[0]) >= NUM_CHARS:
      codes.append(0)
    else:
      codes.append(ord(s[0]))
  return np.asarray(codes, np.int32)


def first_char_matrix(strings: list[str]) -> Float[np.ndarray, "v c"]:
  """[v, 128] one-hot of each token's first decoded character (token -> next-char marginal)."""
  out = np.zeros((len(strings), NUM_CHARS), np.float32)
  out[np.arange(len(strings)), decoded_first_char(strings)] = 1.0
  return out


def vocab_overlap(teacher: list[str], student: list[str]) -> dict[str, float]:
  """Exact-string vocabulary overlap.

  Returns:
    dict(of_student = size(T n S) / size(S) (the overlap the escot row
    reports), of_teacher = size(T n S) / size(T),
    jaccard = size(T n S) / size(T u S)).
  """
  t, s = set(teacher), set(student)
  inter = len(t & s)
  return dict(of_student=inter / len(s), of_teacher=inter / len(t), jaccard=inter / len(t | s))


def edit_distance_map(teacher: list[str], student: list[str], *, max_len: int = 12,
                      block: int = 128) -> Int[np.ndarray, " t"]:
  """For each teacher token, the student token of minimal Levenshtein distance (MinED).

  Vectorised over blocks of teacher tokens x all student tokens; ties go to the
  lowest student id. Strings are compared on their first `max_len` characters
  (jaxlab interpretation: bounds the dynamic program).

  Args:
    teacher: teacher vocabulary strings.
    student: student vocabulary strings.
    max_len: characters compared.
    block: teacher tokens per vectorised block.

  Returns:
    [len(teacher)] student ids.
  """
  def codes(strings):
    arr = np.full((len(strings), max_len), -1, np.int32)
    lens = np.zeros(len(strings), np.int32)
    for i, s in enumerate(strings):
      s = s[:max_len]
      arr[i, :len(s)] = [ord(c) for c in s]
      lens[i] = len(s)
    return arr, lens
  t_codes, t_lens = codes(teacher)
  s_codes, s_lens = codes(student)
  s_cols = s_codes.T.copy()  # [max_len, S]: DP rows are [column, teacher, student], contiguous
  num_s = len(student)
  out = np.zeros(len(teacher), np.int32)
  cols = np.arange(max_len + 1, dtype=np.int16)
  for lo in range(0, len(teacher), block):
    tc, tl = t_codes[lo:lo + block], t_lens[lo:lo + block]
    b = len(tc)
    prev = np.broadcast_to(cols[:, None, None], (max_len + 1, b, num_s)).copy()  # row i = 0
    best = np.where(tl[:, None] == 0, s_lens[None, :], 0)
    for i in range(1, int(tl.max(initial=0)) + 1):
      cur = np.empty_like(prev)
      cur[0] = i
      sub = tc[None, :, i - 1, None] != s_cols[:, None, :]  # [max_len, b, S]
      cand = np.minimum(prev[:-1] + sub, prev[1:] + 1)
      for j in range(1, max_len + 1):
        np.minimum(cand[j - 1], cur[j - 1] + 1, out=cur[j])
      final = cur[s_lens, :, np.arange(num_s)].T  # [b, S]: distance to the full student string
      best = np.where((tl == i)[:, None], final, best)
      prev = cur
    out[lo:lo + b] = np.argmin(best, axis=1)
  return out


def save(tok: Tokenizer, path: str) -> None:
  """Writes the tokenizer JSON atomically."""
  with open(path + ".tmp", "w") as f:
    f.write(tok.to_str())
  os.replace(path + ".tmp", path)


def load(path: str) -> Tokenizer:
  """Reads a tokenizer written by `save`."""
  with open(path) as f:
    return Tokenizer.from_str(json.dumps(json.load(f)))
