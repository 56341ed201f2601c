"""A synthetic two-view geo world for cross-view retrieval (CVGL §5(d), jaxlab construction).

Locations are the points of a `grid x grid` lattice (spacing 1). A city has a latent scene
field z(x) in R^d, a sum of random-Fourier-feature fields:

  z(x) = smooth(x; l) + rough_amp * m(x) * rough(x; rough_ratio * l),
  m(x) = sigmoid(mask_gain * mask(x; mask_length)),

so nearby locations look alike (semi-positives) and the local roughness varies in space
(the "environmental complexity" the NIG uncertainty should track). Two views of x:

* street (query): `street_tokens` samples of z on a ring of radius `street_radius` around x,
  through tanh(z A + c) plus Gaussian noise, then circularly shifted by a random orientation;
* satellite (reference): a 3 x 3 patch of z around x (spacing `sat_spacing`), through
  tanh(z B + c') plus noise.

Cities differ in their field seed, length-scale, noise level and view maps: a city's maps are
(base + map_shift * its own random map) / sqrt(1 + map_shift^2), so map_shift = 0 keeps the
shared base maps. Every array of a city has a shape fixed by `WorldConfig` alone, so cities
are pytrees that `jit` and `vmap` take as data (one compiled program for every city).

Example:
  >>> import jax
  >>> from jaxlab.retrieval import world
  >>> cfg = world.WorldConfig(grid=8)
  >>> city = world.make_city(cfg, world.CitySpec(seed=0, length_scale=3.0, noise=0.1), 0)
  >>> street, sat = world.render_views(cfg, city, world.grid_locations(cfg), jax.random.key(0))
  >>> street.shape, sat.shape
  ((64, 8, 8), (64, 9, 8))
"""

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Key

_SAT_OFFSETS = np.array([(dx, dy) for dy in (-1, 0, 1) for dx in (-1, 0, 1)], np.float32)


@dataclasses.dataclass(frozen=True)
class WorldConfig:
  """Shapes and shared constants of the world (jaxlab construction; every field a knob).

  Attributes:
    grid: the lattice is grid x grid locations.
    latent_dim: d, channels of the latent field.
    obs_dim: D, features per view token.
    num_features: random Fourier features per field component.
    street_tokens: tokens of the street view (ring samples).
    street_radius: ring radius in grid units.
    sat_spacing: spacing of the satellite view's 3 x 3 patch in grid units.
    rough_ratio: the rough component's length-scale as a fraction of the city's.
    rough_amp: amplitude of the rough component.
    mask_length: length-scale of the roughness mask m(x).
    mask_gain: gain of the mask's sigmoid (larger: sharper smooth/rough regions).
    train_frac: the training area is the columns x < train_frac * grid of city 1; the
      held-out test area (and every city's evaluation area) is the rest.
    map_seed: seed of the base view maps shared by every city.
  """
  grid: int = 32
  latent_dim: int = 8
  obs_dim: int = 8
  num_features: int = 64
  street_tokens: int = 8
  street_radius: float = 1.0
  sat_spacing: float = 1.0
  rough_ratio: float = 0.3
  rough_amp: float = 1.0
  mask_length: float = 8.0
  mask_gain: float = 3.0
  train_frac: float = 0.75
  map_seed: int = 1234

  def __post_init__(self):
    if self.grid < 4:
      raise ValueError(f"grid must be >= 4, got {self.grid}")
    if not 0.0 < self.train_frac < 1.0:
      raise ValueError(f"train_frac must lie in (0, 1), got {self.train_frac}")
    split = int(round(self.train_frac * self.grid))
    if not 1 <= split < self.grid:
      raise ValueError(f"train_frac={self.train_frac} leaves no train or test columns "
                       f"on a grid of {self.grid}")
    if self.street_tokens < 2:
      raise ValueError(f"street_tokens must be >= 2, got {self.street_tokens}")

  @property
  def split(self) -> int:
    """First column of the held-out area."""
    return int(round(self.train_frac * self.grid))


@dataclasses.dataclass(frozen=True)
class CitySpec:
  """One city: its field seed, length-scale l (grid units), view noise and map shift."""
  seed: int
  length_scale: float
  noise: float
  map_shift: float = 0.0

  def __post_init__(self):
    if self.length_scale <= 0 or self.noise < 0 or self.map_shift < 0:
      raise ValueError(f"CitySpec needs length_scale > 0, noise >= 0, map_shift >= 0; got {self}")


class City(NamedTuple):
  """A city's arrays (a pytree; shapes fixed by `WorldConfig`)."""
  omega: Array     # [3, M, 2] frequencies of the smooth, rough and mask fields
  phase: Array     # [3, M]
  weights: Array   # [2, M, d] output weights of the smooth and rough fields
  mask_w: Array    # [M] output weights of the mask field
  street_map: Array  # [d + 1, D] (last row: bias)
  sat_map: Array     # [d + 1, D]
  noise: Array       # [] view noise std


