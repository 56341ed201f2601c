"""Benchmark `lm_train`: tokens/s of jaxlab's LM training step vs the same step in PyTorch eager.

For each model of `config.models` (name -> model sizes + batch_size, seq_len):
  * jaxlab: `jaxlab.nn.Transformer` + `jaxlab.train.make_train_step` (donated
    state) with `clip_by_global_norm` + `optax.adamw`, next-byte cross-entropy;
  * jaxlab_dp<n> (`config.cpu_devices` = n > 1): jaxlab's step data parallel
    over n CPU devices (`make_mesh` over them, batch split on 'data', state
    replicated), i.e. what `--cpu_devices=n` gives a training run. It needs a
    process whose CPU was split into >= n devices before its first computation
    (`launch.bench` does it, `jaxlab.train.use_cpu_devices`); elsewhere it is
    skipped with a message (`data_parallel_skipped`);
  * torch: the same decoder (RMSNorm, RoPE rotate-half, GQA through
    `scaled_dot_product_attention(is_causal=True, enable_gqa=True)`, SwiGLU,
    bias-free projections) started from jaxlab's initial weights, with
    `clip_grad_norm_` + `torch.optim.AdamW` (same hyper-parameters), eager,
    `torch.set_num_threads(config.torch_threads)`.
All steps train on one fixed random batch; the candidates are timed
interleaved (`time_interleaved`, median of `config.repeats`) in this process.
`ratios.<model>_jaxlab_over_torch_tokens_per_s` = jaxlab tokens/s / torch
tokens/s on one device (>= 1.0: jaxlab at least as fast),
`<model>_jaxlab_dp<n>_over_torch_tokens_per_s` the same data parallel, and
`<model>_jaxlab_dp<n>_over_jaxlab_tokens_per_s` data parallel's speed-up.
The same ratios with the suffix `_back_to_back` come from `time_back_to_back`
(blocks of `config.back_to_back_block` consecutive steps of one candidate, the
first untimed): each library's steady state in a training loop. Interleaved,
each step starts right after another library's (its worker threads, its cache
footprint); the two orders can disagree by more than their noise, so both are
reported. Before
timing, the first two losses of each step (same weights, same batch) are
compared with the one-device step's (`<name>_first_losses_max_abs_diff`: < 1e-3
for torch, < 1e-4 for data parallel, whose only difference is float summation
order), so all really are the same model and optimizer step. torch is optional:
without it the comparison is skipped with a message (`torch_skipped`) and only
jaxlab's tokens/s are reported.
"""

import math
import sys
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxlab import train
from jaxlab.benchmarking import time_back_to_back, time_interleaved
from jaxlab.nn import Transformer, TransformerConfig

try:  # Optional baseline: torch is never a dependency of jaxlab.
  import torch
  import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the environment
  torch = None

_BATCH_KEYS = ("batch_size", "seq_len")


def _model_config(spec: dict) -> TransformerConfig:
  sizes = {k: v for k, v in spec.items() if k not in _BATCH_KEYS}
  return TransformerConfig(vocab_size=256, max_len=spec["seq_len"], **sizes)


def _optimizer(opt: ml_collections.ConfigDict) -> optax.GradientTransformation:
  return optax.chain(optax.clip_by_global_norm(opt.grad_clip),
                     optax.adamw(opt.learning_rate, b1=opt.b1, b2=opt.b2, eps=opt.eps,
                                 weight_decay=opt.weight_decay))


