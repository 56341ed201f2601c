"""Spatial Deconfounder reproduction: does a CVAE substitute confounder de-bias spatial effects?

For each setting (U's smoothness eps, and the white-noise control) the experiment draws
one grid per seed (`jaxlab.causal.make_generator`, seeds vmapped), fits the baselines
(naive OLS(A, X), OLS(A, Abar_N, X), Spatial+, an MLP without latents, the oracle OLS with
U), trains the CVAE of every z_dim vmapped over the seeds (one compiled program per z_dim,
shared by the settings) and fits the linear, Spatial+ and MLP heads on its latent means.
Errors are |tau_hat - tau| / sd(Y) and |delta_hat - delta| / sd(Y) on the interior sites;
Moran's I of each fit's residuals shows how much spatial structure it left. Each setting is
one arm of `jaxlab.train.ArmCache`, so a killed run resumes; seeds are paired across methods
(same grid, same draws) and across settings (same keys).
"""

import dataclasses
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxlab.report
import jaxlab.train
from jaxlab import causal
from jaxlab.presets import config_seeds, split_names
from jaxlab.report import seed_summary

PAPER_CLAIM = ("A CVAE with a spatial prior infers a substitute for a smooth unobserved "
               "confounder from neighbouring treatments; adjusting for it moves the direct and "
               "spillover estimates toward the truth, more so than Spatial+ and the naive fit")
HEADS = ("linear", "spatial_plus", "mlp")
BASELINES = ("naive", "ols_interference", "spatial_plus", "mlp", "oracle")
LABELS = {"naive": "OLS(A, X)", "ols_interference": "OLS(A, Ā_N, X)", "spatial_plus": "Spatial+",
          "mlp": "MLP(A, Ā_N, X)", "oracle": "oracle OLS(A, Ā_N, X, U)"}
MAP_METHODS = ("naive", "spatial_plus")   # residual maps saved next to the criteria variant's
LOSS_TERMS = ("total", "bce", "kl")       # the CVAE trainer's loss columns, in its order


def settings(config) -> list[tuple[str, dict]]:
  """[(name, GridConfig overrides)]: one per smoothness eps, then the white-noise control."""
  out = [(f"eps={float(e):g}", dict(u_field="gmrf", u_epsilon=float(e)))
         for e in config.smoothness]
  if config.negative_control:
    out.append(("white", dict(u_field="white")))
  if not out:
    raise ValueError("config.smoothness is empty and config.negative_control is False")
  return out


def grid_config(config, overrides: dict) -> causal.GridConfig:
  """The grid world of `config.grid` with one setting's `overrides` (`settings`)."""
  g = config.grid.to_dict()
  g["beta"] = tuple(g["beta"])
  return causal.GridConfig(**g, **overrides)


def cvae_config(config, z_dim: int) -> causal.CVAEConfig:
  """The CVAE of `config.cvae` and `config.train` with latent size `z_dim`."""
  c, t = config.cvae, config.train
  return causal.CVAEConfig(
      z_dim=int(z_dim), hidden=c.hidden, radius=config.grid.radius, prior_tau=c.prior_tau,
      prior_epsilon=c.prior_epsilon, prior_connectivity=c.prior_connectivity,
      beta_max=c.beta_max, beta_warmup_steps=c.beta_warmup_steps, num_steps=t.num_steps,
      batch_size=t.batch_size, weight_decay=t.weight_decay, max_grad_norm=t.max_grad_norm)


def baseline_names(config) -> list[str]:
  """The baselines run: the MLP without latents only when the MLP head is run."""
  return [b for b in BASELINES if b != "mlp" or "mlp" in split_names(config.heads)]


def variant_names(config) -> list[str]:
  """`cvae_z{z}_{head}` for every z in `config.cvae.z_dims` and head in `config.heads`."""
  heads = split_names(config.heads)
  bad = sorted(set(heads) - set(HEADS))
  if bad:
    raise ValueError(f"config.heads has unknown heads {bad}; expected a subset of {HEADS}")
  return [f"cvae_z{int(z)}_{h}" for z in config.cvae.z_dims for h in heads]


def make_cvae_trainer(config, z_dim: int):
  """(model, train) of one z_dim, with `optimizer.learning_rate` through its schedule."""
  cfg = cvae_config(config, z_dim)
  lr = jaxlab.train.make_schedule(config.optimizer, cfg.num_steps)
  return causal.make_cvae_trainer(cfg, lr)


