"""GPS-neighbour batch sampling: batches made of spatial blocks, so semi-positives meet.

Sample4Geo builds VIGOR batches from GPS neighbours (plus similarity-mined hard
negatives) so that a batch holds geographically close pairs. jaxlab's vectorised version
(a jaxlab interpretation): the training area is cut into `block x block` tiles at a random
offset each step, and a batch is `num_blocks` distinct tiles drawn without replacement, i.e.
`num_blocks * block^2` distinct locations whose tiles are neighbourhoods. `block = 1` gives
uniform sampling without replacement (no neighbour structure).

Example:
  >>> import jax
  >>> from jaxlab.retrieval import sampling
  >>> x = sampling.neighbour_batch(jax.random.key(0), width=8, height=8, block=2, num_blocks=4)
  >>> x.shape
  (16, 2)
"""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Key


def num_tiles(width: int, height: int, block: int) -> int:
  """How many whole tiles fit in the area at any offset in [0, block)."""
  return ((width - block + 1) // block) * ((height - block + 1) // block)


def neighbour_batch(key: Key[Array, ""], *, width: int, height: int, block: int,
                    num_blocks: int, x0: int = 0, y0: int = 0) -> Float[Array, "n 2"]:
  """Locations of `num_blocks` distinct `block x block` tiles of the area (lattice points).

  Args:
    key: draws the tiling offset and the tiles.
    width, height: the area is x in [x0, x0 + width), y in [y0, y0 + height).
    block: tile side (1 = uniform sampling without replacement).
    num_blocks: tiles per batch; at most `num_tiles(width, height, block)`.
    x0, y0: the area's corner.

  Returns:
    [num_blocks * block^2, 2] distinct float locations, tile by tile.
  """
  if block < 1:
    raise ValueError(f"block must be >= 1, got {block}")
  nx, ny = (width - block + 1) // block, (height - block + 1) // block
  if not 1 <= num_blocks <= nx * ny:
    raise ValueError(f"num_blocks must lie in [1, {nx * ny}] for a {width} x {height} area "
                     f"with block {block}, got {num_blocks}")
  k_off, k_tiles = jax.random.split(key)
  offset = jax.random.randint(k_off, (2,), 0, block)
  tiles = jax.random.choice(k_tiles, nx * ny, (num_blocks,), replace=False)
  corner = jnp.stack([tiles // ny, tiles % ny], -1) * block + offset
  inner = np.array([(i, j) for i in range(block) for j in range(block)], np.int32)
  locs = corner[:, None, :] + inner[None] + jnp.array([x0, y0])
  return locs.reshape(-1, 2).astype(jnp.float32)
