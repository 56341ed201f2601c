"""Uncertainty quantification: MoDEX heads and losses, EDL / F-EDL / softmax baselines, UQ metrics.

MoDEX ("courtroom analogy", arXiv 2605.25616) predicts a mixture of Dirichlet
experts `sum_k omega_k Dir(alpha + tau_k e_k)`; `modex_moments` and
`modex_uncertainty` give its closed-form moments and uncertainty measures.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxlab import uq
  >>> head = uq.MoDEXHead(num_classes=3, hidden_dim=8)
  >>> variables = head.init(jax.random.key(0), jnp.zeros((4, 16)))
  >>> p = head.apply(variables, jnp.ones((4, 16)))
  >>> u = uq.modex_uncertainty(p.alpha, p.tau, p.omega)
  >>> u.epistemic.shape
  (4,)
"""

from jaxlab.uq._baselines import (
    EDLHead,
    FEDLHead,
    SoftmaxUncertainty,
    dirichlet_uncertainty,
    softmax_uncertainty,
)
from jaxlab.uq._losses import (
    dirichlet_kl_uniform,
    edl_kl_weight,
    edl_loss,
    modex_brier_loss,
    modex_nll_loss,
)
from jaxlab.uq._metrics import (
    accuracy,
    aupr,
    auroc,
    brier_score,
    expected_calibration_error,
    misclassification_aupr,
    misclassification_auroc,
    ood_aupr,
    ood_auroc,
    top1_correct,
)
from jaxlab.uq._modex import (
    MoDEXHead,
    ModexMoments,
    ModexParams,
    ModexUncertainty,
    fedl_moments,
    modex_activations,
    modex_log_mean,
    modex_moments,
    modex_uncertainty,
)

__all__ = [
    "EDLHead", "FEDLHead", "MoDEXHead", "ModexMoments", "ModexParams", "ModexUncertainty",
    "SoftmaxUncertainty", "accuracy", "aupr", "auroc", "brier_score", "dirichlet_kl_uniform",
    "dirichlet_uncertainty", "edl_kl_weight", "edl_loss", "expected_calibration_error",
    "fedl_moments", "misclassification_aupr", "misclassification_auroc", "modex_brier_loss",
    "modex_activations", "modex_log_mean", "modex_moments", "modex_nll_loss", "modex_uncertainty", "ood_aupr",
    "ood_auroc", "softmax_uncertainty", "top1_correct",
]
