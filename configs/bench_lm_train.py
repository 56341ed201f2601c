"""Benchmark `lm_train`: tokens/s of jaxlab's LM training step vs PyTorch eager.

  python -m launch.bench --only=lm_train [--preset=quick]

For each model below, jaxlab's `Transformer` + `train.make_train_step`
(AdamW + clip_by_global_norm) on one device, the same step data parallel over
`cpu_devices` CPU devices (what `--cpu_devices=2` gives a training run), and the
same model and step written in PyTorch eager
(`torch.set_num_threads(config.torch_threads)`) are timed interleaved in one
process, median of `repeats`; then again back to back (`back_to_back_block`
consecutive steps of each, the first untimed: a training loop's steady state).
Reports tokens/s of each and the ratios jaxlab / torch for both orders (goal
>= 1.0 on 2 CPU cores). Without torch the comparison is skipped with a
message and only jaxlab's tokens/s are reported.
quick: ~2 min on 2 idle cores with torch; smoke: a few seconds, no timing claims.
"""

import ml_collections

from jaxlab.presets import parse_preset


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.benchmark = "lm_train"
  c.preset = preset
  c.seed = 0
  c.repeats = 7
  c.warmup = 2
  c.back_to_back_block = 4  # steps per block; 3 of them timed
  c.torch_threads = 2
  # jaxlab's data parallel step uses as many CPU devices as torch uses threads (the
  # cores); `launch.bench` splits the CPU before the first JAX computation.
  c.cpu_devices = 2
  c.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=1e-3, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0))
  c.models = ml_collections.ConfigDict(dict(
      # The lm experiment's quick model (configs/lm.py:quick).
      lm_quick=dict(d_model=96, num_layers=3, num_heads=4, num_kv_heads=2, d_ff=256,
                    batch_size=32, seq_len=96),
      # Issue 18's model: 853k parameters, 32 x 256 bytes per step.
      issue18=dict(d_model=128, num_layers=4, num_heads=4, num_kv_heads=2, d_ff=384,
                   batch_size=32, seq_len=256),
  ))
  if preset == "smoke":
    c.repeats, c.warmup, c.back_to_back_block = 3, 1, 2
    c.models = ml_collections.ConfigDict(dict(
        tiny=dict(d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=64,
                  batch_size=4, seq_len=16)))
  elif preset == "full":
    c.repeats = 15
  return c
