"""VT-PC: Voronoi-tessellation probabilistic circuits vs their base EinsumNet (`jaxlab.pc`).

Command:
  python -m launch.main --config=configs/pc.py:quick --workdir=runs/pc

Presets:
  smoke  one 2-D toy (moons), 300 points, a tiny circuit, 20 Adam steps, 3 seeds, 3
         bisection steps (pipeline check).
  quick  the 2-D toys (moons, circles, pinwheel, checkerboard, spirals) and the tabular
         wine (13-D) and breast cancer (30-D); 3000 points per toy, 400 steps, 3 seeds
         vmapped, 16 bisection steps.
  full   every data set (adds the swiss roll, S-curve and diabetes), 20k
         points per toy, 3000 steps, 3 seeds, 32 bisection steps with more boxes.

Models (`config.models`): "base" (EinsumNet, Gaussian leaves), "hfv" (1-D Voronoi-gated
leaves, exact), "vt" (VT root, anytime bounds). Every choice the paper leaves open is a
knob below marked "jaxlab interpretation".

Expected result: test log-likelihood per model x data set (VT as a certified bracket),
the anytime bound curve, the soft -> hard gate gap vs alpha; criteria judged on paired seeds.
Primary: the VT lower bound and the HFV circuit against the base (the mechanism, each
floored by a Gaussian fit), the 2-D brackets against an independent quadrature, and their
tightening over the anytime budget. That the gap widens with dimension is reported as a
fact, not judged: a fixed number of bisection steps halves each side of a box ever fewer
times as D grows, so in D >= 10 the boxes stay too wide to be certified outside a cell,
log Z+ keeps its value before refinement (0) and the widening follows from the budget.
"""

import ml_collections

import jaxlab.presets


def get_config(arg=None):
  preset = jaxlab.presets.parse_preset(arg)
  config = ml_collections.ConfigDict()
  config.experiment = "pc"
  config.preset = preset
  config.seeds = (0, 1, 2)
  config.datasets = "moons,circles,pinwheel,checkerboard,spirals,wine,breast_cancer"
  config.models = "base,hfv,vt"
  config.data = ml_collections.ConfigDict(dict(num_points=3000))
  # One circuit shape for every model: depth = min(max_depth, floor(log2 D)).
  config.circuit = ml_collections.ConfigDict(dict(
      max_depth=2, num_replicas=4, leaf_units=8, sum_units=8,
      num_channels=8,         # K: root channels = VT cells (jaxlab interpretation: 4-16)
      min_scale=0.05,         # jaxlab interpretation: smallest leaf std (standardised data)
      structure_seed=0))
  config.base = ml_collections.ConfigDict(dict(leaf_components=1))  # Gaussian leaves
  # jaxlab interpretation: HFV = VT gating at 1-D leaf scopes (interval cells, exact Z),
  # with cell boundaries frozen at their initialisation unless train_centroids.
  config.hfv = ml_collections.ConfigDict(dict(leaf_components=4, train_centroids=False))
  config.vt = ml_collections.ConfigDict(dict(
      alpha_start=1.0, alpha_end=50.0,   # the paper's linear annealing
      kmeans_iters=20,
      domain_halfwidth=6.0,   # jaxlab interpretation: Omega = [-h, h]^D for the box bounds
      bisection_steps=16,     # anytime refinement steps at test (the paper: none)
      capacity=192,           # jaxlab interpretation: mixed boxes refined per cell, D <= 3
      capacity_high_dim=32,   # ... and for D > low_dim_max (and the bound-gap-vs-dimension
                              # fact's budget on every set: the gaps compare at one capacity)
      low_dim_max=3,
      gap_alphas=(1.0, 2.0, 5.0, 10.0, 20.0, 50.0),
      quad_halfwidth=10.0,    # strip quadrature of the 2-D VT normaliser over |x_1| <= L
      quad_strips=4096))      # (bounds.strip_log_z_2d; its |x_1| > L tail is bounded)
  config.train = ml_collections.ConfigDict(dict(num_steps=400, batch_size=256))
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=0.01, schedule="constant", warmup_steps=0))  # the paper: Adam, lr 0.01
  config.plot_grid = 64  # density image resolution of the 2-D models (0: no plot)

  # Declared before the run; judged on paired seeds by jaxlab.report.judge_all. The LL
  # comparisons count only where the base circuit beats a full-covariance Gaussian fit (the
  # trivial density model) by 0.1 nats on the 2-D toys, whose shapes a Gaussian cannot fit.
  config.criteria = ml_collections.ConfigDict(dict(
      vt_lower_bound_beats_base_2d=dict(
          mechanism=True,  # the base circuit is the VT-PC without its tessellation
          claim="in low dimension the VT-PC's certified lower bound beats the base circuit "
                "(Table 1: gas 7.13 vs 5.85)",
          metric="mean over the 2-D toys of test LL, VT lower bound minus base",
          direction="higher", threshold=0.0, unit="nats",
          floor="Gaussian fit", floor_margin=0.1),
      hfv_matches_base_2d=dict(
          mechanism=True,  # the base circuit is the HFV-PC without its leaf-level cells
          claim="HFV-PCs match the base circuit (Table 1: within 0.06 nats)",
          metric="mean over the 2-D toys of test LL, HFV minus base",
          direction="higher", threshold=-0.02, unit="nats",
          floor="Gaussian fit", floor_margin=0.1),
      bounds_bracket_quadrature_2d=dict(
          claim="the VT bounds are certified: log f - log Z+ <= log p <= log f - log Z- "
                "(Lemma 3.6, Thm 3.9-3.10)",
          metric="worst violation (<= 0) over the 2-D toys and bisection steps of the "
                 "strip-quadrature log Z (bounds.strip_log_z_2d) outside [log Z-, log Z+]; "
                 "0 = bracketed",
          direction="higher", threshold=-1e-3,  # jaxlab's quadrature tolerance |dZ| < 1e-3
          unit="nats"),
      anytime_bounds_tighten_2d=dict(
          claim="anytime refinement tightens the bracket, which converges (Thm 3.10; the "
                "paper's Table 1 uses no refinement)",
          metric="bound gap log Z+ - log Z- after vt.bisection_steps bisection steps over "
                 "the gap before refinement (inner cube vs Omega), mean over the 2-D toys",
          # jaxlab reading of "converges": at least halved within the anytime budget.
          direction="lower", kind="ratio", threshold=2.0)))

  if preset == "smoke":  # pipeline check only: one 2-D set, tiny shapes, few steps
    config.datasets = "moons"
    config.data.num_points = 300
    config.circuit.update(num_replicas=1, leaf_units=2, sum_units=2, num_channels=3)
    config.hfv.leaf_components = 2
    config.vt.update(bisection_steps=3, capacity=16, kmeans_iters=3, gap_alphas=(1.0, 50.0),
                     quad_strips=256)
    config.train.update(num_steps=20, batch_size=64)
    config.plot_grid = 8
  elif preset == "full":
    config.datasets = ("moons,circles,pinwheel,checkerboard,spirals,swiss_roll,s_curve,wine,"
                       "diabetes,breast_cancer")
    config.data.num_points = 20000
    config.train.update(num_steps=3000, batch_size=500)
    config.vt.update(bisection_steps=32, capacity=2048, capacity_high_dim=128)
  return config
