"""Benchmark: MoE-layer decode time against activated experts T (vanilla vs OEA).

  python -m launch.bench --only=oea

Memory-bound regime on CPU: N experts of d_model -> d_ff -> d_model SwiGLU in
float32 (quick: 32 x 6 MiB = 192 MiB, far past the 32 MiB L3), one decode
step of batch 16. Each routing's layer loads only its T active experts
(gather-active, compiled for its exact T as a serving engine would bucket
it), so time should track T. Reports time(OEA)/time(vanilla) next to
T(OEA)/T(vanilla) per k0.
"""

import ml_collections

from jaxlab.presets import parse_preset


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.benchmark = "oea"
  c.preset = preset
  c.seed = 0
  c.num_experts = 32
  c.k = 4
  c.d_model = 512
  c.d_ff = 1024
  c.batch_size = 16
  c.k0s = (1, 2, 3)
  c.router_scale = 1.0  # std of the synthetic router logits
  c.repeats = 7
  if preset == "smoke":
    c.num_experts, c.d_model, c.d_ff, c.repeats = 8, 32, 64, 2
    c.k, c.k0s = 2, (1,)
  elif preset == "full":
    c.num_experts, c.d_model, c.d_ff = 64, 1024, 2048
  return c
