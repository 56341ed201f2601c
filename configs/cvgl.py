"""CVGL-NIG: NIG evidential uncertainty + u-adaptive Soft InfoNCE on a synthetic two-view world.

Command:
  python -m launch.main --config=configs/cvgl.py:quick --workdir=runs/cvgl

Presets:
  smoke  a 12 x 12 world, batches of 16 pairs, 20 steps, 3 seeds, every arm, the
         alternative reading and a one-factor length-scale sweep (pipeline check).
  quick  a 32 x 32 world (train on city 1's x < 24, test on its x >= 24 and on the same area
         of cities 2-3), batches of 128 pairs (32 GPS tiles of 2 x 2), 400 AdamW steps,
         5 seeds vmapped, five arms, the alternative reading of `cvgl.uncertainty` and a
         length-scale sweep (x0.5, x2) of InfoNCE vs the full method (<= 3 min on 2 idle
         cores).
  full   batches of 256 pairs, 1500 steps, 5 seeds, sweep x0.5 / x2 / x4.

Arms (`config.arms`, see `jaxlab.retrieval.training`): "infonce" (Sample4Geo, label
smoothing 0.1), "soft_u" (the full method: u-adaptive Soft InfoNCE + DER), "soft_mean" (the
full method with every row of a batch given the batch mean of eps_max * u~_i: same DER
head and loss, same hard negatives, same softening mass per batch, no per-example
adaptivity: the mechanism ablation), "der_only" (InfoNCE + DER), "fixed_soft" (Soft InfoNCE
with a constant eps, no DER). The DER target y, the u -> eps mapping, which NIG uncertainty
is u, the head's layout and the world are jaxlab interpretations; every one is a knob under
`config.cvgl`, `config.model` or `config.world`. `cvgl.uncertainty_readings` re-runs
soft_u and soft_mean at each listed reading of `cvgl.uncertainty` and judges the row there.

Criteria (declared before the run; the abstract is the only source of sizes):
* adaptive_over_pooled (primary, mechanism): soft_u / soft_mean cross-city R@1 > 1. The
  abstract says u "adaptively softens labels for hard negatives" but gives no size for
  that ablation, so the threshold is "better at all".
* cross_city_r1 (primary): soft_u / infonce cross-city R@1 >= 1.09, half the abstract's
  "average 18% R@1 improvement in zero-shot cross-dataset transfer" (its baseline is the
  prior SOTA on real benchmarks, ours Sample4Geo's loss on a synthetic world; half keeps
  the claim's order of magnitude without assuming its exact size transfers).
* same_area_r1 (primary): soft_u / infonce same-area R@1 >= 0.95 (the abstract claims
  state-of-the-art on the standard benchmarks: no loss in-domain; 5% relative is the
  non-inferiority margin, under a third of the cross-city claim).
* u_tracks_roughness (primary): Spearman(u, local field roughness) of the full method's u
  on city 1's held-out area > 0. The abstract says the NIG head "quantif[ies]
  environmental complexity u"; it states no correlation, so the threshold is a positive
  rank correlation at all (0 is what a u unrelated to complexity gets).
* Floors: an R@1 comparison counts only if its baseline arm's R@1 is >= 2x a random
  ranker's 1/N (N = the test gallery size; ties count against the query, so a collapsed
  model sits at 0, below chance); otherwise `no signal`.
* Not primary: u_tracking_from_der (soft_u's rho minus the rho of InfoNCE's untrained NIG
  head: is it the DER fit that makes u track?), soft_over_der_only, adaptive_over_fixed
  (constant eps_fixed without DER), gain_grows_with_density (the length-scale sweep).
"""

import ml_collections

import jaxlab.presets


