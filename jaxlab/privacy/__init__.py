"""Privacy-preserving feature projections for video anomaly detection (OPL / G-OPL).

`projection` (the OPL layer: QR or direct basis, projector, orthogonality penalty, G-OPL's
face alignment loss, SSC), `mil` (a light RTFM-style top-k MIL scorer with G-OPL / OPL
layers), `metrics` (snippet AUC, linear-SVM face probe, ARD), `world` (the synthetic MIL
video world with faces correlated to anomalies), `training` (one arm, jittable, vmappable),
`evaluation` (the reproduction's pipeline: the arms of a sweep over seeds).
"""

from jaxlab.privacy import evaluation, metrics, mil, projection, training, world
from jaxlab.privacy.metrics import chance_rate, face_probe_accuracy, score_kl, snippet_auc
from jaxlab.privacy.mil import PrivacyVAD, topk_mean, topk_mil_loss
from jaxlab.privacy.projection import (
    OrthogonalProjection,
    face_alignment_loss,
    orthogonality_penalty,
    orthonormal_basis,
    project,
    projector,
    subspace_similarity,
)
from jaxlab.privacy.training import Arm, TrainConfig, evaluate, make_arm, train
from jaxlab.privacy.world import World, WorldConfig, make_world

__all__ = [
    "Arm", "OrthogonalProjection", "PrivacyVAD", "TrainConfig", "World", "WorldConfig",
    "chance_rate", "evaluate", "evaluation", "face_alignment_loss", "face_probe_accuracy",
    "make_arm", "make_world", "metrics", "mil", "orthogonality_penalty", "orthonormal_basis",
    "project", "projection", "projector", "score_kl", "snippet_auc", "subspace_similarity",
    "topk_mean", "topk_mil_loss", "train", "training", "world",
]
