"""The `spatial_deconfounder` experiment: smoke run + resume, learning rates, failing criteria."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import spatial_deconfounder as sd_config
from jaxlab import causal
from jaxlab.causal import evaluation
from jaxlab.experiments import spatial_deconfounder as sd
from jaxlab.report import VERDICTS, judge_all, read_results
from jaxlab.train import make_schedule, optimizer
from jaxlab.train.optimizers import resolve


def test_smoke_run_writes_table_and_resumes(tmp_path):
  config = sd_config.get_config("smoke")
  assert config.experiment == "spatial_deconfounder" and len(config.seeds) >= 3
  results = sd.run(config, str(tmp_path))
  on_disk = read_results(str(tmp_path))
  report = on_disk["report"]
  assert report["verdict"] in VERDICTS and report["verdict"] == results["report"]["verdict"]
  assert {c["name"] for c in report["criteria"]} == set(config.criteria)
  assert all(c["n"] == len(config.seeds) for c in report["criteria"])
  names = [n for n, _ in sd.settings(config)]
  assert on_disk["settings"] == names and "white" in names
  methods = sd.baseline_names(config) + sd.variant_names(config)
  for s in names:
    assert set(on_disk["table"][s]) == set(methods)
    for m in methods:
      cell = on_disk["table"][s][m]["tau_err"]
      assert len(cell["per_seed"]) == len(config.seeds) and cell["mean"] >= 0
    # The naive fit has no spillover term: reported as missing, never as a number.
    assert on_disk["table"][s]["naive"]["delta_err"]["mean"] is None
    maps = on_disk["maps"][s]
    h, w = config.grid.height, config.grid.width
    assert np.shape(maps["u"]) == (h, w)
    assert np.shape(maps["latent"]["cvae_z4"]) == (h, w)
    assert np.shape(maps["residuals"][config.criteria_variant]) == (h, w)
  # Diagnostics per seed: the CVAE's last loss terms one list each (total = BCE + beta KL,
  # beta = beta_max after the warm-up), R^2(A | Z) and its overlap reference R^2(A | U).
  n = len(config.seeds)
  for s in names:
    diag = on_disk["diagnostics"][s]
    z4 = diag["cvae_z4"]
    assert "final_loss" not in z4
    total, bce, kl = (np.array(z4[f"final_loss_{t}"]["per_seed"]) for t in ("total", "bce", "kl"))
    assert total.shape == bce.shape == kl.shape == (n,)
    np.testing.assert_allclose(total, bce + config.cvae.beta_max * kl, rtol=1e-5, atol=1e-5)
    assert len(z4["a_r2"]["per_seed"]) == n
    a_r2_u = np.array(diag["data"]["a_r2_u"]["per_seed"])
    assert a_r2_u.shape == (n,) and np.all((a_r2_u >= 0) & (a_r2_u <= 1))
    detail = report["details"]
    assert "R²(A | Z): cvae_z4" in detail and "vs R²(A | U)" in detail
  # The oracle adjusts for U itself: far closer to the truth than the naive fit.
  main = on_disk["table"][config.criteria_setting]
  assert main["oracle"]["tau_err"]["mean"] < main["naive"]["tau_err"]["mean"]
  # A second run loads every setting from the arm cache and reports the same table.
  again = sd.run(config, str(tmp_path))
  assert again["table"] == read_results(str(tmp_path))["table"] == on_disk["table"]


def test_spatial_deconfounder_uses_optimizer_learning_rate(monkeypatch):
  # Both stages build their optimizer with `jaxlab.train.optimizer` (its keys are tested
  # in tests/jaxlab/train/test_optimizers.py): the CVAE from the top level, the MLP head
  # from the "mlp_head" section.
  config = sd_config.get_config("smoke")
  config.optimizer.learning_rate = 0.25           # stage 1: the CVAE (warmup-cosine)
  config.optimizer.mlp_head.learning_rate = 0.5   # stage 2: the MLP head
  seen = {}
  real = evaluation.optimizer

  def spy(opt, num_steps, *, stage=None, **kw):
    seen[stage] = (resolve(opt, stage)["learning_rate"], num_steps)
    return real(opt, num_steps, stage=stage, **kw)

  monkeypatch.setattr(evaluation, "optimizer", spy)
  sd.make_cvae_trainer(config, 4)
  sd.make_mlp_head(config)
  assert seen == {None: (0.25, config.train.num_steps),
                  "mlp_head": (0.5, config.mlp_head.num_steps)}


def _trajectory(tx, steps: int = 8):
  params = {"w": jnp.asarray([0.5, -1.0, 2.0]), "b": jnp.asarray(0.3)}
  state, out = tx.init(params), []
  for i in range(steps):
    grads = jax.tree.map(lambda p, i=i: jnp.sin(p + 0.3 * i) * 3.0, params)
    updates, state = tx.update(grads, state, params)
    params = optax.apply_updates(params, updates)
    out.append(np.concatenate([np.ravel(v) for v in jax.tree.leaves(params)]))
  return np.stack(out)


def test_the_config_builds_the_optimizers_it_always_did():
  # The CVAE: global-norm clip 1 then AdamW (weight decay 1e-4) on the cosine schedule;
  # the MLP head: plain Adam at a constant 1e-2.
  config = sd_config.get_config("quick")
  n = config.train.num_steps
  old_cvae = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(
      make_schedule(config.optimizer, n), weight_decay=1e-4))
  np.testing.assert_array_equal(_trajectory(optimizer(config.optimizer, n)),
                                _trajectory(old_cvae))
  mlp = optimizer(config.optimizer, config.mlp_head.num_steps, stage="mlp_head")
  np.testing.assert_array_equal(_trajectory(mlp), _trajectory(optax.adam(1e-2)))


def test_bad_config_is_refused(tmp_path):
  config = sd_config.get_config("smoke")
  config.criteria_variant = "cvae_z8_spatial_plus"      # z_dim 8 is not run in smoke
  with pytest.raises(ValueError, match="criteria_variant"):
    sd.run(config, str(tmp_path))
  config = sd_config.get_config("smoke")
  config.criteria_ols_variant = "cvae_z4_mlp"           # the MLP head is not run in smoke
  with pytest.raises(ValueError, match="criteria_ols_variant"):
    sd.run(config, str(tmp_path))
  config = sd_config.get_config("smoke")
  config.heads = "linear,unet"
  with pytest.raises(ValueError, match="unknown heads"):
    sd.variant_names(config)


def test_latent_map_is_the_centre_pixel_first_channel():
  # The saved "substitute Z" map: with z_dim > 1 the old index (radius (2r+1) + r) read the
  # first channel of the patch's top-centre pixel instead of the site's own.
  radius, z_dim = 1, 4
  model, _ = causal.make_cvae_trainer(causal.CVAEConfig(z_dim=z_dim, hidden=4), optax.adam(1e-3))
  a = jnp.asarray(np.arange(25).reshape(5, 5) % 3 == 0, jnp.float32)
  x = jnp.sin(jnp.arange(75.0)).reshape(5, 5, 3)

  rng = np.random.default_rng(0)
  # The encoder's two 3x3 convolutions ([A, X] -> hidden -> 2 z_dim), random weights.
  params = {"conv1": dict(kernel=rng.standard_normal((3, 3, 4, 4)), bias=rng.standard_normal(4)),
            "conv2": dict(kernel=rng.standard_normal((3, 3, 4, 2 * z_dim)),
                          bias=rng.standard_normal(2 * z_dim))}
  params = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), params)

  @jax.jit
  def latents(a, x):
    pad = lambda f: jnp.pad(f, [(1, 1), (1, 1)] + [(0, 0)] * (f.ndim - 2))
    # Each site's own patch, cut by hand: [25, 3, 3, ...].
    patches = lambda f: jnp.stack([pad(f)[i:i + 3, j:j + 3] for i in range(5) for j in range(5)])
    mean, _ = model.apply({"params": params}, patches(a), patches(x),
                          method=causal.SpatialCVAE.encode)
    return causal.latent_means(model, params, a, x, radius), mean[:, radius, radius, 0]

  z, want = latents(a, x)
  want = np.asarray(want).reshape(5, 5)
  np.testing.assert_allclose(np.asarray(sd.centre_latent(z, radius, z_dim)), want, rtol=1e-6)
  assert not np.allclose(np.asarray(z[..., radius * (2 * radius + 1) + radius]), want)


def _measured(cvae_minus_rest: float, noise: float, seeds: int = 10,
              cvae_minus_naive: float | None = None) -> dict:
  """Per-seed errors with the CVAE variant's error above (or below) the baselines'."""
  rng = np.random.default_rng(0)
  base = np.full(seeds, 0.4)
  def jitter():  # zero-mean noise: the paired effect is exactly `cvae_minus_rest`
    e = noise * rng.standard_normal(seeds)
    return e - e.mean()
  vs_naive = cvae_minus_rest if cvae_minus_naive is None else cvae_minus_naive
  return {
      "direct_vs_naive": (base + vs_naive + jitter(), base + jitter()),
      "direct_vs_spatial_plus": (base + cvae_minus_rest + jitter(), base + jitter()),
      "spill_vs_spatial_plus": (base + cvae_minus_rest + jitter(), base + jitter()),
      "direct_vs_ols": (base + cvae_minus_rest + jitter(), base + jitter()),
      "spill_vs_ols": (base + cvae_minus_rest + jitter(), base + jitter()),
      # Spatial+ error minus the CVAE's on white-noise U: the CVAE "gains" -cvae_minus_rest.
      "white_noise_no_gain": -cvae_minus_rest + jitter(),
  }


MECHANISM = ("direct_vs_spatial_plus", "spill_vs_spatial_plus", "direct_vs_ols", "spill_vs_ols")


def test_criteria_fail_when_the_cvae_loses_and_are_inconclusive_in_noise():
  config = sd_config.get_config("quick")
  row, results = judge_all(config.criteria, _measured(0.2, noise=0.005))
  assert row == "did not hold"
  verdicts = {r.name: r.verdict for r in results}
  assert all(verdicts[n] == "did not hold" for n in ("direct_vs_naive",) + MECHANISM), verdicts
  assert verdicts["white_noise_no_gain"] == "held"        # losing is not a spurious gain
  row, results = judge_all(config.criteria, _measured(0.0, noise=0.3))
  assert row == "inconclusive"
  row, results = judge_all(config.criteria, _measured(-0.2, noise=0.005))
  assert row == "held"
  # A CVAE that "gains" 0.2 sd(Y) with white-noise U fails the negative control.
  assert {r.name: r.verdict for r in results}["white_noise_no_gain"] == "did not hold"


def test_only_the_substitute_against_its_own_ablation_decides_the_row():
  # Naive OLS(A, X) is beaten by Spatial+ alone: beating it says nothing of the CVAE. The
  # primaries are the four ablations (the outcome model with and without Z), all mechanism.
  config = sd_config.get_config("quick")
  primary = {n for n, c in config.criteria.items() if c.get("primary", True)}
  assert primary == set(MECHANISM)
  assert all(config.criteria[n].mechanism for n in MECHANISM)
  # A CVAE-Spatial+ far better than the naive fit but worse than Spatial+ and OLS: failed.
  row, results = judge_all(config.criteria, _measured(0.1, noise=0.005, cvae_minus_naive=-0.3))
  verdicts = {r.name: r.verdict for r in results}
  assert verdicts["direct_vs_naive"] == "held" and row == "did not hold", verdicts


def test_ols_criteria_read_the_linear_head_not_spatial_plus():
  config = sd_config.get_config("quick")
  errs = lambda t, d: dict(tau_err=[t] * 3, delta_err=[d] * 3)
  per_setting = {config.criteria_setting: dict(methods={
      "naive": errs(0.5, None), "ols_interference": errs(0.3, 0.3),
      "spatial_plus": errs(0.2, 0.2), config.criteria_variant: errs(0.1, 0.1),
      config.criteria_ols_variant: errs(0.4, 0.35)})}
  measured = sd._measure(per_setting, config)
  np.testing.assert_allclose(measured["direct_vs_ols"][0], 0.4)
  np.testing.assert_allclose(measured["spill_vs_ols"], [[0.35] * 3, [0.3] * 3])
  np.testing.assert_allclose(measured["direct_vs_spatial_plus"], [[0.1] * 3, [0.2] * 3])


def test_diagnostics_text_reports_overlap_and_split_losses():
  s = lambda v: dict(mean=v, std=0.01)
  diag = {"data": {"a_r2_u": s(0.41)},
          "cvae_z4": {"u_r2": s(0.5), "a_r2": s(0.947), "final_loss_total": s(0.6),
                      "final_loss_bce": s(0.5), "final_loss_kl": s(1.0)}}
  text = sd._diagnostics_text(diag)
  assert "R²(A | Z): cvae_z4 0.95 ± 0.01 vs R²(A | U) 0.41 ± 0.01" in text
  assert "total / BCE / KL: cvae_z4 0.600 ± 0.010 / 0.500 ± 0.010 / 1.000 ± 0.010" in text