def make_mlp_head(config):
  """The MLP head's `fit(key, data, extra)` with the settings of `config.mlp_head`."""
  m = config.mlp_head
  lr = float(config.optimizer.mlp_head.learning_rate)
  return causal.make_mlp_head(hidden=m.hidden, depth=m.depth, num_steps=m.num_steps,
                              learning_rate=lr)


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


def centre_latent(z: jax.Array, radius: int, z_dim: int) -> jax.Array:
  """The first latent channel at each site's own (centre) pixel: z [h, w, q] -> [h, w].

  `causal.latent_means` flattens [patch row, patch col, channel] into its last axis, so the
  centre pixel's channels start at (radius * (2 radius + 1) + radius) * z_dim.
  """
  return z[..., (radius * (2 * radius + 1) + radius) * z_dim]


def _metrics(est: causal.EffectEstimate, data, gcfg) -> dict:
  e_tau, e_delta = causal.effect_errors(est.tau, est.delta, data, gcfg)
  return dict(tau_hat=est.tau, delta_hat=est.delta, tau_err=e_tau, delta_err=e_delta,
              moran=causal.morans_i(est.residuals, mask=data.interior))


class _Programs:
  """The jitted, seed-vmapped programs of one run; built once and shared by every setting."""

  def __init__(self, config):
    g = config.grid
    self.config = config
    self.basis = jnp.asarray(causal.spline_basis(g.height, g.width,
                                                 config.spatial_plus.num_basis))
    sp = config.spatial_plus
    self.sp_kw = dict(lam_treatment=sp.lam_treatment, lam_outcome=sp.lam_outcome)
    self.mlp = make_mlp_head(config)
    self.heads = split_names(config.heads)
    self.trainers = {int(z): make_cvae_trainer(config, z) for z in config.cvae.z_dims}
    self._jitted = {}
    # The GMRF factors are arguments, not constants: one small program per setting.
    self.simulate = jax.jit(jax.vmap(causal.simulate, (0, None, None)), static_argnums=2)

  def baselines(self, data, keys, gcfg):
    if "baselines" not in self._jitted:
      def one(d, k):
        ests = dict(naive=causal.ols_effects(d, spillover=False),
                    ols_interference=causal.ols_effects(d),
                    spatial_plus=causal.spatial_plus_effects(d, self.basis, **self.sp_kw),
                    oracle=causal.ols_effects(d, d.u[..., None]))
        if "mlp" in self.heads:
          ests["mlp"] = self.mlp(k, d, None)
        # The overlap reference: how much of the treatment the true confounder explains.
        extras = dict(a_r2_u=_r2(d.a, d.u[..., None], d.interior))
        return ({n: _metrics(e, d, gcfg) for n, e in ests.items()}, extras,
                {n: ests[n].residuals for n in MAP_METHODS})
      self._jitted["baselines"] = jax.jit(jax.vmap(one))
    return self._jitted["baselines"](data, keys)

  def cvae(self, z_dim, data, keys, gcfg):
    key = f"cvae{z_dim}"
    if key not in self._jitted:
      model, train = self.trainers[z_dim]
      radius = self.config.grid.radius

      def one(d, k):
        k_train, k_mlp = jax.random.split(k)
        params, losses = train(k_train, d.a, d.x)
        z = causal.latent_means(model, params, d.a, d.x, radius)
        ests = {}
        if "linear" in self.heads:
          ests["linear"] = causal.ols_effects(d, z)
        if "spatial_plus" in self.heads:
          ests["spatial_plus"] = causal.spatial_plus_effects(d, self.basis, z, **self.sp_kw)
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


def run_setting(programs: _Programs, config, name: str, overrides: dict, seeds) -> dict:
  """Every method on one setting, all seeds; JSON-ready per-seed metrics and seed-0 maps."""
  start = time.time()
  gcfg = grid_config(config, overrides)
  base_keys = jax.vmap(jax.random.key)(jnp.asarray(seeds))
  k_data, k_mlp, k_cvae = (jax.vmap(lambda k, i=i: jax.random.fold_in(k, i))(base_keys)
                           for i in range(3))
  data = programs.simulate(k_data, causal.grid_factors(gcfg), gcfg)
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
              sd_y=float(np.std(y[:, np.asarray(data.interior[0])])),
              seconds=time.time() - start)