def _maps(cfg: WorldConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  d, n = cfg.latent_dim, cfg.obs_dim
  scale = np.concatenate([np.full((d, 1), 1.0 / np.sqrt(d)), np.full((1, 1), 0.3)])
  return (rng.standard_normal((d + 1, n)) * scale, rng.standard_normal((d + 1, n)) * scale)


def make_city(cfg: WorldConfig, spec: CitySpec, seed: int = 0) -> City:
  """Draws a city (numpy RNG seeded by `spec.seed` and `seed`, so runs are reproducible).

  Args:
    cfg: the world's shapes and constants.
    spec: the city's seed, length-scale, noise and map shift.
    seed: the experiment seed; a different seed draws a different field and map shift.

  Returns:
    The city's arrays.
  """
  rng = np.random.default_rng([int(spec.seed), int(seed)])
  m, d = cfg.num_features, cfg.latent_dim
  lengths = np.array([spec.length_scale, cfg.rough_ratio * spec.length_scale, cfg.mask_length])
  omega = rng.standard_normal((3, m, 2)) / lengths[:, None, None]
  phase = rng.uniform(0, 2 * np.pi, (3, m))
  weights = rng.standard_normal((2, m, d)) * np.sqrt(2.0 / m)
  mask_w = rng.standard_normal(m) * np.sqrt(2.0 / m)
  base_street, base_sat = _maps(cfg, np.random.default_rng(cfg.map_seed))
  own_street, own_sat = _maps(cfg, rng)
  norm = np.sqrt(1.0 + spec.map_shift ** 2)
  f32 = lambda x: jnp.asarray(x, jnp.float32)
  return City(f32(omega), f32(phase), f32(weights), f32(mask_w),
              f32((base_street + spec.map_shift * own_street) / norm),
              f32((base_sat + spec.map_shift * own_sat) / norm), f32(spec.noise))


def stack_cities(cities: list[City]) -> City:
  """Stacks cities along a new leading axis (for `vmap` over seeds); stacks on the host."""
  return jax.tree.map(lambda *xs: jnp.asarray(np.stack([np.asarray(x) for x in xs])), *cities)


def field(cfg: WorldConfig, city: City, x: Float[Array, "*n 2"]) -> Float[Array, "*n d"]:
  """The latent scene z(x) at continuous locations x (grid units)."""
  m = cfg.num_features
  feats = jnp.sqrt(2.0 / m) * jnp.cos(jnp.einsum("...c,kmc->...km", x, city.omega) + city.phase)
  smooth = feats[..., 0, :] @ city.weights[0]
  rough = feats[..., 1, :] @ city.weights[1]
  mask = jax.nn.sigmoid(cfg.mask_gain * (feats[..., 2, :] @ city.mask_w))
  return smooth + cfg.rough_amp * mask[..., None] * rough


def roughness(cfg: WorldConfig, city: City, x: Float[Array, "n 2"], *, delta: float = 0.5
              ) -> Float[Array, " n"]:
  """Local roughness: mean over 4 directions of ``|z(x + delta e) - z(x)| / delta``."""
  steps = delta * jnp.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
  z0 = field(cfg, city, x)
  zs = field(cfg, city, x[:, None, :] + steps)
  return jnp.linalg.norm(zs - z0[:, None, :], axis=-1).mean(-1) / delta


def semi_positive_density(cfg: WorldConfig, city: City, x: Float[Array, "n 2"], *,
                          threshold: float = 0.8) -> Float[Array, ""]:
  """Fraction of the 8 lattice neighbours whose latent cosine similarity exceeds `threshold`.

  The density of semi-positives (geographically close, semantically alike locations) that
  an all-negatives InfoNCE pushes away.
  """
  offsets = jnp.asarray(_SAT_OFFSETS[np.any(_SAT_OFFSETS != 0, axis=1)])
  unit = lambda z: z / jnp.maximum(jnp.linalg.norm(z, axis=-1, keepdims=True), 1e-9)
  z0 = unit(field(cfg, city, x))
  zs = unit(field(cfg, city, x[:, None, :] + offsets))
  return jnp.mean(jnp.einsum("nd,nkd->nk", z0, zs) > threshold)


def grid_locations(cfg: WorldConfig, area: str = "all") -> Float[Array, "n 2"]:
  """Lattice points of an area: "all", "train" (x < split) or "test" (x >= split)."""
  if area not in ("all", "train", "test"):
    raise ValueError(f"area must be 'all', 'train' or 'test', got {area!r}")
  lo, hi = {"all": (0, cfg.grid), "train": (0, cfg.split), "test": (cfg.split, cfg.grid)}[area]
  xs, ys = np.meshgrid(np.arange(lo, hi), np.arange(cfg.grid), indexing="ij")
  return jnp.asarray(np.stack([xs.ravel(), ys.ravel()], -1), jnp.float32)


def _apply_map(z, m):
  return jnp.tanh(z @ m[:-1] + m[-1])


def render_views(cfg: WorldConfig, city: City, x: Float[Array, "n 2"], key: Key[Array, ""]
                 ) -> tuple[Float[Array, "n ts D"], Float[Array, "n 9 D"]]:
  """Street (query) and satellite (reference) views of locations x, with fresh noise.

  Args:
    cfg: the world's shapes and constants.
    city: the city.
    x: locations, [n, 2] (grid units).
    key: draws the view noise and the street views' orientations.

  Returns:
    street [n, street_tokens, obs_dim] and satellite [n, 9, obs_dim] tokens.
  """
  if x.ndim != 2 or x.shape[1] != 2:
    raise ValueError(f"x must be [n, 2] locations, got shape {x.shape}")
  n, p = x.shape[0], cfg.street_tokens
  k_shift, k_street, k_sat = jax.random.split(key, 3)
  theta = 2 * jnp.pi * jnp.arange(p) / p
  ring = cfg.street_radius * jnp.stack([jnp.cos(theta), jnp.sin(theta)], -1)
  street = _apply_map(field(cfg, city, x[:, None, :] + ring), city.street_map)
  street = street + city.noise * jax.random.normal(k_street, street.shape)
  shift = jax.random.randint(k_shift, (n, 1), 0, p)
  street = jnp.take_along_axis(street, ((jnp.arange(p)[None, :] + shift) % p)[..., None], axis=1)
  patch = field(cfg, city, x[:, None, :] + cfg.sat_spacing * jnp.asarray(_SAT_OFFSETS))
  sat = _apply_map(patch, city.sat_map)
  sat = sat + city.noise * jax.random.normal(k_sat, sat.shape)
  return street, sat
