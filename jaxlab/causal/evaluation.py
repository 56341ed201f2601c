"""The Spatial Deconfounder reproduction's pipeline: every estimator on one setting, over seeds.

A setting is one U field (a GMRF of smoothness eps, or white noise; `settings`). For each,
`run_setting` draws one grid per seed (seeds vmapped), fits the baselines (naive OLS(A, X),
OLS(A, Abar_N, X), Spatial+, an MLP without latents, the oracle OLS with U), trains the
CVAE of every z_dim vmapped over the seeds and fits the linear, Spatial+ and MLP heads on
its latent means. Errors are ``|tau_hat - tau| / sd(Y)`` and ``|delta_hat - delta| / sd(Y)``
on the interior sites; Moran's I of each fit's residuals shows how much spatial structure it left.
Seeds are paired across methods (same grid, same draws) and across settings (same keys).
The jitted programs (`SettingPrograms`) are built once and shared by every setting.
"""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jaxtyping import Array, Float

from jaxlab.causal import _cvae, _estimators, _generator, _grid
from jaxlab.presets import split_names
from jaxlab.train import optimizer

HEADS = ("linear", "spatial_plus", "mlp")
BASELINES = ("naive", "ols_interference", "spatial_plus", "mlp", "oracle")
MAP_METHODS = ("naive", "spatial_plus")   # residual maps saved next to the CVAE variants'
LOSS_TERMS = ("total", "bce", "kl")       # the CVAE trainer's loss columns, in its order


def settings(config: ml_collections.ConfigDict) -> list[tuple[str, dict]]:
  """[(name, GridConfig overrides)]: one per smoothness eps, then the white-noise control.

  Example:
    >>> from launch.configs import load_config
    >>> [n for n, _ in settings(load_config("spatial_deconfounder", "smoke"))]
    ['eps=0.1', 'white']
  """
  out = [(f"eps={float(e):g}", dict(u_field="gmrf", u_epsilon=float(e)))
         for e in config.smoothness]
  if config.negative_control:
    out.append(("white", dict(u_field="white")))
  if not out:
    raise ValueError("config.smoothness is empty and config.negative_control is False")
  return out


def grid_config(config: ml_collections.ConfigDict, overrides: dict) -> _generator.GridConfig:
  """The grid world of `config.grid` with one setting's `overrides` (`settings`).

  Example:
    >>> from launch.configs import load_config
    >>> grid_config(load_config("spatial_deconfounder", "smoke"), dict(u_field="white")).height
    16
  """
  g = config.grid.to_dict()
  g["beta"] = tuple(g["beta"])
  return _generator.GridConfig(**g, **overrides)


def cvae_config(config: ml_collections.ConfigDict, z_dim: int) -> _cvae.CVAEConfig:
  """The CVAE of `config.cvae` and `config.train` with latent size `z_dim`.

  Example:
    >>> from launch.configs import load_config
    >>> cvae_config(load_config("spatial_deconfounder", "smoke"), 4).num_steps
    40
  """
  c, t = config.cvae, config.train
  return _cvae.CVAEConfig(
      z_dim=int(z_dim), hidden=c.hidden, radius=config.grid.radius, prior_tau=c.prior_tau,
      prior_epsilon=c.prior_epsilon, prior_connectivity=c.prior_connectivity,
      beta_max=c.beta_max, beta_warmup_steps=c.beta_warmup_steps, num_steps=t.num_steps,
      batch_size=t.batch_size)


def baseline_names(config: ml_collections.ConfigDict) -> list[str]:
  """The baselines run: the MLP without latents only when the MLP head is run.

  Example:
    >>> from launch.configs import load_config
    >>> baseline_names(load_config("spatial_deconfounder", "smoke"))
    ['naive', 'ols_interference', 'spatial_plus', 'oracle']
  """
  return [b for b in BASELINES if b != "mlp" or "mlp" in split_names(config.heads)]


