"""Benchmark `eco`: ECO-AdamW step vs master-weight AdamW step on the same model.

Both candidates are jitted full training steps on one fixed batch:
  * master: FP32 params, forward through `fake_quant_params` (quantized
    forward), grads, `optax.adamw`, `apply_updates`;
  * eco: `QParam` params (FP8 codes + scales), forward through
    `dequantize_params`, grads w.r.t. the dequantized weights, `eco_adamw`
    (requantize with SR, inject), `optim.apply_eco` of its float updates.
  * eco_rtn: the same with round-to-nearest (no random bits), for reference.
States are threaded through the calls (no donation), interleaved, medians.
`ratios.eco_over_master_step_time` uses `config.stochastic_rounding` (SR by default).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxlab import optim
from jaxlab.benchmarking import time_interleaved
from jaxlab.nn import Transformer, TransformerConfig
from jaxlab.train import lm as train_lm


def _quantizer(config) -> optim.Quantizer:
  if config.format == "fp8_e4m3":
    return optim.Quantizer("fp8_e4m3", granularity=config.fp8_granularity)
  return optim.Quantizer("int4", block_size=config.int4_block)


def run_benchmark(config: ml_collections.ConfigDict) -> dict:
  """The timings and ratios of this benchmark (see the module docstring), as a dict."""
  model = Transformer(TransformerConfig(vocab_size=256, **config.model.to_dict()))
  rng = np.random.default_rng(config.seed)
  batch = jnp.asarray(rng.integers(0, 256, (config.batch_size, config.seq_len + 1)), jnp.int32)
  w0 = nn.meta.unbox(model.init(jax.random.key(config.seed), batch[:, :-1])["params"])
  loss_of = train_lm.next_byte_loss(model)
  quant = _quantizer(config)
  o = config.optimizer
  lr = o.learning_rate
  kw = dict(b1=o.b1, b2=o.b2, eps=o.eps, weight_decay=o.weight_decay)

  tx_m = optim.master_adamw(lr, **kw)
  tx_e = optim.eco_adamw(lr, **kw, quantizer=quant,
                         stochastic_rounding=config.stochastic_rounding, key=config.seed)
  tx_r = optim.eco_adamw(lr, **kw, quantizer=quant, stochastic_rounding=False)

  @jax.jit
  def master_step(p, s):
    g = jax.grad(lambda p: loss_of(optim.fake_quant_params(p, quant), batch, None)[0])(p)
    u, s = tx_m.update(g, s, p)
    return optax.apply_updates(p, u), s

  def make_eco_step(tx):
    @jax.jit
    def eco_step(p, s):
      g = jax.grad(lambda w: loss_of(w, batch, None)[0])(optim.dequantize_params(p))
      u, s = tx.update(g, s, p)
      return optim.apply_eco(p, u), s
    return eco_step

  pm, pe = w0, optim.quantize_params(w0, quant)
  sm, se = tx_m.init(pm), tx_e.init(pe)
  carry = {"master": (pm, sm), "eco": (pe, se), "eco_rtn": (pe, tx_r.init(pe))}

  def make(name, fn):
    def call():
      carry[name] = fn(*carry[name])
      return carry[name]
    return call

  t = time_interleaved({"master": make("master", master_step),
                        "eco": make("eco", make_eco_step(tx_e)),
                        "eco_rtn": make("eco_rtn", make_eco_step(tx_r))},
                       repeats=config.repeats, warmup=2)
  num_params = sum(int(x.size) for x in jax.tree.leaves(w0))
  bytes_m = optim.static_bytes(pm, sm)
  bytes_e = optim.static_bytes(pe, se)
  ratio = t["eco"]["median_s"] / t["master"]["median_s"]
  return {"timings": t, "num_params": num_params, "format": config.format,
          "static_bytes": {"master": bytes_m, "eco": bytes_e},
          "bytes_per_param": {"master": bytes_m / num_params, "eco": bytes_e / num_params},
          "ratios": {"eco_over_master_step_time": ratio,
                     "eco_rtn_over_master_step_time": t["eco_rtn"]["median_s"]
                                                      / t["master"]["median_s"],
                     "eco_over_master_static_bytes": bytes_e / bytes_m},
          "targets": {"step_time_ratio_le_1.15": bool(ratio <= 1.15),
                      "static_memory_saving_ge_20pct": bool(bytes_e / bytes_m <= 0.8)}}
