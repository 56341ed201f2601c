"""Cross-tokenizer knowledge distillation: E-SCOT (span-constrained OT + Renyi weights).

Modules::

  spans     synchronisation spans from character offsets, the sparse in-span coupling.
  sinkhorn  a log-domain entropic OT solver in jnp (matches POT).
  losses    Renyi entropy, the E-SCOT loss, its dense-coupling ablation, and the ULD / MinED /
            dense-OT baselines.
  tokenize  offline tokenizers with controlled vocabulary overlap (`tokenizers`).
  data      tokenizers from specs, text chunks, the alignment arrays a student step reads.
  training  teacher and student language models, their losses, trainers and bits/byte.
  cost      the time of the span-sparse vs a dense coupling; summary: the run's table.

The E-SCOT formulation is a jaxlab interpretation of an unpublished method (the paper's
abstract names its components, not their equations).
"""

from jaxlab.distill.losses import (
    dense_ot_loss,
    escot_dense_loss,
    escot_loss,
    kl_divergence,
    mined_loss,
    renyi_entropy,
    sorted_topk,
    span_weights,
    uld_distance,
    uld_loss,
)
from jaxlab.distill.sinkhorn import SinkhornOutput, sinkhorn
from jaxlab.distill.spans import (
    Coupling,
    Spans,
    coupling_marginals,
    dense_coupling,
    overlap_coupling,
    spans_from_offsets,
)

__all__ = [
    "Coupling", "SinkhornOutput", "Spans", "coupling_marginals", "dense_coupling",
    "dense_ot_loss", "escot_dense_loss", "escot_loss",
    "kl_divergence", "mined_loss", "overlap_coupling", "renyi_entropy", "sinkhorn",
    "sorted_topk", "span_weights", "spans_from_offsets", "uld_distance", "uld_loss",
]
