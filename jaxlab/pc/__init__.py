"""Probabilistic circuits with Voronoi-tessellation (VT) sum nodes (Sidheekh & Natarajan, ICML 2026).

* `circuit`: a layered RAT-SPN / EinsumNet in log space (einsum layers), Gaussian or HFV
  leaves, exact box integrals.
* `voronoi`: the VT sum node (hard / soft gates, cells as half-spaces, k-means centroids,
  the soft -> hard gate bound).
* `models`: `PCModel`, a mixture (base, HFV) or VT root over the circuit's channels.
* `bounds`: certified anytime bounds Z- <= Z <= Z+ on a VT root's normaliser.
* `gaussian`: log-space Gaussian interval masses (`log_ndtr`).
* `training`: Adam maximum likelihood with the VT soft gate's alpha annealing.
* `datasets`: the 2-D / 3-D toys and sklearn's tabular sets, split 70/15/15, standardised.
* `evaluation`: the reproduction's pipeline (train and score every model over seeds; tables,
  plots).

Example::

  import jax
  from jaxlab import pc
  x = jax.random.normal(jax.random.key(0), (512, 2))
  model = pc.PCModel(pc.CircuitConfig(num_vars=2, num_channels=4), root="vt")
  params = pc.init_params(model, jax.random.key(1), x)
  log_f = model.apply(params, x)                     # hard-gated, unnormalised
  lz_lo, lz_hi = pc.anytime_log_z_bounds(
      lambda lo, hi: model.apply(params, lo, hi, method="box_mass"),
      model.apply(params, method="log_pi"), model.apply(params, method="cell_centroids"),
      domain_halfwidth=6.0, num_steps=16, capacity=256)
  # log f - lz_hi[-1] <= log p <= log f - lz_lo[-1]
"""

from jaxlab.pc import bounds, circuit, datasets, evaluation, gaussian, models, training, voronoi
from jaxlab.pc.bounds import anytime_log_z_bounds
from jaxlab.pc.circuit import Circuit, CircuitConfig
from jaxlab.pc.models import PCModel, init_params

__all__ = ["Circuit", "CircuitConfig", "PCModel", "anytime_log_z_bounds", "bounds", "circuit",
           "datasets", "evaluation", "gaussian", "init_params", "models", "training", "voronoi"]