def get_config(arg=None):
  preset = jaxlab.presets.parse_preset(arg)
  config = ml_collections.ConfigDict()
  config.experiment = "cvgl"
  config.preset = preset
  config.seeds = (0, 1, 2, 3, 4)
  config.arms = "infonce,soft_mean,soft_u,der_only,fixed_soft"

  # The synthetic world (jaxlab construction; `jaxlab.retrieval.world.WorldConfig`).
  config.world = ml_collections.ConfigDict(dict(
      grid=32, latent_dim=8, obs_dim=8, num_features=64, street_tokens=8, street_radius=1.0,
      sat_spacing=1.0, rough_ratio=0.3, rough_amp=1.0, mask_length=8.0, mask_gain=3.0,
      train_frac=0.75, map_seed=1234))
  # City 1 trains (and is tested on its held-out area); the others are zero-shot. Each
  # city's field is also drawn per experiment seed.
  config.cities = ml_collections.ConfigDict(dict(
      city1=dict(seed=1, length_scale=4.0, noise=0.1, map_shift=0.0),
      city2=dict(seed=2, length_scale=3.0, noise=0.15, map_shift=0.3),
      city3=dict(seed=3, length_scale=6.0, noise=0.2, map_shift=0.5)))
  config.model = ml_collections.ConfigDict(dict(
      hidden=32, embed_dim=64, head_hidden=32,
      head_stop_gradient=False))  # True: L_DER does not reach the backbone (a jaxlab ablation)
  # batch_size pairs = (batch_size / block^2) GPS tiles of block x block (jaxlab
  # interpretation of Sample4Geo's GPS-neighbour sampling; block=1: random batches).
  config.train = ml_collections.ConfigDict(dict(
      num_steps=400, batch_size=128, block=2, num_logs=10))
  # AdamW with global-norm clipping (Sample4Geo's optimizer).
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=1e-3, schedule="warmup_cosine", warmup_frac=0.05, weight_decay=1e-4,
      grad_clip=1.0))
  # The method's knobs. jaxlab interpretations (the paper's code was unavailable):
  #   target: the DER regression target y ("positive_similarity": stop-grad s_ii;
  #     "margin": s_ii minus the hardest negative's similarity);
  #   uncertainty: which NIG uncertainty is u, sets eps and is correlated with roughness
  #     ("epistemic", "aleatoric", "total"); uncertainty_readings: the readings the row is
  #     also judged at (soft_u and soft_mean re-run at each);
  #   eps_i = eps_max * u_i / (u_i + median_batch u) on the num_hard most similar
  #     negatives, weighted by softmax(s_ij / hard_temperature); eps_fixed for "fixed_soft".
  config.cvgl = ml_collections.ConfigDict(dict(
      label_smoothing=0.1, eps_fixed=0.15, eps_max=0.3, der_weight=0.1, der_reg=1e-2,
      num_hard=4, hard_temperature=0.1, target="positive_similarity",
      uncertainty="epistemic", uncertainty_readings="epistemic,aleatoric"))
  # Semi-positive density sweep: every city's length-scale times each factor (1.0 is the
  # main run), for these arms.
  config.sweep = ml_collections.ConfigDict(dict(
      length_scale_factors=(0.5, 2.0), arms="infonce,soft_u"))

  # Declared before the run; judged on paired seeds by jaxlab.report.judge_all (sizes and
  # their sources in the module docstring). R@1 criteria are ratios with a chance floor.
  chance_floor = dict(floor="chance", floor_margin=2.0)
  config.criteria = ml_collections.ConfigDict(dict(
      adaptive_over_pooled=dict(
          claim="u adaptively softens the labels of hard negatives: per-example u-adaptive "
                "softening beats softening of the same mean strength (abstract; no size given)",
          metric="cross-city R@1 (mean over the zero-shot cities), soft_u / soft_mean (same "
                 "DER head, loss and hard negatives; every row gets the batch mean of "
                 "eps_max u~_i)",
          direction="higher", threshold=1.0, kind="ratio", unit="R@1", mechanism=True,
          **chance_floor),
      cross_city_r1=dict(
          claim="u-adaptive Soft InfoNCE raises zero-shot cross-dataset R@1 (abstract: +18% "
                "on average; threshold half of it, x1.09)",
          metric="cross-city R@1 (mean over the zero-shot cities), soft_u / infonce",
          direction="higher", threshold=1.09, kind="ratio", unit="R@1", **chance_floor),
      same_area_r1=dict(
          claim="state-of-the-art on the standard benchmarks: same-area R@1 is not lost "
                "(non-inferiority, 5% relative margin)",
          metric="same-area R@1 (city 1's held-out area), soft_u / infonce",
          direction="higher", threshold=0.95, kind="ratio", unit="R@1", **chance_floor),
      u_tracks_roughness=dict(
          claim="the NIG head quantifies environmental complexity u (abstract; no size given: "
                "a positive rank correlation)",
          metric="Spearman(u, local field roughness) on city 1's held-out area, soft_u, vs 0",
          direction="higher", threshold=0.0, unit="Spearman rho"),
      u_tracking_from_der=dict(
          claim="it is the DER fit that makes u track complexity",
          metric="Spearman(u, roughness) on city 1's held-out area, soft_u minus infonce "
                 "(whose NIG head is never trained)",
          direction="higher", threshold=0.0, unit="Spearman rho", primary=False),
      soft_over_der_only=dict(
          claim="the gain comes from the soft labels, not from the DER head alone",
          metric="cross-city R@1, soft_u / der_only",
          direction="higher", threshold=1.0, kind="ratio", unit="R@1", primary=False,
          **chance_floor),
      adaptive_over_fixed=dict(
          claim="softening by uncertainty beats a constant softening without the DER head",
          metric="cross-city R@1, soft_u / fixed_soft (eps = cvgl.eps_fixed)",
          direction="higher", threshold=1.0, kind="ratio", unit="R@1", primary=False,
          **chance_floor),
      gain_grows_with_density=dict(
          claim="the gain over InfoNCE is largest where semi-positives are dense",
          metric="cross-city R@1 gain (soft_u - infonce) at the sweep's densest length-scale "
                 "minus at its sparsest",
          direction="higher", threshold=0.0, unit="R@1", primary=False)))

  if preset == "smoke":
    config.seeds = (0, 1, 2)
    config.world.update(grid=12, num_features=16)
    config.model.update(hidden=16, embed_dim=16, head_hidden=16)
    config.train.update(num_steps=20, batch_size=16, num_logs=2)
    config.cvgl.num_hard = 2
    config.sweep.length_scale_factors = (2.0,)
  elif preset == "full":
    config.train.update(num_steps=1500, batch_size=256)
    config.sweep.length_scale_factors = (0.5, 2.0, 4.0)
  return config
