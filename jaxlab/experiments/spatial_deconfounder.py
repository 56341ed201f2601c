"""Spatial Deconfounder reproduction: does a CVAE substitute confounder de-bias spatial effects?

For each setting (U's smoothness eps, and the white-noise control) `run_setting`
(`jaxlab.causal.evaluation`) draws one grid per seed, fits the baselines (naive OLS(A, X),
OLS(A, Abar_N, X), Spatial+, an MLP without latents, the oracle OLS with U), trains the
CVAE of every z_dim vmapped over the seeds (one compiled program per z_dim, shared by the
settings) and fits the linear, Spatial+ and MLP heads on its latent means. Each setting is
one arm of a `jaxlab.study.Study`, so a killed run resumes; seeds are paired across methods
(same grid, same draws) and across settings (same keys).
"""

import json

import numpy as np

from jaxlab.causal.evaluation import (
    LOSS_TERMS,
    SettingPrograms,
    baseline_names,
    centre_latent,
    draw_errors,
    make_cvae_trainer,
    make_mlp_head,
    run_setting,
    settings,
    variant_names,
)
from jaxlab.report import seed_summary
from jaxlab.study import Study, mean_std

__all__ = ["baseline_names", "centre_latent", "make_cvae_trainer", "make_mlp_head", "run",
           "settings", "variant_names"]

PAPER_CLAIM = ("A CVAE with a spatial prior infers a substitute for a smooth unobserved "
               "confounder from neighbouring treatments; adjusting for it moves the direct and "
               "spillover estimates toward the truth, more so than Spatial+ and the naive fit")
LABELS = {"naive": "OLS(A, X)", "ols_interference": "OLS(A, Ā_N, X)", "spatial_plus": "Spatial+",
          "mlp": "MLP(A, Ā_N, X)", "oracle": "oracle OLS(A, Ā_N, X, U)"}


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
  u_r2 = ", ".join(f"{k} {mean_std(d['u_r2'], digits=2)}" for k, d in cvae.items())
  a_r2 = ", ".join(f"{k} {mean_std(d['a_r2'], digits=2)}" for k, d in cvae.items())
  text = f"Substitute quality R²(U | Z): {u_r2}. Overlap R²(A | Z): {a_r2}"
  if "data" in diag:
    text += f" vs R²(A | U) {mean_std(diag['data']['a_r2_u'], digits=2)}"
  losses = "; ".join(f"{k} " + " / ".join(mean_std(d[f"final_loss_{t}"]) for t in LOSS_TERMS)
                     for k, d in cvae.items() if all(f"final_loss_{t}" in d for t in LOSS_TERMS))
  return text + (f". Final CVAE loss total / BCE / KL: {losses}." if losses else ".")


def run(config, workdir: str) -> dict:
  """Runs every setting (resuming finished ones), writes results.json, returns the results."""
  names_overrides = settings(config)
  names = [n for n, _ in names_overrides]
  variants = variant_names(config)
  for key in ("criteria_variant", "criteria_ols_variant"):
    if config[key] not in variants:
      raise ValueError(f"config.{key} {config[key]!r} is not run; variants: {variants}")
  if config.criteria_setting not in names:
    raise ValueError(f"config.criteria_setting {config.criteria_setting!r} is not run; "
                     f"settings: {names}")
  study = Study(config, workdir, key=(config.seeds, config.grid, config.cvae, config.train,
                                      config.optimizer, config.heads, config.spatial_plus,
                                      config.mlp_head))
  programs = SettingPrograms(config)
  per_setting = study.arms({
      n: lambda o=o: run_setting(programs, config, o, study.seeds) for n, o in names_overrides})

  methods = baseline_names(config) + variants
  table = {s: {m: {k: seed_summary(per_setting[s]["methods"][m][k], skip_missing=True)
                   for k in ("tau_err", "delta_err", "moran", "tau_hat", "delta_hat")}
               for m in methods} for s in names}
  diagnostics = {s: {v: {k: seed_summary(x, skip_missing=True) for k, x in d.items()}
                     for v, d in per_setting[s]["diagnostics"].items()} for s in names}
  study.judge(_measure(per_setting, config))
  shown = ["naive", "ols_interference", "spatial_plus", "oracle", config.criteria_ols_variant,
           config.criteria_variant]
  study.plot("spatial_deconfounder_direct.png",
             draw_errors(table, names, shown, "tau_err", "|τ̂ − τ| / sd(Y)", LABELS))
  study.plot("spatial_deconfounder_spillover.png",
             draw_errors(table, names, shown, "delta_err", "|δ̂ − δ| / sd(Y)", LABELS))

  main, v = config.criteria_setting, config.criteria_variant

  def describe(setting, m):
    t = table[setting][m]
    return (f"{LABELS.get(m, m)}: direct {mean_std(t['tau_err'])}, "
            f"spillover {mean_std(t['delta_err'])}")

  lines = [f"Standardised absolute errors |τ̂ − τ| / sd(Y) and |δ̂ − δ| / sd(Y) (mean ± std over "
           f"{len(study.seeds)} paired seeds; Moran's I of the residuals in brackets; n/a: no "
           "spillover term):"]
  for s in names:
    cells = "; ".join(f"{LABELS.get(m, m)} {mean_std(table[s][m]['tau_err'])} / "
                      f"{mean_std(table[s][m]['delta_err'])} "
                      f"[{mean_std(table[s][m]['moran'], digits=2)}]" for m in methods)
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
  return study.finish(
      method="Spatial Deconfounder (CVAE substitute confounder)", paper_claim=PAPER_CLAIM,
      baseline=f"{main}: " + "; ".join(describe(main, m) for m in
                                       ("naive", "ols_interference", "spatial_plus", "oracle")),
      ours=f"{main}: {describe(main, v)}; {describe(main, config.criteria_ols_variant)}",
      details=" ".join(lines),
      results=dict(
          experiment="spatial_deconfounder", preset=config.preset, seeds=study.seeds,
          settings=names, methods=methods, table=table, diagnostics=diagnostics,
          maps={s: per_setting[s]["maps"] for s in names},
          sd_y={s: per_setting[s]["sd_y"] for s in names},
          config=json.loads(config.to_json_best_effort())))
