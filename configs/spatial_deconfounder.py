"""Spatial Deconfounder: CVAE substitute confounder with interference-aware outcome heads.

Command:
  python -m launch.main --config=configs/spatial_deconfounder.py:quick \
      --workdir=runs/spatial_deconfounder

Presets:
  smoke  a 16 x 16 grid, 3 seeds, one smoothness + the white-noise control, z_dim 4, the
         linear and Spatial+ heads, 40 CVAE steps (pipeline check).
  quick  a 48 x 48 grid, 10 paired seeds, U smoothness eps in {0.01, 0.1, 1} plus the
         white-noise negative control, CVAE z_dim in {1, 4}, heads linear / Spatial+ /
         MLP; the CVAE trains vmapped over the 10 seeds (one compile per z_dim).
  full   the same with z_dim in {1, 4, 8} and the code's 64 first-layer channels.

Data (jaxlab.causal.GridConfig): U a GMRF with precision (L + eps I) (smaller eps =
smoother) or white noise; A ~ Bern(sigmoid(-0.3 + 0.8 X_2 + 1.5 U + 0.5 eta)); Y = tau A +
delta Abar_N + 2 U + X beta + 0.5 sin(X_3) + R with tau = 1, delta = 0.5 (jaxlab
interpretation of the paper's SpaCE-style setting).

Expected result: |tau_hat - tau| / sd(Y) and |delta_hat - delta| / sd(Y), mean +- std over
the seeds, for every method and setting; the criteria below (declared before any run) are
judged on paired seeds at the medium smoothness, whatever the outcome. Diagnostics: how
much of U the substitute Z explains, R^2(U | Z), and the overlap check R^2(A | Z) next to
R^2(A | U): a Z that predicts the treatment far better than the confounder does leaves the
outcome model little treatment variation to estimate from.
"""

import ml_collections

import jaxlab.presets