def variant_names(config: ml_collections.ConfigDict) -> list[str]:
  """`cvae_z{z}_{head}` for every z in `config.cvae.z_dims` and head in `config.heads`.

  Example:
    >>> from launch.configs import load_config
    >>> variant_names(load_config("spatial_deconfounder", "smoke"))
    ['cvae_z4_linear', 'cvae_z4_spatial_plus']
  """
  heads = split_names(config.heads)
  bad = sorted(set(heads) - set(HEADS))
  if bad:
    raise ValueError(f"config.heads has unknown heads {bad}; expected a subset of {HEADS}")
  return [f"cvae_z{int(z)}_{h}" for z in config.cvae.z_dims for h in heads]


def make_cvae_trainer(config: ml_collections.ConfigDict, z_dim: int):
  """(model, train) of one z_dim, trained with `jaxlab.train.optimizer(config.optimizer)`.

  Example:
    >>> from launch.configs import load_config
    >>> model, train = make_cvae_trainer(load_config("spatial_deconfounder", "smoke"), 4)
    >>> model.z_dim
    4
  """
  cfg = cvae_config(config, z_dim)
  return _cvae.make_cvae_trainer(cfg, optimizer(config.optimizer, cfg.num_steps))


def make_mlp_head(config: ml_collections.ConfigDict):
  """The MLP head's `fit(key, data, extra)`: `config.mlp_head`, optimizer stage "mlp_head".

  Example:
    >>> from launch.configs import load_config
    >>> fit = make_mlp_head(load_config("spatial_deconfounder", "smoke"))
  """
  m = config.mlp_head
  tx = optimizer(config.optimizer, m.num_steps, stage="mlp_head")
  return _estimators.make_mlp_head(tx, hidden=m.hidden, depth=m.depth, num_steps=m.num_steps)


def _r2(target, features, mask):
  """R^2 of a least-squares fit of `target` on [1, features] over `mask` (substitute quality)."""
  w = mask.reshape(-1).astype(jnp.float32)
  f = features.reshape(w.shape[0], -1)
  d = jnp.concatenate([jnp.ones((w.shape[0], 1)), f], axis=1)
  t = target.reshape(-1)
  scale = jnp.sqrt((w[:, None] * d ** 2).sum(0) / w.sum()) + 1e-12
  gram = (d / scale).T @ (w[:, None] * d / scale) + 1e-6 * jnp.eye(d.shape[1])
  coef = jnp.linalg.solve(gram, (d / scale).T @ (w * t)) / scale
  resid = (t - d @ coef) * w
  mean = (t * w).sum() / w.sum()
  return 1.0 - (resid ** 2).sum() / (((t - mean) * w) ** 2).sum()


def centre_latent(z: Float[Array, "h w q"], radius: int, z_dim: int) -> Float[Array, "h w"]:
  """The first latent channel at each site's own (centre) pixel: z [h, w, q] -> [h, w].

  `latent_means` flattens [patch row, patch col, channel] into its last axis, so the
  centre pixel's channels start at (radius * (2 radius + 1) + radius) * z_dim.

  Example:
    >>> z = jnp.arange(18.0).reshape(1, 1, 18)   # radius 1, z_dim 2: centre pixel at 8
    >>> float(centre_latent(z, 1, 2)[0, 0])
    8.0
  """
  return z[..., (radius * (2 * radius + 1) + radius) * z_dim]


def _metrics(est: _estimators.EffectEstimate, data, gcfg) -> dict:
  e_tau, e_delta = _generator.effect_errors(est.tau, est.delta, data, gcfg)
  return dict(tau_hat=est.tau, delta_hat=est.delta, tau_err=e_tau, delta_err=e_delta,
              moran=_grid.morans_i(est.residuals, mask=data.interior))


