"""Mixture of experts: routers (top-k, pruned top-k0, OEA) and the MoE FFN layer.

Non-finite rule: a token whose router logits hold a NaN or +Inf (or are all
-Inf) gets no experts and NaN weights (so a NaN MoE output), does not count
toward T, and never changes what the other tokens get (`routing`).
"""

from jaxlab.moe.layer import (
    IMPLS,
    ROUTINGS,
    MoE,
    MoEFFN,
    grouped_matmul,
    load_balance_loss,
    mean_active_experts,
    sort_by_expert,
)
from jaxlab.moe.routing import (
    expert_ranks,
    nonfinite_rows,
    num_active_experts,
    oea_route,
    pruned_topk_route,
    renormalize,
    route,
    topk_route,
)

__all__ = [
    "IMPLS", "ROUTINGS", "MoE", "MoEFFN", "expert_ranks", "grouped_matmul", "load_balance_loss",
    "mean_active_experts", "nonfinite_rows", "num_active_experts", "oea_route",
    "pruned_topk_route", "renormalize", "route", "sort_by_expert", "topk_route",
]