def _pm(s: dict, digits: int = 3) -> str:
  if s["mean"] is None:
    return "n/a"
  return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f}"


def _measure(per_setting: dict, config) -> dict:
  """Per-seed values for each declared criterion (absent when its setting was not run)."""
  measured = {}
  variant = config.criteria_variant
  main = per_setting.get(config.criteria_setting)

  def err(result, method, which):
    return np.asarray(result["methods"][method][which], np.float64)

  if main is not None and variant in main["methods"]:
    measured["direct_vs_naive"] = (err(main, variant, "tau_err"), err(main, "naive", "tau_err"))
    measured["direct_vs_spatial_plus"] = (err(main, variant, "tau_err"),
                                          err(main, "spatial_plus", "tau_err"))
    measured["spill_vs_spatial_plus"] = (err(main, variant, "delta_err"),
                                         err(main, "spatial_plus", "delta_err"))
  # The linear head with the substitute against the same OLS without it.
  ols_variant = config.criteria_ols_variant
  if main is not None and ols_variant in main["methods"]:
    measured["direct_vs_ols"] = (err(main, ols_variant, "tau_err"),
                                 err(main, "ols_interference", "tau_err"))
    measured["spill_vs_ols"] = (err(main, ols_variant, "delta_err"),
                                err(main, "ols_interference", "delta_err"))
  white = per_setting.get("white")
  if white is not None and variant in white["methods"]:
    measured["white_noise_no_gain"] = (err(white, "spatial_plus", "tau_err")
                                       - err(white, variant, "tau_err"))
  return {k: v for k, v in measured.items() if k in config.criteria}


def _diagnostics_text(diag: dict) -> str:
  """One setting's substitute diagnostics: R^2(U | Z), the overlap R^2(A | Z) vs R^2(A | U)."""
  cvae = {k: d for k, d in diag.items() if k.startswith("cvae_z")}
  u_r2 = ", ".join(f"{k} {_pm(d['u_r2'], 2)}" for k, d in cvae.items())
  a_r2 = ", ".join(f"{k} {_pm(d['a_r2'], 2)}" for k, d in cvae.items())
  text = f"Substitute quality R²(U | Z): {u_r2}. Overlap R²(A | Z): {a_r2}"
  if "data" in diag:
    text += f" vs R²(A | U) {_pm(diag['data']['a_r2_u'], 2)}"
  losses = "; ".join(f"{k} " + " / ".join(_pm(d[f"final_loss_{t}"], 3) for t in LOSS_TERMS)
                     for k, d in cvae.items() if all(f"final_loss_{t}" in d for t in LOSS_TERMS))
  return text + (f". Final CVAE loss total / BCE / KL: {losses}." if losses else ".")


def _plots(workdir: str, table: dict, names: list[str], methods: list[str]) -> list[str]:
  def draw(which, label):
    def fn(ax):
      width = 0.8 / len(methods)
      x = np.arange(len(names))
      for i, m in enumerate(methods):
        cells = [table[s][m][which] for s in names]
        means = [c["mean"] if c["mean"] is not None else np.nan for c in cells]
        stds = [c["std"] if c["std"] is not None else 0.0 for c in cells]
        ax.bar(x + i * width, means, width, yerr=stds, label=LABELS.get(m, m))
      ax.set_xticks(x + 0.4 - width / 2, names)
      ax.set_ylabel(label)
      ax.set_title(f"{label}, mean ± std over seeds")
      ax.legend(fontsize=5, ncol=2)
    return fn

  return [jaxlab.report.save_plot(workdir, "spatial_deconfounder_direct.png",
                                  draw("tau_err", "|τ̂ − τ| / sd(Y)")),
          jaxlab.report.save_plot(workdir, "spatial_deconfounder_spillover.png",
                                  draw("delta_err", "|δ̂ − δ| / sd(Y)"))]


