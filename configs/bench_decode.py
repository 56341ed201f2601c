"""Benchmark: KV-cache decoding against recomputing the full forward per token.

  python -m launch.bench --only=decode

Reports `recompute / cached` (the speed-up of incremental decoding) for the
tiny LM; both generate the same greedy tokens, timed interleaved.
"""

import ml_collections

from jaxlab.presets import parse_preset


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.benchmark = "decode"
  c.preset = preset
  c.model = ml_collections.ConfigDict(dict(
      d_model=128, num_layers=4, num_heads=4, num_kv_heads=2, d_ff=384, max_len=512))
  c.batch_size = 8
  c.prompt_len = 64
  c.new_tokens = 128
  c.repeats = 5
  if preset == "smoke":
    c.model.update(d_model=32, num_layers=2, d_ff=64, max_len=64)
    c.batch_size, c.prompt_len, c.new_tokens, c.repeats = 2, 8, 8, 2
  return c