def next_byte_loss(model: Transformer):
  """`loss(params, batch, rng)`: mean next-byte cross-entropy of [B, T+1] windows."""
  def loss_fn(params, batch, rng):
    del rng
    logits = model.apply({"params": params}, batch[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean(), {}
  return loss_fn


# ----------------------------------------------------------------------------- torch baseline


def _torch_rope_tables(cfg: TransformerConfig, t: int):
  half = cfg.head_dim // 2
  freq = cfg.rope_base ** (-torch.arange(half, dtype=torch.float32) / half)
  angle = torch.arange(t, dtype=torch.float32)[:, None] * freq  # [t, half]
  return torch.cos(angle), torch.sin(angle)


def _torch_rope(x, cos, sin):
  """x: [b, h, t, dh]; rotate-half, as `jaxlab.nn.apply_rope`."""
  x1, x2 = x.chunk(2, dim=-1)
  return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _torch_model(cfg: TransformerConfig, params: Any):
  """The decoder in torch eager, with jaxlab's weights copied in (Dense [in,out] -> [out,in])."""

  def linear(p):
    layer = torch.nn.Linear(*np.asarray(p["kernel"]).shape, bias=False)
    with torch.no_grad():
      layer.weight.copy_(torch.from_numpy(np.array(p["kernel"]).T))
    return layer

  def norm(p):
    layer = torch.nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
    with torch.no_grad():
      layer.weight.copy_(torch.from_numpy(np.array(p["scale"])))
    return layer

  class Block(torch.nn.Module):

    def __init__(self, p):
      super().__init__()
      a, m = p["attn"], p["mlp"]
      self.attn_norm, self.mlp_norm = norm(p["attn_norm"]), norm(p["mlp_norm"])
      self.q, self.k, self.v, self.o = (linear(a[n]) for n in "qkvo")
      self.gate, self.up, self.down = (linear(m[n]) for n in ("gate", "up", "down"))

    def forward(self, x, cos, sin):
      b, t, _ = x.shape
      h, hkv, dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
      y = self.attn_norm(x)
      q = self.q(y).view(b, t, h, dh).transpose(1, 2)
      k = self.k(y).view(b, t, hkv, dh).transpose(1, 2)
      v = self.v(y).view(b, t, hkv, dh).transpose(1, 2)
      q, k = _torch_rope(q, cos, sin), _torch_rope(k, cos, sin)
      a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
      x = x + self.o(a.transpose(1, 2).reshape(b, t, h * dh))
      y = self.mlp_norm(x)
      return x + self.down(F.silu(self.gate(y)) * self.up(y))

  class Decoder(torch.nn.Module):

    def __init__(self):
      super().__init__()
      self.embed = torch.nn.Embedding(cfg.vocab_size, cfg.d_model)
      with torch.no_grad():
        self.embed.weight.copy_(torch.from_numpy(np.array(params["embed"]["embedding"])))
      self.blocks = torch.nn.ModuleList(
          [Block(params[f"block_{i}"]) for i in range(cfg.num_layers)])
      self.final_norm = norm(params["final_norm"])
      self.lm_head = linear(params["lm_head"])

    def forward(self, tokens):
      cos, sin = _torch_rope_tables(cfg, tokens.shape[1])
      x = self.embed(tokens)
      for block in self.blocks:
        x = block(x, cos, sin)
      return self.lm_head(self.final_norm(x))

  return Decoder()


def _jax_step(model: Transformer, tx, host_state, batch_np: np.ndarray, mesh=None):
  """A zero-argument jaxlab training step from `host_state` on `batch_np` (returns the loss);
  with `mesh`, data parallel over it (batch split on 'data', state replicated)."""
  state_sharding = batch_sharding = None
  if mesh is not None:
    state_sharding = train.state_sharding(host_state, mesh, fsdp=False)
    batch_sharding = train.batch_sharding(mesh)
  step = train.make_train_step(next_byte_loss(model), tx, state_sharding=state_sharding,
                               batch_sharding=batch_sharding)
  state = [jax.device_put(host_state, state_sharding)]
  batch = jax.device_put(batch_np, batch_sharding)

  def run():
    state[0], metrics = step(state[0], batch)
    return metrics["loss"]

  return run


def _torch_step(model, opt: ml_collections.ConfigDict, batch: np.ndarray):
  """A zero-argument training step of `model` on `batch`, and its first loss."""
  optimizer = torch.optim.AdamW(model.parameters(), lr=opt.learning_rate, betas=(opt.b1, opt.b2),
                                eps=opt.eps, weight_decay=opt.weight_decay)
  tokens = torch.from_numpy(np.asarray(batch, np.int64))
  inputs, labels = tokens[:, :-1], tokens[:, 1:].reshape(-1)

  def step():
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(inputs).reshape(-1, model.embed.num_embeddings), labels)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), opt.grad_clip)
    optimizer.step()
    return loss.detach()

  return step


# ----------------------------------------------------------------------------- benchmark