def run(config, workdir: str) -> dict:
  """Runs every setting (resuming finished ones), writes results.json, returns the results."""
  os.makedirs(workdir, exist_ok=True)
  t0 = time.time()
  seeds = config_seeds(config)
  names_overrides = settings(config)
  variants = variant_names(config)
  for key in ("criteria_variant", "criteria_ols_variant"):
    if config[key] not in variants:
      raise ValueError(f"config.{key} {config[key]!r} is not run; variants: {variants}")
  if config.criteria_setting not in [n for n, _ in names_overrides]:
    raise ValueError(f"config.criteria_setting {config.criteria_setting!r} is not run; "
                     f"settings: {[n for n, _ in names_overrides]}")
  programs = _Programs(config)
  cache = jaxlab.train.ArmCache(workdir)
  shared = jaxlab.train.config_hash(config.seeds, config.grid, config.cvae, config.train,
                                    config.optimizer, config.heads, config.spatial_plus,
                                    config.mlp_head)
  per_setting = {}
  for name, overrides in names_overrides:
    per_setting[name] = cache.get_or_run(
        name, jaxlab.train.config_hash(shared, name, overrides),
        lambda n=name, o=overrides: run_setting(programs, config, n, o, seeds))

  methods = baseline_names(config) + variants
  names = [n for n, _ in names_overrides]
  table = {s: {m: {k: seed_summary(per_setting[s]["methods"][m][k], skip_missing=True)
                   for k in ("tau_err", "delta_err", "moran", "tau_hat", "delta_hat")}
               for m in methods} for s in names}
  diagnostics = {s: {v: {k: seed_summary(x, skip_missing=True) for k, x in d.items()}
                     for v, d in per_setting[s]["diagnostics"].items()} for s in names}
  row_verdict, criteria = jaxlab.report.judge_all(config.criteria, _measure(per_setting, config))
  plots = _plots(workdir, table, names, ["naive", "ols_interference", "spatial_plus", "oracle",
                                         config.criteria_ols_variant, config.criteria_variant])

  main, v = config.criteria_setting, config.criteria_variant

  def describe(setting, m):
    t = table[setting][m]
    return f"{LABELS.get(m, m)}: direct {_pm(t['tau_err'])}, spillover {_pm(t['delta_err'])}"

  lines = [f"Standardised absolute errors |τ̂ − τ| / sd(Y) and |δ̂ − δ| / sd(Y) (mean ± std over "
           f"{len(seeds)} paired seeds; Moran's I of the residuals in brackets; n/a: no "
           "spillover term):"]
  for s in names:
    cells = "; ".join(f"{LABELS.get(m, m)} {_pm(table[s][m]['tau_err'])} / "
                      f"{_pm(table[s][m]['delta_err'])} [{_pm(table[s][m]['moran'], 2)}]"
                      for m in methods)
    lines.append(f"{s}: {cells}. {_diagnostics_text(diagnostics[s])}")
  g = config.grid
  lines.append(
      f"Grid {g.height}x{g.width}, r={g.radius}, τ={g.tau}, δ={g.delta}; U a GMRF with precision "
      "(L + eps I) standardised per draw, or white noise; CVAE trained "
      f"{config.train.num_steps} steps x {config.train.batch_size} sites, β_max="
      f"{config.cvae.beta_max}, prior τ={config.cvae.prior_tau}. jaxlab interpretations: no "
      "BatchNorm in the encoder, fixed β_max and penalties (no tuning), no early stopping or "
      "spatial-block validation, a 10x10 cubic B-spline basis for Spatial+ (code: thin-plate, "
      "k=100) with Abar_N residualised like A, an MLP head in place of the U-Net.")
  report = jaxlab.report.ReportRow(
      method="Spatial Deconfounder (CVAE substitute confounder)", paper_claim=PAPER_CLAIM,
      baseline=f"{main}: " + "; ".join(describe(main, m) for m in
                                       ("naive", "ols_interference", "spatial_plus", "oracle")),
      ours=f"{main}: {describe(main, v)}; {describe(main, config.criteria_ols_variant)}",
      verdict=row_verdict, details=" ".join(lines),
      plots=tuple(plots), criteria=criteria)
  results = dict(
      experiment="spatial_deconfounder", preset=config.preset, seeds=seeds, settings=names,
      methods=methods, table=table, diagnostics=diagnostics,
      maps={s: per_setting[s]["maps"] for s in names},
      sd_y={s: per_setting[s]["sd_y"] for s in names},
      setting_seconds={s: per_setting[s]["seconds"] for s in names},
      seconds=time.time() - t0, config=json.loads(config.to_json_best_effort()),
      report=dataclasses.asdict(report))
  jaxlab.report.write_results(workdir, results)
  return results