class SettingPrograms:
  """The jitted, seed-vmapped programs of one run; built once and shared by every setting.

  Args:
    config: the experiment config (`grid`, `spatial_plus`, `heads`, `cvae`, `train`,
      `mlp_head`, `optimizer`).

  Example:
    >>> from launch.configs import load_config
    >>> sorted(SettingPrograms(load_config("spatial_deconfounder", "smoke")).trainers)
    [4]
  """

  def __init__(self, config: ml_collections.ConfigDict):
    g = config.grid
    self.config = config
    self.basis = jnp.asarray(_grid.spline_basis(g.height, g.width,
                                                config.spatial_plus.num_basis))
    sp = config.spatial_plus
    self.sp_kw = dict(lam_treatment=sp.lam_treatment, lam_outcome=sp.lam_outcome)
    self.mlp = make_mlp_head(config)
    self.heads = split_names(config.heads)
    self.trainers = {int(z): make_cvae_trainer(config, z) for z in config.cvae.z_dims}
    self._jitted = {}
    # The GMRF factors are arguments, not constants: one small program per setting.
    self.simulate = jax.jit(jax.vmap(_generator.simulate, (0, None, None)), static_argnums=2)

  def baselines(self, data, keys, gcfg):
    """Per-seed metrics, data diagnostics and residual maps of every baseline."""
    if "baselines" not in self._jitted:
      def one(d, k):
        ests = dict(naive=_estimators.ols_effects(d, spillover=False),
                    ols_interference=_estimators.ols_effects(d),
                    spatial_plus=_estimators.spatial_plus_effects(d, self.basis, **self.sp_kw),
                    oracle=_estimators.ols_effects(d, d.u[..., None]))
        if "mlp" in self.heads:
          ests["mlp"] = self.mlp(k, d, None)
        # The overlap reference: how much of the treatment the true confounder explains.
        extras = dict(a_r2_u=_r2(d.a, d.u[..., None], d.interior))
        return ({n: _metrics(e, d, gcfg) for n, e in ests.items()}, extras,
                {n: ests[n].residuals for n in MAP_METHODS})
      self._jitted["baselines"] = jax.jit(jax.vmap(one))
    return self._jitted["baselines"](data, keys)

  def cvae(self, z_dim, data, keys, gcfg):
    """Per-seed metrics of every head on the CVAE's latents, its diagnostics and maps."""
    key = f"cvae{z_dim}"
    if key not in self._jitted:
      model, train = self.trainers[z_dim]
      radius = self.config.grid.radius

      def one(d, k):
        k_train, k_mlp = jax.random.split(k)
        params, losses = train(k_train, d.a, d.x)
        z = _cvae.latent_means(model, params, d.a, d.x, radius)
        ests = {}
        if "linear" in self.heads:
          ests["linear"] = _estimators.ols_effects(d, z)
        if "spatial_plus" in self.heads:
          ests["spatial_plus"] = _estimators.spatial_plus_effects(d, self.basis, z, **self.sp_kw)
        if "mlp" in self.heads:
          ests["mlp"] = self.mlp(k_mlp, d, z)
        metrics = {h: _metrics(e, d, gcfg) for h, e in ests.items()}
        # The last step's loss terms, each its own diagnostic (`losses` [steps, 3]).
        extras = dict(u_r2=_r2(d.u, z, d.interior), a_r2=_r2(d.a, z, d.interior),
                      **{f"final_loss_{t}": losses[-1, i] for i, t in enumerate(LOSS_TERMS)})
        maps = dict(latent=centre_latent(z, radius, z_dim),
                    residuals={h: e.residuals for h, e in ests.items()})
        return metrics, extras, maps
      # gcfg enters only through its (setting-independent) tau, delta and radius.
      self._jitted[key] = jax.jit(jax.vmap(one))
    return self._jitted[key](data, keys)


def _np(tree):
  """Per-seed lists of floats, NaN (no estimate) as None: strict JSON."""
  def one(v):
    return [float(x) if np.isfinite(x) else None for x in np.asarray(v, np.float64).ravel()]
  return jax.tree.map(one, jax.device_get(tree))


def _round_map(m) -> list:
  return np.round(np.asarray(m, np.float64), 4).tolist()


