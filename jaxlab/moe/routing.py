"""MoE routers: softmax top-k, pruned top-k0 and OEA batch-aware routing.

The routers are defined in `pallas_kernels.moe.reference`, beside the Pallas
routing kernel whose numerics they specify (kernels sit below the library in
jaxlab's dependency order); this module is their home in the library API.
See that module for the rank-based formulation, OEA (Oncescu et al., arXiv
2511.02237) and the non-finite rule: a token whose logit row holds a NaN or
+Inf (or is all -Inf) gets no experts and NaN weights, and never changes what
the other tokens of its batch get.

Example:
  >>> import jax
  >>> logits = jax.random.normal(jax.random.key(0), (16, 32))
  >>> mask, w = oea_route(logits, k0=2, k_max=4)
  >>> mask.shape, bool((mask.sum(-1) <= 4).all())
  ((16, 32), True)
"""

from pallas_kernels.moe.reference import (
    ROUTINGS,
    expert_ranks,
    nonfinite_rows,
    num_active_experts,
    oea_route,
    pruned_topk_route,
    renormalize,
    route,
    router_probs,
    topk_route,
)

__all__ = ["ROUTINGS", "expert_ranks", "nonfinite_rows", "num_active_experts", "oea_route",
           "pruned_topk_route", "renormalize", "route", "router_probs", "topk_route"]