def _bench_model(spec: dict, config: ml_collections.ConfigDict) -> dict:
  cfg = _model_config(spec)
  b, t = spec["batch_size"], spec["seq_len"]
  model = Transformer(cfg)
  batch_np = np.random.default_rng(config.seed).integers(0, 256, (b, t + 1)).astype(np.int32)
  batch = jnp.asarray(batch_np)
  params = model.init(jax.random.key(config.seed), batch[:, :-1])["params"]
  num_params = sum(int(x.size) for x in jax.tree.leaves(params))
  tx = _optimizer(config.optimizer)
  out: dict[str, Any] = {"num_params": num_params, "tokens_per_step": b * t}
  # Every candidate starts from its own copy of the same weights (steps donate their state).
  host_state = jax.tree.map(np.asarray, train.create_train_state(params, tx, seed=config.seed))
  candidates = {"jaxlab": _jax_step(model, tx, host_state, batch_np)}
  n = config.get("cpu_devices", 1)
  if n > 1:
    devices = jax.devices()
    if devices[0].platform != "cpu" or len(devices) < n:
      out["data_parallel_skipped"] = (
          f"jaxlab_dp{n} needs {n} CPU devices, this process has {len(devices)} "
          f"{devices[0].platform} device(s): run launch.bench or call "
          f"jaxlab.train.use_cpu_devices({n}) first")
      print(f"[bench lm_train] {out['data_parallel_skipped']}", file=sys.stderr)
    else:
      mesh = train.make_mesh(devices=devices[:n])
      candidates[f"jaxlab_dp{n}"] = _jax_step(model, tx, host_state, batch_np, mesh)
  if torch is not None:
    torch.set_num_threads(config.torch_threads)
    candidates["torch"] = _torch_step(_torch_model(cfg, params), config.optimizer, batch_np)
  # All start from the same weights and batch: their first two losses (the second one
  # after one clipped AdamW update) agree if the steps are the same.
  first = {name: [float(run()) for _ in range(2)] for name, run in candidates.items()}
  for name in candidates:
    if name != "jaxlab":
      out[f"{name}_first_losses_max_abs_diff"] = max(
          abs(a - c) for a, c in zip(first[name], first["jaxlab"], strict=True))
  for suffix, timings in (
      ("", time_interleaved(candidates, repeats=config.repeats, warmup=config.warmup)),
      ("_back_to_back", time_back_to_back(candidates, repeats=config.repeats, warmup=0,
                                          block=config.back_to_back_block))):
    out[f"timings{suffix}"] = timings
    out[f"tokens_per_s{suffix}"] = {name: b * t / tm["median_s"] for name, tm in timings.items()}
  return out


def run_benchmark(config: ml_collections.ConfigDict) -> dict:
  """Times the training steps of every model; see the module docstring."""
  results: dict[str, Any] = {"models": {}, "ratios": {}}
  if torch is None:
    message = "torch is not importable: the PyTorch comparison is skipped"
    print(f"[bench lm_train] {message}", file=sys.stderr)
    results["torch_skipped"] = message
  else:
    results["torch_version"] = torch.__version__
    results["torch_threads"] = config.torch_threads
  results["jax_version"] = jax.__version__
  for name, spec in config.models.items():
    res = _bench_model(spec.to_dict(), config)
    results["models"][name] = res
    tps = res["tokens_per_s"]
    for cand in tps:
      if cand == "jaxlab":
        continue
      # torch differs from jaxlab's step in its kernels, data parallel only in summation order.
      diff, limit = res[f"{cand}_first_losses_max_abs_diff"], 1e-3 if cand == "torch" else 1e-4
      if not (math.isfinite(diff) and diff < limit):
        raise RuntimeError(f"{name}: {cand} is not the same model and step as jaxlab's (first "
                           f"losses differ by {diff}, limit {limit})")
    for suffix in ("", "_back_to_back"):
      tps = res[f"tokens_per_s{suffix}"]
      for cand in tps:
        for base in ("torch", "jaxlab"):
          if base in tps and cand not in ("torch", base):
            results["ratios"][f"{name}_{cand}_over_{base}_tokens_per_s{suffix}"] = (
                tps[cand] / tps[base])
  return results
