"""Cross-view geo-localisation (CVGL) with NIG evidential uncertainty and Soft InfoNCE.

`nig` (the NIG head, DER NLL / regulariser, aleatoric and epistemic uncertainty), `losses`
(Sample4Geo's symmetric InfoNCE with label smoothing; u-adaptive Soft InfoNCE), `sampling`
(GPS-neighbour batches), `metrics` (R@k, R@1%, Spearman), `world` (the synthetic two-view
geo world with cities), `model` (tiny two-tower encoders + NIG head), `training` (one arm,
seeds vmapped). The u -> label mapping, the DER target and the head's layout are jaxlab
interpretations of the paper (its code was unavailable).
"""

from jaxlab.retrieval import losses, metrics, model, nig, sampling, training, world
from jaxlab.retrieval.losses import infonce, soft_infonce, soft_targets, squash_uncertainty
from jaxlab.retrieval.metrics import recall_at_k
from jaxlab.retrieval.model import CVGLModel, ViewEncoder
from jaxlab.retrieval.nig import (
    NIGHead,
    NIGParams,
    der_loss,
    der_nll,
    der_regularizer,
    nig_uncertainty,
)

__all__ = [
    "CVGLModel", "NIGHead", "NIGParams", "ViewEncoder", "der_loss", "der_nll", "der_regularizer",
    "infonce", "losses", "metrics", "model", "nig", "nig_uncertainty", "recall_at_k", "sampling",
    "soft_infonce", "soft_targets", "squash_uncertainty", "training", "world",
]
