"""The workdir embedding store: encode once, read back while the strings and model match."""

import numpy as np
import pytest

from jaxlab.text import cache


class _Fake:
  """A stand-in encoder that records its calls; row i of a text is a hash of it."""

  def __init__(self):
    self.calls = []

  def encode(self, texts, batch_size=64):
    self.calls.append((list(texts), batch_size))
    return np.stack([np.full(3, float(sum(map(ord, t))), np.float32) for t in texts])


@pytest.fixture
def fake(monkeypatch):
  enc = _Fake()
  monkeypatch.setattr(cache, "_encoder", lambda model_dir: enc)
  return enc


def test_a_rerun_reads_the_file_without_the_encoder(fake, tmp_path):
  path = tmp_path / "sub" / "e.npz"
  first = cache.encode_cached(["a", "bb"], path, batch_size=7)
  assert fake.calls == [(["a", "bb"], 7)] and path.exists()
  again = cache.encode_cached(["a", "bb"], path)
  assert len(fake.calls) == 1
  np.testing.assert_array_equal(first, again)
  assert first.dtype == np.float32 and first.shape == (2, 3)


def test_other_strings_order_or_model_reencode(fake, tmp_path):
  path = tmp_path / "e.npz"
  cache.encode_cached(["a", "bb"], path)
  out = cache.encode_cached(["bb", "a"], path)      # order is part of the key
  assert out[0, 0] == sum(map(ord, "bb")) and len(fake.calls) == 2
  cache.encode_cached(["bb", "a"], path, model_dir=str(tmp_path))  # another model
  assert len(fake.calls) == 3
  assert cache.cache_key(["a"]) != cache.cache_key(["a"], "other/model")


@pytest.mark.parametrize("bad", [[], "abc"])
def test_bad_texts_are_a_value_error(fake, tmp_path, bad):
  with pytest.raises(ValueError):
    cache.encode_cached(bad, tmp_path / "e.npz")
  assert fake.calls == []
