"""Offline tokenizers: offsets partition the text, the marker variant, overlap, MinED's map."""

import numpy as np
import pytest

from jaxlab.distill import spans_from_offsets, tokenize

TEXT = ("def foo(x):\n    return x.bar + 1  # comment\n\nclass Baz:\n    pass\n" * 40
        + "import os, sys\nprint(os.path.join('a', 'b'))\n" * 40)


@pytest.fixture(scope="module")
def toks():
  bpe = tokenize.train_tokenizer("bpe", TEXT, 200)
  return dict(bpe=bpe, small=tokenize.train_tokenizer("bpe", TEXT, 150),
              unigram=tokenize.train_tokenizer("unigram", TEXT, 180),
              char=tokenize.train_tokenizer("char", "", 0), marker=tokenize.with_marker(bpe))


def test_offsets_partition_any_ascii_text(toks):
  text = "x = {'k': [1, 2]}\t# caf? ~\n  \n" + tokenize.ascii_text(bytes(range(256)))
  for tok in toks.values():
    ids, offsets = tokenize.encode(tok, text)  # raises unless the offsets partition the text
    assert len(ids) == len(offsets) and offsets[-1, 1] == len(text)
  _, char_off = tokenize.encode(toks["char"], text)
  assert np.all(char_off[:, 1] - char_off[:, 0] == 1)


def test_marker_keeps_boundaries_and_breaks_string_overlap(toks):
  text = "    return self.value  # done\n"
  _, a = tokenize.encode(toks["bpe"], text)
  _, b = tokenize.encode(toks["marker"], text)
  np.testing.assert_array_equal(a, b)
  spans = spans_from_offsets(a, b)
  assert spans.num_spans == len(a)  # identical boundaries: every span is an anchor
  t, m = tokenize.vocab_strings(toks["bpe"]), tokenize.vocab_strings(toks["marker"])
  assert any(s.startswith(tokenize.GPT2_MARKER) for s in t)
  assert not any(tokenize.GPT2_MARKER in s for s in m)
  overlap = tokenize.vocab_overlap(t, m)
  assert overlap["of_student"] < 1.0
  assert tokenize.vocab_overlap(t, t) == dict(of_student=1.0, of_teacher=1.0, jaccard=1.0)
  # The first decoded character does not depend on the marker.
  np.testing.assert_array_equal(tokenize.first_char_matrix(t), tokenize.first_char_matrix(m))
  char_overlap = tokenize.vocab_overlap(t, tokenize.vocab_strings(toks["char"]))
  assert char_overlap["jaccard"] < overlap["jaccard"]


def _levenshtein(a, b):
  row = list(range(len(b) + 1))
  for i, ca in enumerate(a, 1):
    prev, row[0] = row[0], i
    for j, cb in enumerate(b, 1):
      prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
  return row[-1]


def test_edit_distance_map_is_the_minimum(toks):
  teacher = tokenize.vocab_strings(toks["bpe"])[120:160] + ["", "Ġzzzz"]
  student = tokenize.vocab_strings(toks["unigram"])
  mapped = tokenize.edit_distance_map(teacher, student, max_len=8, block=16)
  for t, j in zip(teacher, mapped, strict=True):
    dists = [_levenshtein(t[:8], s[:8]) for s in student]
    assert dists[j] == min(dists) and j == int(np.argmin(dists)), (t, student[j])


def test_bad_kind_raises():
  with pytest.raises(ValueError, match="kind"):
    tokenize.train_tokenizer("wordpiece", TEXT, 200)
  with pytest.raises(ValueError, match="exceed"):
    tokenize.train_tokenizer("bpe", TEXT, 100)
