"""Sequential recommendation: SASRec and CRAMER's request-aware masking of a frozen backbone.

Modules: `sasrec` (the backbone, with row / column gates), `gates` (Gumbel-top-k, STE,
temperature schedule, Bernoulli KL, the gate generator), `arms` (CRAMER and the fusion
baselines), `training` (backbone and arm training, evaluation), `metrics` (HR / NDCG /
MRR@k, sampled and full ranking, genre share), `world` (the synthetic catalogue).
"""

from jaxlab.recsys import arms, gates, metrics, sasrec, training, world

__all__ = ["arms", "gates", "metrics", "sasrec", "training", "world"]
