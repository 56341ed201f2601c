"""Benchmark `text`: sentences/s of the Flax MiniLM encoder vs sentence-transformers (torch).

Candidates, timed interleaved in one process (`time_interleaved`, medians),
each encoding the same `config.num_sentences` sentences end to end
(tokenisation, padding, forward, pooling, normalisation; results on the host):
  * jax: `jaxlab.text.load_minilm(path).encode(sentences, batch_size=...)`;
  * torch: `sentence_transformers.SentenceTransformer(model_dir, device="cpu")
    .encode(sentences, batch_size=...)` on the same model files, only when
    torch and sentence-transformers are importable (never a jaxlab
    dependency); otherwise `baseline_skipped` says why and only ours is timed.
`ratios.jax_over_torch_throughput` = torch median time / ours (goal >= 1.0).
The two encoders' embeddings are compared too (`agreement.min_cosine`).
"""

import importlib
import os

import ml_collections
import numpy as np

from jaxlab import text
from jaxlab.benchmarking import time_interleaved

_SUBJECTS = ("The cat", "A young girl", "My neighbour", "The old train", "A small robot", "Our team",
             "The river", "A doctor", "The chef", "Every student", "The storm", "A black dog")
_VERBS = ("quietly watches", "quickly repairs", "happily paints", "carefully reads", "often visits",
          "slowly crosses", "proudly shows", "never forgets", "suddenly finds", "gently holds")
_OBJECTS = ("the broken bicycle", "a long letter", "the mountain village", "a bowl of soup",
            "the empty stadium", "an old photograph", "the night sky", "a red umbrella",
            "the city library", "a wooden boat", "the morning news", "a tiny garden")
_ENDINGS = (".", " today.", " after lunch.", " in the rain.", " before sunrise.", " again!", "?")


def synthetic_sentences(n: int, seed: int) -> list[str]:
  """`n` short English sentences (about 8-16 tokens), seeded: subject verb object ending."""
  rng = np.random.default_rng(seed)
  parts = (_SUBJECTS, _VERBS, _OBJECTS, _ENDINGS)
  picks = [rng.integers(0, len(p), n) for p in parts]
  return [" ".join(p[i] for p, i in zip(parts[:3], idx[:3], strict=True)) + _ENDINGS[idx[3]]
          for idx in zip(*picks, strict=True)]


def _sentence_transformers():
  """The module, or None with the reason (torch is optional, never a dependency)."""
  # Offline: the model comes from local files; never let the hub be contacted.
  os.environ.setdefault("HF_HUB_OFFLINE", "1")
  try:
    return importlib.import_module("sentence_transformers"), None
  except ImportError as e:
    return None, f"torch / sentence-transformers not importable ({e}); baseline skipped"


def run_benchmark(config: ml_collections.ConfigDict) -> dict:
  """The timings and ratios of this benchmark (see the module docstring), as a dict."""
  sentences = synthetic_sentences(config.num_sentences, config.seed)
  encoder = text.load_minilm(config.model_path or None)
  bs = config.batch_size
  candidates = {"jax": lambda: np.asarray(encoder.encode(sentences, batch_size=bs))}
  st, skipped = _sentence_transformers()
  if st is not None:
    model = st.SentenceTransformer(encoder.model_dir, device="cpu")
    candidates["torch"] = lambda: model.encode(sentences, batch_size=bs, convert_to_numpy=True,
                                               show_progress_bar=False)
  t = time_interleaved(candidates, repeats=config.repeats, warmup=config.warmup)
  n = len(sentences)
  out = {"num_sentences": n, "batch_size": bs,
         "sentences_per_s": {name: n / v["median_s"] for name, v in t.items()},
         "timings": t, "ratios": {}, "targets": {}}
  if st is None:
    out["baseline_skipped"] = skipped
    print(f"[bench_text] {skipped}")
    return out
  ours, theirs = candidates["jax"](), candidates["torch"]()
  cos = np.sum(ours * theirs, 1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
  ratio = t["torch"]["median_s"] / t["jax"]["median_s"]
  out["agreement"] = {"min_cosine": float(cos.min()),
                      "max_abs_diff": float(np.abs(ours - theirs).max())}
  out["ratios"]["jax_over_torch_throughput"] = ratio
  out["targets"]["throughput_ratio_ge_1.0"] = bool(ratio >= 1.0)
  out["versions"] = {"sentence_transformers": st.__version__,
                     "torch": importlib.import_module("torch").__version__}
  return out
