"""Granularity-aware zero-shot classifier expansion (GA-ZSCE, reconstruction) and ICIS.

Synthesize classifier weights for unseen classes from class semantics, without images:
`mapping` (ICIS dual autoencoder, grouped heads, losses), `routing` (k-means groups, the
group count chosen from the semantics, hard/soft routing, per-group loss normalisation),
`metrics` (s, u, H, T, within/between-group accuracy, chance levels, template spread), `world` (synthetic and semi-real granularity worlds with
known ground truth; the packaged `taxonomy.json`), `expansion` (fit and evaluate one arm).
"""

from jaxlab.zeroshot import expansion, mapping, metrics, routing, world
from jaxlab.zeroshot.expansion import ArmConfig, TrainConfig, fit_and_evaluate
from jaxlab.zeroshot.mapping import DualMapping, LossConfig, mapping_loss
from jaxlab.zeroshot.metrics import chance_levels, group_accuracies, gzsl_accuracies, harmonic_mean
from jaxlab.zeroshot.routing import estimate_num_groups
from jaxlab.zeroshot.world import World, load_taxonomy, semireal_world, synthetic_world

__all__ = [
    "ArmConfig", "DualMapping", "LossConfig", "TrainConfig", "World", "chance_levels",
    "estimate_num_groups", "expansion", "fit_and_evaluate", "group_accuracies",
    "gzsl_accuracies", "harmonic_mean", "load_taxonomy", "mapping", "mapping_loss", "metrics",
    "routing", "semireal_world", "synthetic_world", "world",
]
