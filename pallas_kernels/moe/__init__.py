"""MoE Pallas kernels: megablox-style grouped matmul and the routing mask.

Numerics are defined by `reference.py`: `jax.lax.ragged_dot` and the routers
(top-k, pruned top-k0, OEA, with their non-finite rule), which `jaxlab.moe`
re-exports as its routing API.
"""

from pallas_kernels.moe.ops import GmmBlockSizes, gmm, make_group_metadata, route
from pallas_kernels.moe.reference import gmm_reference, route_reference

__all__ = ["GmmBlockSizes", "gmm", "gmm_reference", "make_group_metadata", "route",
           "route_reference"]
