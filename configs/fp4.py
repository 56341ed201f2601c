"""Experiment `fp4`: NVFP4 vs MXFP4 vs MixFP4 (and FP8, INT4-g16) quantization error + tiny-LM PTQ.

  python -m launch.main --config=configs/fp4.py:quick --workdir=runs/fp4

(a) SQNR/MSE of each format on Gaussian, Laplace, Student-t(3) and uniform
tensors and on the trained tiny LM's projection weights, with MixFP4's share of
E1M2 blocks; (b) val bits/byte of the tiny LM under W4A16 and W4A4 fake-quant
for NVFP4, MXFP4 (floor) and MixFP4 against FP32.

Presets: smoke (3 formats, with the `lm` smoke base model; tests), quick (with the
`lm` quick base model trained once into `base_lm_dir`), full. The base model's sections (`seed`, `data`,
`model`, `train`, `optimizer`, `mesh`, `eval`) are `configs/lm.py`'s for the same preset, so e.g.
`--config.optimizer.learning_rate=1e-3` retrains the base model with that learning rate.
Expected (quick): synthetic SQNR MixFP4 > NVFP4 > MXFP4 on all four
distributions (~+0.5-1.5 dB per step); PTQ order reported as measured.

Criteria (declared below, judged by `jaxlab.report.judge_all`): the paper's
accuracy claim is judged on the tiny LM's val bits/byte after PTQ, MixFP4
against NVFP4 at W4A16 and at W4A4 (primary); NVFP4 against MXFP4 is the
order expected from the formats' scales (diagnostic; quantization.md §1(d)). "MixFP4 SQNR >= NVFP4" holds by
construction (each block keeps the lower-error candidate on the same scales),
so it is a reported fact, never a criterion.

Seeds (`seeds`, inherited from `configs/lm.py`: 3 in quick, 2 in smoke) are
evaluation seeds: seed s scores every arm on its own held-out val windows
(window seed `lm.eval_seed + 1000 * s`) and draws its own synthetic tensors.
The quantizers are round-to-nearest and calibration-free, and the base LM is
the one `lm` model (3 base models would triple the base-LM training),
so the seed noise is that of the held-out sample, not of the base model.
"""

import ml_collections

from configs import lm
from jaxlab.presets import parse_preset


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  preset = parse_preset(arg)
  # The base LM (trained once, then quantized) is the `lm` experiment's of this preset.
  c = lm.get_config(preset)
  c.experiment = "fp4"
  c.base_lm_dir = ""       # "" = <workdir>/base_lm; launch.reproduce shares the lm run's
  # Declared before any run; replaces the lm config's criteria. Per seed,
  # each value is a val bits/byte (lower is better), method vs baseline on the same windows.
  claim = ("MixFP4 gives \"more robust and more accurate FP4 quantization than NVFP4\" "
           "at the same 4.5 bits/element")
  order = "expected order FP32 < MixFP4 <~ NVFP4 < MXFP4 (spec, not the paper's numbers)"
  c.criteria = ml_collections.ConfigDict(dict(
      w4a16_mix_vs_nv=dict(
          mechanism=True,  # MixFP4 is NVFP4 plus the per-block FP4 / INT4 choice
          claim=claim + " (weight-only PTQ)", metric="tiny-LM val bits/byte, W4A16 PTQ, "
          "MixFP4 vs NVFP4", direction="lower", threshold=0.0, primary=True, unit="bits/byte"),
      w4a4_mix_vs_nv=dict(
          mechanism=True,  # MixFP4 is NVFP4 plus the per-block FP4 / INT4 choice
          claim=claim + " (weights and activations)", metric="tiny-LM val bits/byte, W4A4 PTQ, "
          "MixFP4 vs NVFP4", direction="lower", threshold=0.0, primary=True, unit="bits/byte"),
      w4a16_nv_vs_mx=dict(
          claim=order, metric="tiny-LM val bits/byte, W4A16 PTQ, NVFP4 vs MXFP4 (floor)",
          direction="lower", threshold=0.0, primary=False, unit="bits/byte"),
      w4a4_nv_vs_mx=dict(
          claim=order, metric="tiny-LM val bits/byte, W4A4 PTQ, NVFP4 vs MXFP4 (floor)",
          direction="lower", threshold=0.0, primary=False, unit="bits/byte"),
      sqnr_nv_vs_mx=dict(
          claim="spec: MXFP4 (power-of-two scale, 32-blocks) has the lowest SQNR",
          metric="min over the synthetic distributions of SQNR(NVFP4) - SQNR(best MXFP4)",
          direction="higher", threshold=0.0, primary=False, unit="dB")))
  # (a) synthetic tensors: [rows, cols] per distribution; blocks along cols.
  c.synthetic = ml_collections.ConfigDict(dict(
      rows=512, cols=2048, distributions=("gaussian", "laplace", "student_t3", "uniform")))
  # Format name -> (jaxlab.formats format, options). INT4-g16 uses an E4M3 block
  # scale (same 4.5 bits/element as NVFP4); FP8 is per-tensor.
  c.formats = ("fp8_e4m3", "int4_g16", "mxfp4_floor", "mxfp4_rceil", "nvfp4", "mixfp4")
  # (b) PTQ of the tiny LM.
  c.lm = ml_collections.ConfigDict(dict(
      enabled=True,
      ptq_formats=("nvfp4", "mxfp4_floor", "mixfp4"),
      quantize_lm_head=False,  # jaxlab interpretation: keep the LM head in FP32
      # jaxlab interpretation: W4A4 activations' NVFP4/MixFP4 tensor scale over the whole
      # activation tensor of a forward call ("tensor") or per token ("token").
      act_scale="tensor",
      eval_batch_size=32, eval_num_batches=8, eval_seq_len=96, eval_seed=12345))
  if preset == "smoke":
    c.synthetic.update(rows=32, cols=512)
    c.formats = ("mxfp4_floor", "nvfp4", "mixfp4")
    c.lm.update(ptq_formats=("nvfp4", "mixfp4"), eval_batch_size=4,
                eval_num_batches=1, eval_seq_len=32)
  elif preset == "full":
    c.synthetic.update(rows=2048, cols=4096)
    c.lm.update(eval_num_batches=32, eval_seq_len=128)
  return c
