"""The text side of cross-tokenizer distillation: tokenizers from specs, chunks, alignments.

A teacher and its students see the same text cut into fixed-width character chunks,
each tokenised alone (`encode_chunks`: inputs start with a BOS id, so the sum of the
token losses of a chunk is its code length). `alignment_arrays` turns a teacher and a
student tokenisation of the same chunks into everything a student step gathers: the
synchronisation spans and their sparse coupling (`jaxlab.distill.spans`), the coupling's
marginals, and the pairings ULD and MinED use. `unigram_bits_per_byte` is the trivial
reference a trained student must beat.

Example:
  >>> tok = tokenizer_from_spec("char", "")
  >>> toks = encode_chunks(tok, chunk_text("ab cd", 4))
  >>> toks.inputs.tolist(), toks.targets.tolist()
  ([[128, 97, 98, 32, 128, 128, 128, 128]], [[97, 98, 32, 99, 0, 0, 0, 0]])
"""

import dataclasses
import functools
import hashlib
import math
import os
from typing import Any

import numpy as np
from jaxtyping import Float, Int
from tokenizers import Tokenizer

from jaxlab import data as corpus_lib
from jaxlab.distill import spans as spans_lib
from jaxlab.distill import tokenize
from jaxlab.presets import split_names


def parse_students(spec: str) -> dict[str, str]:
  """The students of a "name=spec,..." string.

  Args:
    spec: comma-separated `name=spec` entries; a spec is "teacher" (the teacher's own
      tokenizer), "marker" (the teacher's BPE with the "▁" marker), "char", or
      `<kind>:<vocab>[:sp]` (`tokenizer_from_spec`).

  Returns:
    {name: spec}, in order.

  Raises:
    ValueError: an entry without a name or a spec, or no entry at all.

  Example:
    >>> parse_students("same=teacher, bpe512=bpe:512")
    {'same': 'teacher', 'bpe512': 'bpe:512'}
  """
  out = {}
  for item in split_names(spec):
    name, _, kind = item.partition("=")
    if not name or not kind:
      raise ValueError(f"tokenizers.students entries are name=spec, got {item!r}")
    out[name.strip()] = kind.strip()
  if not out:
    raise ValueError("tokenizers.students must name at least one student")
  return out


def tokenizer_from_spec(spec: str, text: str) -> Tokenizer:
  """A tokenizer trained on `text` from a spec: "char", "bpe:<n>" or "unigram:<n>".

  Args:
    spec: the kind and vocabulary size; a trailing ":sp" uses SentencePiece's "▁"
      word-boundary marker instead of GPT-2's "Ġ".
    text: the training text (ASCII; unused by "char").

  Returns:
    The trained `tokenizers.Tokenizer`.

  Raises:
    ValueError: a spec of another form.

  Example:
    >>> tok = tokenizer_from_spec("bpe:140:sp", "def f(x):\\n    return x\\n" * 30)
    >>> any(s.startswith(tokenize.SP_MARKER) for s in tokenize.vocab_strings(tok))
    True
  """
  kind, _, rest = spec.partition(":")
  vocab, _, marker = rest.partition(":")
  if kind == "char":
    return tokenize.train_tokenizer("char", "", 0)
  if kind not in ("bpe", "unigram") or not vocab.isdigit() or marker not in ("", "sp"):
    raise ValueError(f"tokenizer spec must be bpe:<n>[:sp], unigram:<n>[:sp], char, teacher "
                     f"or marker; got {spec!r}")
  return tokenize.train_tokenizer(kind, text, int(vocab), marker=(
      tokenize.SP_MARKER if marker else tokenize.GPT2_MARKER))


def build_tokenizers(teacher: str, students: dict[str, str], text: str, cache_dir: str
                     ) -> tuple[Tokenizer, dict[str, Tokenizer]]:
  """The teacher's and the students' tokenizers, each trained once into `cache_dir`.

  Args:
    teacher: the teacher's spec (`tokenizer_from_spec`).
    students: {name: spec} (`parse_students`); "teacher" and "marker" derive from the
      teacher's tokenizer and are not stored.
    text: the training text.
    cache_dir: where trained tokenizers are saved and, on a rerun, loaded from.

  Returns:
    (teacher tokenizer, {student: tokenizer}).

  Example:
    >>> import tempfile
    >>> t, s = build_tokenizers("char", {"own": "teacher", "c": "char"}, "", tempfile.mkdtemp())
    >>> s["own"] is t, s["c"].get_vocab_size()
    (True, 128)
  """
  os.makedirs(cache_dir, exist_ok=True)

  def cached(name, make):
    path = os.path.join(cache_dir, f"{name}.json")
    if os.path.exists(path):
      return tokenize.load(path)
    tok = make()
    tokenize.save(tok, path)
    return tok

  teacher_tok = cached("teacher", lambda: tokenizer_from_spec(teacher, text))
  out = {}
  for name, spec in students.items():
    if spec == "teacher":
      out[name] = teacher_tok
    elif spec == "marker":
      out[name] = tokenize.with_marker(teacher_tok)
    else:
      out[name] = cached(f"student_{name}", functools.partial(tokenizer_from_spec, spec, text))
  return teacher_tok, out


