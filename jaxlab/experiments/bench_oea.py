"""MoE-layer decode time vs activated experts T: vanilla top-k against OEA.

The layer (`active_expert_moe`) gathers the weights of the T active experts
only (spec 2d implementation (i)), so its cost is dominated by reading
T experts' weights from DRAM: `b * T` in the paper's latency model.
"""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax import Array
from jaxtyping import Float, Int

from jaxlab import moe
from jaxlab.benchmarking import ratio, time_interleaved


@jax.jit
def active_expert_moe(x: Float[Array, "b d"], weights: Float[Array, "b n"],
                      active: Int[Array, "t"], w_gate: Float[Array, "n d f"],
                      w_up: Float[Array, "n d f"], w_down: Float[Array, "n f d"]
                      ) -> Float[Array, "b d"]:
  """SwiGLU MoE over the `active` experts only (weights of the others are never read)."""
  wg, wu, wd = (jnp.take(w, active, axis=0) for w in (w_gate, w_up, w_down))
  h = jax.nn.silu(jnp.einsum("bd,tdf->btf", x, wg)) * jnp.einsum("bd,tdf->btf", x, wu)
  return jnp.einsum("btf,tfd,bt->bd", h, wd, jnp.take(weights, active, axis=1))


def run_benchmark(config: ml_collections.ConfigDict) -> dict:
  """The timings and ratios of this benchmark (see the module docstring), as a dict."""
  n, d, f, b, k = config.num_experts, config.d_model, config.d_ff, config.batch_size, config.k
  keys = jax.random.split(jax.random.key(config.seed), 5)
  scale = d ** -0.5
  w_gate = jax.random.normal(keys[0], (n, d, f)) * scale
  w_up = jax.random.normal(keys[1], (n, d, f)) * scale
  w_down = jax.random.normal(keys[2], (n, f, d)) * f ** -0.5
  x = jax.random.normal(keys[3], (b, d))
  logits = jax.random.normal(keys[4], (b, n)) * config.router_scale

  routings = {"vanilla": moe.topk_route(logits, k)}
  for k0 in config.k0s:
    routings[f"oea_k0={k0}"] = moe.oea_route(logits, k0=k0, k_max=k)
  candidates, num_active = {}, {}
  for name, (mask, w) in routings.items():
    active = jnp.asarray(np.flatnonzero(np.asarray(mask).any(0)), jnp.int32)
    num_active[name] = int(active.shape[0])
    candidates[name] = functools.partial(active_expert_moe, x, w, active, w_gate, w_up, w_down)
  # Correctness: the gathered layer equals the dense all-experts combination.
  for name, (_, w) in routings.items():
    h = jax.nn.silu(jnp.einsum("bd,ndf->bnf", x, w_gate)) * jnp.einsum("bd,ndf->bnf", x, w_up)
    dense = jnp.einsum("bnf,nfd,bn->bd", h, w_down, w)
    np.testing.assert_allclose(candidates[name](), dense, rtol=2e-3, atol=2e-3)

  timings = time_interleaved(candidates, repeats=config.repeats)
  ratios = {}
  for name in routings:
    if name == "vanilla":
      continue
    ratios[f"{name}_over_vanilla_time"] = ratio(timings, name, "vanilla")
    ratios[f"{name}_over_vanilla_T"] = num_active[name] / num_active["vanilla"]
  ts = np.array([num_active[k_] for k_ in routings], float)
  secs = np.array([timings[k_]["median_s"] for k_ in routings])
  slope, intercept = np.polyfit(ts, secs, 1) if len(set(ts)) > 1 else (float("nan"), float("nan"))
  weights_mib = 3 * n * d * f * 4 / 2 ** 20
  return {"timings": timings, "num_active_experts": num_active, "ratios": ratios,
          "time_per_expert_s": float(slope), "time_at_T0_s": float(intercept),
          "expert_weights_mib": weights_mib,
          "time_falls_with_T": bool(all(
              timings[a]["median_s"] <= timings[c]["median_s"]
              for a in routings for c in routings if num_active[a] < num_active[c]))}
