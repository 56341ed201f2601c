"""Diffusion: Pose-ICL's SAPE positions, a pure-JAX ray caster, an in-context DiT, rectified flow.

Modules: `render` (procedural objects, analytic ray casting), `positions` (SAPE anchors, 2-D
grid, Plücker rays), `rope` (multi-axis RoPE with real positions), `dit` (the in-context
DiT), `flow` (rectified-flow loss, Euler sampler, patches), `metrics` (PSNR, pose error by
render search, colour-histogram identity), `icl_task` (the toy Pose-ICL task and its arms).
"""

from jaxlab.diffusion import flow, icl_task, metrics, positions, render, rope
from jaxlab.diffusion.dit import DiT, DiTConfig, timestep_embedding
from jaxlab.diffusion.rope import apply_rope_nd, even_sections

__all__ = ["DiT", "DiTConfig", "apply_rope_nd", "even_sections", "flow", "icl_task", "metrics",
           "positions", "render", "rope", "timestep_embedding"]