def chunk_text(text: str, width: int, limit: int | None = None) -> list[str]:
  """The full `width`-character chunks of `text` that start before `limit` (a shorter tail
  is dropped).

  Example:
    >>> chunk_text("abcdefg", 3), chunk_text("abcdefg", 3, limit=4)
    (['abc', 'def'], ['abc', 'def'])
  """
  end = len(text) if limit is None else min(len(text), limit)
  return [text[i:i + width] for i in range(0, end, width) if len(text[i:i + width]) == width]


def corpus_chunks(data: Any) -> tuple[str, list[str], list[str], list[str]]:
  """The stdlib corpus as ASCII text, cut into the teacher's, students' and held-out chunks.

  Args:
    data: the `data` section: `max_bytes` and `val_fraction` (`jaxlab.data.load_corpus`),
      `chunk_chars` (the chunk width), `student_chars` (the students' training subset:
      the chunks that start in the first `student_chars` characters of the train split) and `val_chunks` (held-out chunks kept).

  Returns:
    (train text, teacher chunks: all of the train split, student chunks, val chunks).

  Raises:
    ValueError: naming the key, before the corpus is read, for a width or a count that
      is not positive, or a student subset shorter than one chunk.

  Example::

    text, teacher, students, val = corpus_chunks(config.data)
  """
  for name in ("chunk_chars", "val_chunks"):
    v = getattr(data, name)
    if not (math.isfinite(v) and v > 0):
      raise ValueError(f"data.{name} must be finite and > 0, got {v}")
  if data.student_chars < data.chunk_chars:
    raise ValueError(f"data.student_chars ({data.student_chars}) must hold at least one chunk "
                     f"of data.chunk_chars ({data.chunk_chars})")
  corpus = corpus_lib.load_corpus(max_bytes=data.max_bytes, val_fraction=data.val_fraction)
  train, val = tokenize.ascii_text(corpus.train), tokenize.ascii_text(corpus.val)
  width = data.chunk_chars
  return (train, chunk_text(train, width), chunk_text(train, width, data.student_chars),
          chunk_text(val, width)[:data.val_chunks])


@dataclasses.dataclass(frozen=True)
class Tokens:
  """A tokenised chunk set: inputs = [BOS, ids[:-1]], targets = ids, padded to T.

  Attributes:
    inputs, targets: [N, T] int32; the BOS id is `vocab`.
    mask: [N, T] float32, 1 on the chunk's tokens.
    offsets: N arrays [n_i, 2] of each token's character span in its chunk.
    vocab: the tokenizer's vocabulary size.
  """
  inputs: Int[np.ndarray, "n t"]
  targets: Int[np.ndarray, "n t"]
  mask: Float[np.ndarray, "n t"]
  offsets: list
  vocab: int