def run_setting(programs: SettingPrograms, config: ml_collections.ConfigDict, overrides: dict,
                seeds: Sequence[int]) -> dict[str, Any]:
  """Every method on one setting, all seeds; JSON-ready per-seed metrics and seed-0 maps.

  Args:
    programs: the run's `SettingPrograms`.
    config: the experiment config.
    overrides: the setting's `GridConfig` overrides (`settings`).
    seeds: the paired seeds.

  Returns:
    {"methods": method -> metric -> per seed, "diagnostics", "maps" (seed 0), "sd_y"}.

  Example:
    >>> from launch.configs import load_config                              # doctest: +SKIP
    >>> config = load_config("spatial_deconfounder", "smoke")                # doctest: +SKIP
    >>> out = run_setting(SettingPrograms(config), config, {}, [0, 1])       # doctest: +SKIP
  """
  gcfg = grid_config(config, overrides)
  base_keys = jax.vmap(jax.random.key)(jnp.asarray(seeds))
  k_data, k_mlp, k_cvae = (jax.vmap(lambda k, i=i: jax.random.fold_in(k, i))(base_keys)
                           for i in range(3))
  data = programs.simulate(k_data, _generator.grid_factors(gcfg), gcfg)
  metrics, base_extras, base_maps = programs.baselines(data, k_mlp, gcfg)
  methods = {n: _np(m) for n, m in metrics.items()}
  diagnostics = {"data": _np(base_extras)}
  maps = dict(u=_round_map(data.u[0]), a=_round_map(data.a[0]),
              residuals={n: _round_map(r[0]) for n, r in base_maps.items()}, latent={})
  for z_dim in programs.trainers:
    m, extras, zmaps = programs.cvae(z_dim, data, k_cvae, gcfg)
    for head, v in m.items():
      methods[f"cvae_z{z_dim}_{head}"] = _np(v)
    diagnostics[f"cvae_z{z_dim}"] = _np(extras)
    maps["latent"][f"cvae_z{z_dim}"] = _round_map(zmaps["latent"][0])
    for head, r in zmaps["residuals"].items():
      maps["residuals"][f"cvae_z{z_dim}_{head}"] = _round_map(r[0])
  y = np.asarray(data.y)
  return dict(methods=methods, diagnostics=diagnostics, maps=maps,
              sd_y=float(np.std(y[:, np.asarray(data.interior[0])])))


def draw_errors(table: dict, names: Sequence[str], methods: Sequence[str], which: str,
                label: str, labels: dict[str, str] | None = None) -> Callable[[Any], None]:
  """A bar chart of one error (`which`) per setting and method, mean ± std over seeds.

  Args:
    table: setting -> method -> metric -> `seed_summary`.
    names: the settings (x groups).
    methods: the methods (bars).
    which: the metric ("tau_err", "delta_err").
    label: the y label.
    labels: display names of the methods.

  Returns:
    `draw(ax)` for `jaxlab.study.Study.plot`.

  Example:
    >>> import matplotlib.pyplot as plt
    >>> table = {"white": {"naive": {"tau_err": dict(mean=0.2, std=0.01)}}}
    >>> fig, ax = plt.subplots()
    >>> draw_errors(table, ["white"], ["naive"], "tau_err", "error")(ax); plt.close(fig)
  """
  labels = labels or {}

  def draw(ax):
    width = 0.8 / len(methods)
    x = np.arange(len(names))
    for i, m in enumerate(methods):
      cells = [table[s][m][which] for s in names]
      means = [c["mean"] if c["mean"] is not None else np.nan for c in cells]
      stds = [c["std"] if c["std"] is not None else 0.0 for c in cells]
      ax.bar(x + i * width, means, width, yerr=stds, label=labels.get(m, m))
    ax.set_xticks(x + 0.4 - width / 2, names)
    ax.set_ylabel(label)
    ax.set_title(f"{label}, mean ± std over seeds")
    ax.legend(fontsize=5, ncol=2)
  return draw
