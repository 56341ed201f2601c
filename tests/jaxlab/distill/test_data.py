"""jaxlab.distill.data and the `distill` checks: bad values are refused before any work."""

import types

import numpy as np
import pytest

import jaxlab.data
from jaxlab.distill import data, tokenize, training


class _Read(Exception):
  """Raised by a stand-in corpus loader: the corpus was about to be read."""


def _data(**overrides):
  fields = dict(max_bytes=1000, val_fraction=0.1, chunk_chars=4, student_chars=8, val_chunks=2)
  return types.SimpleNamespace(**(fields | overrides))


@pytest.mark.parametrize("key,value", [("chunk_chars", 0), ("val_chunks", 0),
                                       ("student_chars", 3)])
def test_corpus_chunks_refuses_bad_sizes_before_reading(key, value, monkeypatch):
  def read(**kwargs):
    raise _Read
  monkeypatch.setattr(jaxlab.data, "load_corpus", read)
  with pytest.raises(ValueError, match=f"data\\.{key}"):
    data.corpus_chunks(_data(**{key: value}))
  with pytest.raises(_Read):
    data.corpus_chunks(_data())


def test_corpus_chunks_cut_full_chunks_of_each_split(monkeypatch):
  corpus = types.SimpleNamespace(train=np.frombuffer(b"abcdefghij", np.uint8),
                                 val=np.frombuffer(b"klmnopqrst", np.uint8))
  monkeypatch.setattr(jaxlab.data, "load_corpus", lambda **kwargs: corpus)
  text, teacher, students, val = data.corpus_chunks(_data(chunk_chars=3, student_chars=5))
  assert text == tokenize.ascii_text(corpus.train)
  assert teacher == [text[:3], text[3:6], text[6:9]]
  assert students == teacher[:2]  # the chunks that start in the first 5 characters
  assert len(val) == 2 and all(len(c) == 3 for c in val)


def _distill(**overrides):
  fields = dict(coupling="overlap", entropy_on="char", weighting="softmax", temperature=1.0,
                tau=1.0, top_k=4, mined_max_len=6, dense_epsilon=0.1, dense_iters=5, lam=0.5,
                alpha=2.0, char_weight=1.0, rank_weight=1.0)
  return types.SimpleNamespace(**(fields | overrides))


@pytest.mark.parametrize("key,value", [
    ("coupling", "dense"), ("entropy_on", "Char"), ("weighting", "softmx"),
    ("temperature", 0.0), ("mined_max_len", 0), ("dense_iters", 0), ("lam", -0.5),
])
def test_check_distill_names_the_bad_key(key, value):
  training.check_distill(_distill())
  with pytest.raises(ValueError, match=f"distill\\.{key}"):
    training.check_distill(_distill(**{key: value}))


def test_parse_students_and_specs_refuse_malformed_entries():
  assert data.parse_students("a=teacher,b=char") == {"a": "teacher", "b": "char"}
  for bad in ("nospec", "=char", ""):
    with pytest.raises(ValueError, match="tokenizers.students"):
      data.parse_students(bad)
  with pytest.raises(ValueError, match="tokenizer spec"):
    data.tokenizer_from_spec("bpe:many", "text")
