"""Benchmark `kernels`: the Pallas kernels' default dispatch against their XLA references.

  python -m launch.bench --only=kernels [--preset=quick]

On CPU, `implementation=None` must give XLA speed (tokamax-style dispatch:
interpret mode only when asked). Reports, side by side in one process,
time(public call with implementation=None) / time(jitted XLA reference) for
the FP4 dequant-matmul (target <= 1.2), the MoE grouped matmul and the MoE
router, and which backend `None` picked (see
`jaxlab.experiments.bench_kernels`). On a GPU/TPU machine the same ratios
compare the kernels to XLA.
"""

import ml_collections

from jaxlab.presets import parse_preset


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.benchmark = "kernels"
  c.preset = preset
  c.seed = 0
  c.fmt = "nvfp4"
  c.m, c.k, c.n = 64, 512, 256            # the issue-16 shape: x [m, k] @ W [k, n]
  c.num_experts, c.tokens, c.top_k = 8, 256, 2
  c.d_model, c.d_ff = 256, 512
  c.repeats = 15
  c.calls_per_repeat = 20  # sub-millisecond calls: time batches, not single calls
  c.target_ratio = 1.2
  if preset == "smoke":
    c.m, c.k, c.n = 16, 128, 64
    c.tokens, c.d_model, c.d_ff = 32, 64, 64
    c.repeats, c.calls_per_repeat = 3, 2
  elif preset == "full":
    c.m, c.k, c.n = 256, 4096, 4096
    c.num_experts, c.tokens, c.d_model, c.d_ff = 32, 1024, 1024, 2048
    c.repeats = 31
  return c
