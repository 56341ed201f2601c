"""Spans and the sparse in-span coupling: coverage, marginals, sparsity, bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxlab.distill import (
    coupling_marginals,
    dense_coupling,
    overlap_coupling,
    spans_from_offsets,
)


def _offsets(cuts, length):
  ends = sorted(set(cuts) | {length})
  starts = [0] + ends[:-1]
  return np.stack([starts, ends], 1)


@st.composite
def two_tokenizations(draw):
  length = draw(st.integers(1, 60))
  inner = st.lists(st.integers(1, max(length - 1, 1)), max_size=length) if length > 1 else st.just([])
  return _offsets(draw(inner), length), _offsets(draw(inner), length), length


@settings(max_examples=200, deadline=None)
@given(two_tokenizations())
def test_spans_cover_every_character_exactly_once(case):
  t, s, length = case
  spans = spans_from_offsets(t, s)
  # Character -> span through either tokenization: each character gets one span, the same.
  via_t = np.repeat(spans.teacher, t[:, 1] - t[:, 0])
  via_s = np.repeat(spans.student, s[:, 1] - s[:, 0])
  assert len(via_t) == len(via_s) == length
  np.testing.assert_array_equal(via_t, via_s)
  via_bounds = np.searchsorted(spans.bounds, np.arange(length), side="right") - 1
  np.testing.assert_array_equal(via_t, via_bounds)
  # Spans are delimited exactly by the shared token ends.
  shared = np.intersect1d(t[:, 1], s[:, 1])
  np.testing.assert_array_equal(spans.bounds, np.concatenate([[0], shared]))


@settings(max_examples=200, deadline=None)
@given(two_tokenizations())
def test_overlap_coupling_marginals_and_sparsity(case):
  t, s, length = case
  spans = spans_from_offsets(t, s)
  c = overlap_coupling(t, s, spans)
  k = spans.num_spans
  span_len = np.diff(spans.bounds)
  dense = dense_coupling(c, len(t), len(s))
  np.testing.assert_allclose(dense.sum(), 1.0, rtol=1e-12)
  np.testing.assert_allclose(dense.sum(1), (t[:, 1] - t[:, 0]) / (span_len[spans.teacher] * k))
  np.testing.assert_allclose(dense.sum(0), (s[:, 1] - s[:, 0]) / (span_len[spans.student] * k))
  # Support inside spans only, at most n + m - 1 pairs, each pair's mass = shared chars.
  assert np.all(spans.teacher[c.teacher] == spans.student[c.student])
  assert len(c.mass) <= len(t) + len(s) - 1
  shared = np.minimum(t[c.teacher, 1], s[c.student, 1]) - np.maximum(t[c.teacher, 0],
                                                                   s[c.student, 0])
  np.testing.assert_allclose(c.mass, shared / (span_len[c.span] * k))
  start = overlap_coupling(t, s, spans, mode="start")
  np.testing.assert_allclose(np.bincount(start.span, start.mass, minlength=k), 1.0 / k)


@settings(max_examples=100, deadline=None)
@given(two_tokenizations())
def test_coupling_marginals_are_the_dense_row_and_column_sums(case):
  # What the span-constraint ablation transports: the sparse coupling's own marginals.
  t, s, _ = case
  for mode in ("overlap", "start"):
    c = overlap_coupling(t, s, mode=mode)
    a, b = coupling_marginals(c, len(t) + 2, len(s) + 3)  # padded rows get no mass
    dense = dense_coupling(c, len(t), len(s))
    np.testing.assert_allclose(a[:len(t)], dense.sum(1), atol=1e-12)
    np.testing.assert_allclose(b[:len(s)], dense.sum(0), atol=1e-12)
    assert np.all(a[len(t):] == 0) and np.all(b[len(s):] == 0)
    np.testing.assert_allclose([a.sum(), b.sum()], 1.0, rtol=1e-12)
  with pytest.raises(ValueError, match="exceed"):
    coupling_marginals(overlap_coupling(t, s), len(t) - 1, len(s))


def test_identical_tokenizations_make_one_span_per_token():
  t = np.array([[0, 2], [2, 3], [3, 7]])
  spans = spans_from_offsets(t, t)
  assert spans.teacher.tolist() == spans.student.tolist() == [0, 1, 2]
  c = overlap_coupling(t, t)
  np.testing.assert_allclose(dense_coupling(c, 3, 3), np.eye(3) / 3)


@pytest.mark.parametrize("teacher,student,match", [
    ([[0, 2], [3, 4]], [[0, 4]], "partition"),
    ([[0, 2], [2, 4]], [[0, 5]], "characters"),
    ([[1, 2]], [[0, 2]], "partition"),
])
def test_bad_offsets_raise(teacher, student, match):
  with pytest.raises(ValueError, match=match):
    spans_from_offsets(np.array(teacher), np.array(student))


@settings(max_examples=100, deadline=None)
@given(two_tokenizations())
def test_start_coupling_pairs_only_tokens_predicted_from_the_same_prefix(case):
  # A token's distribution is the prediction FOR it (from the text before it), so a pair's two
  # next-character distributions describe the same character only when both tokens start at
  # the same offset: "start" couples exactly those; "overlap" puts its leftover mass elsewhere.
  t, s, _ = case
  spans = spans_from_offsets(t, s)
  start = overlap_coupling(t, s, spans, mode="start")
  np.testing.assert_array_equal(t[start.teacher, 0], s[start.student, 0])
  np.testing.assert_array_equal(t[start.teacher, 0], spans.bounds[start.span])
  c = overlap_coupling(t, s, spans)
  same_start = t[c.teacher, 0] == s[c.student, 0]
  assert np.sum(same_start) == spans.num_spans  # one aligned pair per span
