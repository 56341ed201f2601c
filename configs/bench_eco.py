"""Benchmark `eco`: ECO-AdamW train step vs optax.adamw with FP32 master weights.

  python -m launch.bench --only=eco [--preset=quick]

Same tiny LM and batch; both steps are full training steps (quantized
forward, backward, optimizer update, apply_updates), timed interleaved in one
process (medians). Reports the ECO / master step-time ratio (target <= 1.15)
and the static bytes (params + optimizer state) of both.
"""

import ml_collections

from jaxlab.presets import parse_preset


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.benchmark = "eco"
  c.preset = preset
  c.seed = 0
  c.format = "fp8_e4m3"            # or "int4"
  c.fp8_granularity = "row"
  c.int4_block = 32
  c.stochastic_rounding = True
  c.batch_size, c.seq_len = 32, 128   # 4096 tokens per step
  c.model = ml_collections.ConfigDict(dict(
      d_model=128, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=384, max_len=128))
  # Both steps use a constant learning rate (a schedule does not change step time).
  c.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=1e-3, schedule="constant", b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1))
  c.repeats = 11
  if preset == "smoke":
    c.batch_size, c.seq_len, c.repeats = 2, 16, 3
    c.model.update(d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, d_ff=64, max_len=16)
  elif preset == "full":
    c.batch_size, c.seq_len, c.repeats = 32, 128, 31
    c.model.update(d_model=256, num_layers=4, d_ff=768, max_len=128)
  return c