def encode_chunks(tok: Tokenizer, chunks: list[str], multiple: int = 8) -> Tokens:
  """Next-token rows of `chunks` under `tok`, padded to a multiple of `multiple` (mask 0).

  Example:
    >>> toks = encode_chunks(tokenize.train_tokenizer("char", "", 0), ["ab", "abc"], 4)
    >>> toks.inputs.shape, toks.mask.sum(1).tolist()
    ((2, 4), [2.0, 3.0])
  """
  encs = tokenize.encode_batch(tok, chunks)
  vocab = tok.get_vocab_size()
  width = -(-max(len(ids) for ids, _ in encs) // multiple) * multiple
  inputs = np.full((len(encs), width), vocab, np.int32)
  targets = np.zeros((len(encs), width), np.int32)
  mask = np.zeros((len(encs), width), np.float32)
  for r, (ids, _) in enumerate(encs):
    targets[r, :len(ids)] = ids
    inputs[r, 1:len(ids)] = ids[:-1]
    mask[r, :len(ids)] = 1.0
  return Tokens(inputs, targets, mask, [o for _, o in encs], vocab)


def alignment_arrays(t_toks: Tokens, s_toks: Tokens, stats: dict[str, np.ndarray],
                     mined_map: Int[np.ndarray, " v"], coupling: str
                     ) -> tuple[dict[str, np.ndarray], int]:
  """Everything a student step gathers per chunk (numpy, padded), and the span slots.

  Args:
    t_toks, s_toks: the teacher's and the student's tokenisation of the same chunks.
    stats: the teacher's per-token statistics on `t_toks` (`char_t`, `top_t`,
      `top_ids`, `ent_t`; `jaxlab.distill.training.teacher_stats`).
    mined_map: teacher token id -> the MinED student token id.
    coupling: the in-span coupling mode of `jaxlab.distill.spans.overlap_coupling`.

  Returns:
    (arrays, k_max): the student's rows, the teacher's statistics, the spans of each
    token (slot `k_max` = none), the sparse coupling's pairs, span and mass, its
    marginals (the dense ablation's), ULD's index pairing mask and MinED's teacher
    index per student token; k_max is the largest number of spans in a chunk.

  Example:
    >>> t = encode_chunks(tokenize.train_tokenizer("char", "", 0), ["ab"])
    >>> st = dict(char_t=np.zeros((1, 8, 128)), top_t=np.zeros((1, 8, 2)),
    ...           top_ids=np.zeros((1, 8, 2), int), ent_t=np.zeros((1, 8)))
    >>> arrays, k_max = alignment_arrays(t, t, st, np.arange(128), "overlap")
    >>> k_max, arrays["pspan"][0, :2].tolist(), arrays["t_index"][0, :2].tolist()
    (2, [0, 1], [0, 1])
  """
  n_rows, width_t = t_toks.inputs.shape
  width_s = s_toks.inputs.shape[1]
  couplings, span_list = [], []
  for off_t, off_s in zip(t_toks.offsets, s_toks.offsets, strict=True):
    sp = spans_lib.spans_from_offsets(off_t, off_s)
    span_list.append(sp)
    couplings.append(spans_lib.overlap_coupling(off_t, off_s, sp, mode=coupling))
  k_max = max(sp.num_spans for sp in span_list)
  p_max = max(len(c.mass) for c in couplings)
  span_t = np.full((n_rows, width_t), k_max, np.int32)
  span_s = np.full((n_rows, width_s), k_max, np.int32)
  pt = np.zeros((n_rows, p_max), np.int32)
  ps = np.zeros((n_rows, p_max), np.int32)
  pspan = np.full((n_rows, p_max), k_max, np.int32)
  pmass = np.zeros((n_rows, p_max), np.float32)
  mass_t = np.zeros((n_rows, width_t), np.float32)
  mass_s = np.zeros((n_rows, width_s), np.float32)
  width = min(width_t, width_s)
  uld_valid = np.zeros((n_rows, width), np.float32)
  t_index = np.zeros((n_rows, width_s), np.int32)
  for r, (sp, c) in enumerate(zip(span_list, couplings, strict=True)):
    n, m = len(sp.teacher), len(sp.student)
    span_t[r, :n], span_s[r, :m] = sp.teacher, sp.student
    q = len(c.mass)
    pt[r, :q], ps[r, :q], pspan[r, :q], pmass[r, :q] = c.teacher, c.student, c.span, c.mass
    mass_t[r, :n], mass_s[r, :m] = spans_lib.coupling_marginals(c, n, m)
    uld_valid[r, :min(n, m)] = 1.0
    # MinED pairing (jaxlab interpretation): the teacher token holding the student token's
    # first character, instead of FuseLLM's token-sequence edit-distance alignment.
    t_index[r, :m] = np.searchsorted(t_toks.offsets[r][:, 1], s_toks.offsets[r][:, 0],
                                     side="right")
  arrays = dict(inputs=s_toks.inputs, targets=s_toks.targets, mask=s_toks.mask,
                char_t=stats["char_t"], top_t=stats["top_t"], ent_t=stats["ent_t"],
                mapped=mined_map[stats["top_ids"]].astype(np.int32), span_t=span_t,
                span_s=span_s, pt=pt, ps=ps, pspan=pspan, pmass=pmass, mass_t=mass_t,
                mass_s=mass_s, uld_valid=uld_valid, t_index=t_index)
  return arrays, k_max


def unigram_bits_per_byte(train: Tokens, val: Tokens, num_chars: int) -> float:
  """Held-out bits/byte of an add-one-smoothed unigram model of `train`'s tokens.

  The trivial reference of bits/byte comparisons (their floor): a student no better
  than this has learned nothing beyond its tokenizer's token frequencies.

  Args:
    train: the tokens the model is counted on (the students' training subset).
    val: held-out tokens of the same tokenizer.
    num_chars: characters of the held-out text.

  Returns:
    sum over held-out tokens of -log2 p(token), divided by `num_chars`.

  Example:
    >>> t = encode_chunks(tokenize.train_tokenizer("char", "", 0), ["aab"])
    >>> round(unigram_bits_per_byte(t, t, 3), 3)  # p(a) = 3/131, p(b) = 2/131
    5.643
  """
  if train.vocab != val.vocab:
    raise ValueError(f"train and val must share a tokenizer, got vocabularies {train.vocab} "
                     f"and {val.vocab}")
  if not num_chars > 0:
    raise ValueError(f"num_chars must be > 0, got {num_chars}")
  counts = np.bincount(train.targets[train.mask > 0], minlength=train.vocab) + 1.0
  log2p = np.log2(counts / counts.sum())
  return float(-log2p[val.targets[val.mask > 0]].sum() / num_chars)


def digest(*arrays: np.ndarray) -> str:
  """A short content hash of numpy arrays (dtype, shape and bytes): equal arrays, equal hash.

  Example:
    >>> digest(np.zeros(3)) == digest(np.zeros(3)) != digest(np.zeros(3, np.int32))
    True
  """
  h = hashlib.sha1()
  for a in arrays:
    a = np.ascontiguousarray(a)
    h.update(f"{a.dtype}{a.shape}".encode())
    h.update(a.tobytes())
  return h.hexdigest()[:16]
