"""Benchmark `kernels`: each kernel's public call with `implementation=None` vs its XLA reference.

For the FP4 dequant-matmul, the MoE grouped matmul and the MoE router, in one
process, each pair with interleaved repeats (medians, `jaxlab.benchmarking`):
  * `<kernel>_none`: the public `pallas_kernels` call with the default
    `implementation=None`, called eagerly as a user would (argument checks
    and dispatch included);
  * `<kernel>_xla`: the kernel's jnp reference under `jax.jit`.
Ratios: `<kernel>_none_over_xla` = time(None) / time(XLA). On CPU the
dispatch picks XLA, so the ratio is the dispatch overhead (target <= 1.2 for
the FP4 dequant-matmul); on TPU/GPU it is the kernel against XLA. Before
timing, each pair's outputs are compared (`*_max_abs_diff`), and the first
call of each (compile or compile-cache load included) is timed once. One
timed sample is `calls_per_repeat` calls (the calls take well under a
millisecond on CPU, where one call is timer and scheduler noise).
"""

import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxlab import formats
from jaxlab.benchmarking import ratio, time_interleaved
from pallas_kernels import _common, fp4
from pallas_kernels import moe as moe_kernels
from pallas_kernels.fp4 import ops as fp4_ops
from pallas_kernels.moe import ops as moe_ops


def _first_call_s(fn) -> float:
  start = time.perf_counter()
  jax.block_until_ready(fn())
  return time.perf_counter() - start


def _max_abs_diff(a, b) -> float:
  return float(np.max(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))))


def run_benchmark(config: ml_collections.ConfigDict) -> dict:
  """The timings and ratios of this benchmark (see the module docstring), as a dict."""
  keys = jax.random.split(jax.random.key(config.seed), 6)
  m, k, n = config.m, config.k, config.n
  x = jax.random.normal(keys[0], (m, k), jnp.float32)
  wq = formats.quantize(jax.random.normal(keys[1], (k, n), jnp.float32), config.fmt, axis=0)

  e, t, d, f = config.num_experts, config.tokens, config.d_model, config.d_ff
  lhs = jax.random.normal(keys[2], (t * config.top_k, d), jnp.float32)
  rhs = jax.random.normal(keys[3], (e, d, f), jnp.float32) * d ** -0.5
  logits = jax.random.normal(keys[4], (t, e), jnp.float32)
  mask, _ = moe_kernels.route_reference(logits, routing_name="topk", k=config.top_k)
  group_sizes = mask.sum(0).astype(jnp.int32)  # the router's real expert loads

  dm_xla = jax.jit(fp4.dequant_matmul_reference)
  gmm_xla = jax.jit(moe_kernels.gmm_reference)
  route_xla = jax.jit(lambda lg: moe_kernels.route_reference(lg, routing_name="oea",
                                                             k=config.top_k, k0=1))
  candidates = {
      "dequant_matmul_none": lambda: fp4.dequant_matmul(x, wq),
      "dequant_matmul_xla": lambda: dm_xla(x, wq),
      "gmm_none": lambda: moe_kernels.gmm(lhs, rhs, group_sizes),
      "gmm_xla": lambda: gmm_xla(lhs, rhs, group_sizes),
      "route_none": lambda: moe_kernels.route(logits, routing="oea", k=config.top_k, k0=1),
      "route_xla": lambda: route_xla(logits),
  }
  first_call = {name: _first_call_s(fn) for name, fn in candidates.items()}

  def batch(fn):  # `calls_per_repeat` back-to-back calls, the last one awaited
    def run():
      for _ in range(config.calls_per_repeat - 1):
        fn()
      return fn()
    return run

  diffs = {
      "dequant_matmul_max_abs_diff": _max_abs_diff(candidates["dequant_matmul_none"](),
                                                   candidates["dequant_matmul_xla"]()),
      "gmm_max_abs_diff": _max_abs_diff(candidates["gmm_none"](), candidates["gmm_xla"]()),
      "route_max_abs_diff": _max_abs_diff(candidates["route_none"]()[1],
                                          candidates["route_xla"]()[1]),
  }
  # Each pair is interleaved on its own: in one six-way round-robin the first
  # of a pair always ran right after the previous pair's (much larger) calls
  # had evicted its data from the caches.
  timings = {}
  for name in ("dequant_matmul", "gmm", "route"):
    pair = {f"{name}_{impl}": batch(candidates[f"{name}_{impl}"]) for impl in ("none", "xla")}
    timings.update(time_interleaved(pair, repeats=config.repeats))
  ratios = {f"{name}_none_over_xla": ratio(timings, f"{name}_none", f"{name}_xla")
            for name in ("dequant_matmul", "gmm", "route")}
  variants = {"dequant_matmul": fp4_ops.MATMUL_VARIANTS, "gmm": moe_ops.GMM_VARIANTS,
              "route": moe_ops.ROUTE_VARIANTS}
  # The variant `implementation=None` prefers here; on GPU a kernel may still fall back by
  # shape or dtype (the FP4 matmul to XLA for float32 activations, say).
  backends = {name: _common.resolve(name, None, interpret=None, platform=None, variants=v).kind
              for name, v in variants.items()}
  out: dict[str, Any] = {
      "platform": jax.default_backend(),
      "backend_of_none": backends,
      "shapes": {"dequant_matmul": [m, k, n], "gmm": [t * config.top_k, d, f, e],
                 "route": [t, e]},
      "fmt": config.fmt,
      "timings": timings,
      "first_call_s": first_call,
      "outputs": diffs,
      "ratios": ratios,
      "targets": {f"dequant_matmul_none_within_{config.target_ratio}x_of_xla":
                  ratios["dequant_matmul_none_over_xla"] <= config.target_ratio},
  }
  return out
