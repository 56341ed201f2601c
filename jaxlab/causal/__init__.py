"""Spatial causal inference: the Spatial Deconfounder (arXiv 2510.08762) and its baselines.

A smooth unobserved field U confounds a spatial treatment A and outcome Y, and Y also
depends on the neighbours' treatments (localised interference). Since U is smooth, the
neighbour treatments carry information about U_s: a conditional VAE with a GMRF prior over
each site's patch (`SpatialCVAE`, `make_cvae_trainer`) infers a substitute confounder from
them, and an outcome head (`ols_effects`, `spatial_plus_effects`, `make_mlp_head`) adjusts
for it to estimate the direct effect tau and the spillover effect delta.

Pieces: grid structure and Moran's I (`grid_laplacian`, `extract_patches`,
`neighbour_mean`, `morans_i`, `spline_basis`), GMRF sampling (`gmrf_precision`,
`precision_cholesky`, `sample_gmrf`), the seeded data-generating process with known effects
(`GridConfig`, `make_generator`, `effect_errors`). `evaluation`: the reproduction's pipeline.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jaxlab import causal
  >>> cfg = causal.GridConfig(height=16, width=16, u_epsilon=0.1)
  >>> data = causal.make_generator(cfg)(jax.random.key(0))
  >>> oracle = causal.ols_effects(data, data.u[..., None])
  >>> naive = causal.ols_effects(data, spillover=False)
  >>> bool(abs(oracle.tau - cfg.tau) < abs(naive.tau - cfg.tau))
  True
"""

from jaxlab.causal import evaluation
from jaxlab.causal._cvae import (
    CVAEConfig,
    PatchConv3x3,
    SpatialCVAE,
    gmrf_kl,
    latent_means,
    make_cvae_trainer,
    patch_prior_precision,
)
from jaxlab.causal._estimators import (
    EffectEstimate,
    OutcomeMLP,
    make_mlp_head,
    ols_effects,
    spatial_plus_effects,
)
from jaxlab.causal._fields import gmrf_precision, precision_cholesky, sample_gmrf, standardize
from jaxlab.causal._generator import (
    U_FIELDS,
    GridConfig,
    GridFactors,
    SpatialData,
    effect_errors,
    grid_factors,
    make_generator,
    simulate,
)
from jaxlab.causal._grid import (
    extract_patches,
    grid_adjacency,
    grid_laplacian,
    interior_mask,
    morans_i,
    neighbour_mean,
    spline_basis,
)

__all__ = [
    "U_FIELDS", "CVAEConfig", "EffectEstimate", "GridConfig", "GridFactors", "OutcomeMLP", "PatchConv3x3", "SpatialCVAE",
    "SpatialData", "effect_errors", "evaluation", "extract_patches", "gmrf_kl",
    "gmrf_precision", "grid_adjacency", "grid_factors", "grid_laplacian", "interior_mask", "latent_means",
    "make_cvae_trainer", "make_generator", "make_mlp_head", "morans_i", "neighbour_mean",
    "ols_effects", "patch_prior_precision", "precision_cholesky", "sample_gmrf", "simulate",
    "spatial_plus_effects", "spline_basis", "standardize",
]
