"""Benchmark `fp4`: quantize/dequantize throughput, XLA path vs vectorized NumPy.

  python -m launch.bench --only=fp4 [--preset=quick]

Reports, per format, XLA/NumPy speed-ups and the fraction of a same-size
float32 copy's bandwidth, in rounds with the NumPy baselines and in rounds of
the XLA ops alone (see `jaxlab.experiments.bench_fp4`). Targets: NVFP4 quantize
>= 3x NumPy; NVFP4 and MixFP4 quantize >= 40% and dequantize >= 70% of copy
bandwidth, in both kinds of rounds. Format names are `jaxlab.formats` presets.
"""

import ml_collections

from jaxlab.presets import parse_preset


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  c = ml_collections.ConfigDict()
  c.benchmark = "fp4"
  c.preset = preset
  c.seed = 0
  c.rows, c.cols = 1024, 4096          # 4M float32 elements (16 MiB)
  c.formats = ("fp8_e4m3", "int4_g16", "mxfp4_floor", "mxfp4_rceil", "nvfp4", "mixfp4")
  c.repeats = 7          # rounds with the NumPy baselines
  c.xla_repeats = 31     # rounds of copy / XLA quantize / XLA dequantize alone (ms each)
  c.xla_batches = 5      # batches of those rounds; the XLA-only fractions are their medians
  if preset == "smoke":
    c.rows, c.cols, c.repeats, c.xla_repeats, c.xla_batches = 64, 512, 2, 2, 2
    c.formats = ("nvfp4", "mixfp4")
  elif preset == "full":
    c.rows, c.cols, c.repeats, c.xla_repeats = 4096, 4096, 11, 31
  return c
