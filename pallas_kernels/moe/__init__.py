"""MoE Pallas kernels: megablox-style grouped matmul and the routing mask.

Numerics are defined by `jax.lax.ragged_dot` and `jaxlab.moe.routing`
(see `reference.py`).
"""

from pallas_kernels.moe.ops import GmmBlockSizes, gmm, make_group_metadata, route
from pallas_kernels.moe.reference import gmm_reference, route_reference

__all__ = ["GmmBlockSizes", "gmm", "gmm_reference", "make_group_metadata", "route",
           "route_reference"]