def get_config(arg=None):
  preset = jaxlab.presets.parse_preset(arg)
  config = ml_collections.ConfigDict()
  config.experiment = "spatial_deconfounder"
  config.preset = preset
  config.seeds = tuple(range(10))

  # The data-generating process (jaxlab.causal.GridConfig); u_epsilon is set per setting.
  config.grid = ml_collections.ConfigDict(dict(
      height=48, width=48, radius=1,
      u_order=1,            # jaxlab interpretation: precision (L + eps I)^order, order 1
      u_connectivity=4, x1_u=0.5, a_intercept=-0.3, a_x2=0.8, a_u=1.5, a_noise=0.5,
      tau=1.0, delta=0.5, y_u=2.0,
      beta=(0.5, -0.5, 0.3),  # jaxlab interpretation: the paper leaves X's weights open
      y_sin=0.5, noise_scale=0.5,
      noise_epsilon=1.0))   # jaxlab interpretation: the outcome noise GMRF's ridge
  # The sweep of U's smoothness (GMRF eps; smaller = smoother) and the white-noise control.
  config.smoothness = (0.01, 0.1, 1.0)
  config.negative_control = True

  # Stage 1: the CVAE (jaxlab.causal.CVAEConfig); one variant per z_dim.
  config.cvae = ml_collections.ConfigDict(dict(
      z_dims=(1, 4),
      hidden=32,                # jaxlab interpretation: the code's conv1 has 64 (full preset)
      prior_tau=10.0, prior_epsilon=1e-5, prior_connectivity=8,
      beta_max=0.1,             # jaxlab interpretation: the code tunes it in [1e-8, 1]
      beta_warmup_steps=45))    # 5 of the 50 "epochs" (9 steps of 256 sites each)
  config.train = ml_collections.ConfigDict(dict(
      num_steps=450,            # jaxlab interpretation: 50 epochs, no early stopping
      batch_size=256))
  # The CVAE's optimizer (the authors' code: global-norm clip 1, AdamW with weight decay
  # tuned in [1e-4, 1e-3], cosine); optimizer.mlp_head the MLP head's (Adam, constant).
  config.optimizer = ml_collections.ConfigDict(dict(
      name="adamw", learning_rate=1e-3, schedule="warmup_cosine", warmup_steps=0,
      end_frac=0.0, weight_decay=1e-4, grad_clip=1.0,
      mlp_head=dict(learning_rate=1e-2, schedule="constant", weight_decay=0.0,
                    grad_clip=None)))

  # Stage 2: the outcome heads fed with the substitute confounder.
  config.heads = "linear,spatial_plus,mlp"
  config.spatial_plus = ml_collections.ConfigDict(dict(
      num_basis=10,             # jaxlab interpretation: 10 x 10 cubic B-splines (code: TPS k=100)
      lam_treatment=1e-4, lam_outcome=1e-4))  # jaxlab interpretation: fixed, not tuned
  config.mlp_head = ml_collections.ConfigDict(dict(hidden=32, depth=2, num_steps=300))

  # Declared before the run; judged on paired seeds by jaxlab.report.judge_all. The setting
  # is U with eps = 0.1 (correlation range ~ 3 sites): rougher than the 10 x 10 spline basis
  # (knots ~ 7 sites apart) yet smooth over the 3 x 3 patch, where the CVAE should help
  # most. The mechanism criteria add the substitute confounder (z_dim 4) to an
  # outcome model and compare with the same model without it: Spatial+ (the leaderboard's
  # head; variant `criteria_variant`) and the interference-aware OLS(A, Abar_N, X) (the
  # linear head; `criteria_ols_variant`). Naive OLS(A, X) is beaten by Spatial+ alone, so
  # the comparison with it cannot show the CVAE at work: reported, never deciding.
  # Thresholds 0: the paper claims the CVAE "consistently improves effect estimation"
  # (abstract) without a size.
  config.criteria_setting = "eps=0.1"
  config.criteria_variant = "cvae_z4_spatial_plus"
  config.criteria_ols_variant = "cvae_z4_linear"
  config.criteria = ml_collections.ConfigDict(dict(
      direct_vs_naive=dict(
          claim="the CVAE substitute moves the direct-effect estimate toward the truth "
                "compared with the naive fit",
          metric="|tau_hat - tau| / sd(Y), CVAE-Spatial+ (z=4) minus naive OLS(A, X), eps=0.1",
          direction="lower", threshold=0.0, unit="sd(Y)", primary=False),
      direct_vs_spatial_plus=dict(
          mechanism=True,  # Spatial+ is the same estimator without the CVAE substitute confounder
          claim="the CVAE substitute reduces the direct-effect error of Spatial+ when U is "
                "rougher than the spline basis yet smooth over the patch",
          metric="|tau_hat - tau| / sd(Y), CVAE-Spatial+ (z=4) minus Spatial+, eps=0.1",
          direction="lower", threshold=0.0, unit="sd(Y)"),
      spill_vs_spatial_plus=dict(
          mechanism=True,  # Spatial+ is the same estimator without the CVAE substitute confounder
          claim="the CVAE substitute reduces the spillover-effect error of Spatial+",
          metric="|delta_hat - delta| / sd(Y), CVAE-Spatial+ (z=4) minus Spatial+, eps=0.1",
          direction="lower", threshold=0.0, unit="sd(Y)"),
      direct_vs_ols=dict(
          mechanism=True,  # OLS(A, Abar_N, X) is the linear head without the substitute
          claim="the CVAE substitute reduces the direct-effect error of the interference-"
                "aware OLS(A, Abar_N, X)",
          metric="|tau_hat - tau| / sd(Y), OLS(A, Abar_N, X, Z) (z=4) minus OLS(A, Abar_N, X), "
                 "eps=0.1",
          direction="lower", threshold=0.0, unit="sd(Y)"),
      spill_vs_ols=dict(
          mechanism=True,  # OLS(A, Abar_N, X) is the linear head without the substitute
          claim="the CVAE substitute reduces the spillover error of the interference-aware "
                "OLS(A, Abar_N, X)",
          metric="|delta_hat - delta| / sd(Y), OLS(A, Abar_N, X, Z) (z=4) minus "
                 "OLS(A, Abar_N, X), eps=0.1",
          direction="lower", threshold=0.0, unit="sd(Y)"),
      white_noise_no_gain=dict(
          claim="negative control: with white-noise U the neighbours carry no information "
                "on U_s, so the CVAE gains less than 0.02 sd(Y) over Spatial+",
          metric="direct error of Spatial+ minus that of CVAE-Spatial+ (z=4), white U",
          direction="lower", threshold=-0.02, unit="sd(Y)", primary=False)))

  if preset == "smoke":
    config.seeds = (0, 1, 2)
    config.grid.update(height=16, width=16)
    config.heads = "linear,spatial_plus"     # the MLP head is unit-tested in tests/jaxlab/causal
    config.smoothness = (0.1,)
    config.cvae.update(z_dims=(4,), hidden=16, beta_warmup_steps=5)
    config.train.update(num_steps=40, batch_size=64)
    config.spatial_plus.num_basis = 5
    config.mlp_head.update(hidden=16, num_steps=40)
  elif preset == "full":
    config.cvae.update(z_dims=(1, 4, 8), hidden=64)
  return config
