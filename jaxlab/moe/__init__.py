"""Mixture of experts: routers (top-k, pruned top-k0, OEA) and the MoE FFN layer."""

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
    num_active_experts,
    oea_route,
    pruned_topk_route,
    renormalize,
    route,
    topk_route,
)

__all__ = [
    "IMPLS", "ROUTINGS", "MoE", "MoEFFN", "expert_ranks", "grouped_matmul", "load_balance_loss",
    "mean_active_experts", "num_active_experts", "oea_route", "pruned_topk_route", "renormalize",
    "route", "sort_by_expert", "topk_route",
]
