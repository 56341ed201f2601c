"""Pallas kernels for TPU (Mosaic) and GPU (Triton / Mosaic GPU), below the library.

  * `pallas_kernels.fp4`: fused NVFP4 / MixFP4 quantize and dequant-matmul; the
    numerics are `jaxlab.formats`'.
  * `pallas_kernels.moe`: megablox-style grouped matmul and the routing mask; the
    numerics are `jax.lax.ragged_dot` and the routers in `moe.reference`.
  * `pallas_kernels.tuning`: tuned block configurations, looked up per call.

Every public kernel takes `implementation=`, `interpret=` and `platform=` (dispatch
in `pallas_kernels._common`): on CPU it runs the pure-jnp reference by default, or the
TPU kernel in the Pallas interpreter with `interpret=True`.
"""
