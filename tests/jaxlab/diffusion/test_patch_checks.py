"""A patch size of 0 is a ValueError naming it, never a ZeroDivisionError."""

import jax.numpy as jnp
import pytest

from jaxlab.diffusion import flow, icl_task, positions


def test_patch_zero_is_a_value_error():
  with pytest.raises(ValueError, match="patch 0"):
    flow.patchify(jnp.ones((8, 8, 3)), 0)
  with pytest.raises(ValueError, match="0x0x3"):
    flow.unpatchify(jnp.ones((4, 12)), 0)
  with pytest.raises(ValueError, match="stride"):
    positions.sape_positions(0.0, 0.0, image_size=8, patch=0)
  with pytest.raises(ValueError, match="patch 0 must divide image_size"):
    icl_task.TaskConfig(patch=0)
