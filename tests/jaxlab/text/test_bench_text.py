"""Smoke run of the `bench_text` benchmark (timings are not asserted: smoke sizes)."""

import importlib.util

from configs import bench_text as bench_config
from jaxlab.experiments import bench_text


def test_synthetic_sentences_are_seeded_and_short():
  a, b = bench_text.synthetic_sentences(50, 0), bench_text.synthetic_sentences(50, 0)
  assert a == b and a != bench_text.synthetic_sentences(50, 1)
  assert all(5 <= len(s.split()) <= 12 for s in a)


def test_bench_text_smoke():
  cfg = bench_config.get_config("smoke")
  res = bench_text.run_benchmark(cfg)
  assert res["num_sentences"] == cfg.num_sentences
  assert res["sentences_per_s"]["jax"] > 0
  if importlib.util.find_spec("sentence_transformers") is None:
    assert "not importable" in res["baseline_skipped"] and "torch" not in res["timings"]
  else:  # the same model files in both: the embeddings agree
    assert res["agreement"]["min_cosine"] > 0.999
    assert res["ratios"]["jax_over_torch_throughput"] > 0
