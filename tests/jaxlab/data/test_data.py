"""Corpus determinism, split disjointness, seekable batches; digits; synthetic."""

import sysconfig

import numpy as np
import pytest

from jaxlab import data


@pytest.fixture(scope="module")
def corpus():
  return data.load_corpus(max_bytes=300_000)


def test_corpus_is_deterministic(corpus):
  again = data.load_corpus(max_bytes=300_000)
  np.testing.assert_array_equal(corpus.train, again.train)
  np.testing.assert_array_equal(corpus.val, again.val)
  assert corpus.train_files == again.train_files


def test_split_is_by_file_and_disjoint(corpus):
  assert set(corpus.train_files).isdisjoint(corpus.val_files)
  assert corpus.val_files and corpus.train_files
  # The split of a file does not depend on how many files were read.
  bigger = data.load_corpus(max_bytes=600_000)
  assert set(corpus.val_files) <= set(bigger.val_files)
  assert set(corpus.train_files) <= set(bigger.train_files)


def test_files_come_from_this_interpreters_stdlib():
  files = data.stdlib_py_files()
  assert "os.py" in files and "json/__init__.py" in files
  assert not any("site-packages" in f for f in files)
  assert sysconfig.get_paths()["stdlib"]


def test_batches_are_seekable_and_seeded(corpus):
  it = data.lm_batches(corpus.train, batch_size=4, seq_len=16, seed=3, start_step=5)
  first = next(it)
  np.testing.assert_array_equal(first, data.lm_batch(corpus.train, 5, batch_size=4, seq_len=16,
                                                     seed=3))
  assert first.shape == (4, 17) and first.dtype == np.int32
  other_seed = data.lm_batch(corpus.train, 5, batch_size=4, seq_len=16, seed=4)
  assert not np.array_equal(first, other_seed)
  # Windows are contiguous slices of the stream.
  stream = corpus.train.tobytes()
  assert bytes(first[0].astype(np.uint8)) in stream


def test_unigram_baseline_is_entropy_scale(corpus):
  bpb = data.unigram_bits_per_byte(corpus.train, corpus.val)
  assert 3.5 < bpb < 6.0


@pytest.mark.parametrize("kwargs", [dict(val_fraction=0.0), dict(val_fraction=1.0),
                                    dict(max_bytes=10)])
def test_corpus_bad_arguments(kwargs):
  with pytest.raises(ValueError):
    data.load_corpus(**kwargs)


def test_batch_bad_arguments(corpus):
  with pytest.raises(ValueError, match="1-D"):
    data.lm_batch(corpus.train[:200].reshape(2, -1), 0, batch_size=2, seq_len=8, seed=0)
  with pytest.raises(ValueError, match="too short"):
    data.lm_batch(corpus.train[:5], 0, batch_size=2, seq_len=8, seed=0)


def test_digits_standardized_and_seeded():
  d = data.load_digits(seed=0)
  np.testing.assert_allclose(d.x_train.mean(0), 0.0, atol=1e-4)
  assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int32
  assert d.x_train.shape[1] == 64 and len(d.x_train) + len(d.x_test) == 1797
  np.testing.assert_array_equal(d.y_test, data.load_digits(seed=0).y_test)
  assert not np.array_equal(d.y_test, data.load_digits(seed=1).y_test)
  sub = data.load_digits(classes=(0, 1, 2))
  assert set(np.unique(sub.y_train)) == {0, 1, 2}
  with pytest.raises(ValueError, match="classes"):
    data.load_digits(classes=(11,))


def test_synthetic_ground_truth():
  x, y, w = data.linear_regression(64, 5, noise=0.0, seed=1)
  np.testing.assert_allclose(x @ w, y, rtol=1e-5, atol=1e-5)
  x, y, centers = data.gaussian_blobs(300, num_classes=3, spread=10.0, seed=0)
  nearest = np.argmin(((x[:, None] - centers[None]) ** 2).sum(-1), axis=1)
  assert (nearest == y).mean() > 0.95
