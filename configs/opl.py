"""OPL / G-OPL: privacy-preserving orthogonal projections for weakly supervised anomaly detection.

Command:
  python -m launch.main --config=configs/opl.py:quick --workdir=runs/opl

Presets:
  smoke  a small world (48 train / 24 test videos, d = 64), k = 4, λ_face = 1, 30 steps,
         3 seeds, arms none / OPL(4) / G-OPL(4) + OPL(4) (pipeline check).
  quick  the default world (400 train / 200 test videos, T = 32, d = 128), every arm of the
         sweep: none, OPL(k), G-OPL(k) + OPL(k) for k in {2, 4, 8, 16, 32, 64} and
         λ_face in {0.1, 1}; 3 seeds vmapped; one compiled program for every arm.
  full   the same sweep with 5 seeds and 3x the steps.

Arms: "none" (the light RTFM scorer alone), "opl_k<k>" (OPL of rank k on the features),
"gopl_k<k>_l<λ>" (G-OPL of rank k right after the backbone, aligned with face crops with
weight λ_face, then OPL of rank k). Metrics per arm and seed: snippet AUC, the 5-fold
LinearSVC face-probe accuracy on the features after the privacy layers (FPD), SSC of the
first privacy layer, ARD (KL between KDEs of scores with and without the projections).

Expected result (the paper's claim at our scale): G-OPL brings the probe near chance (<= 60% vs >= 95%) with
AUC within 1 point at small k; plain OPL lowers the probe only slightly. The criteria below
are declared before the run and judged on paired seeds, whatever the outcome.

The face-anomaly coupling (`world.face_coupling`, jaxlab interpretation). Our world
has faces in half the snippets, "correlated 0.3 with anomaly"; the paper states no such
number (its data are real surveillance videos), so the reading is ours, and it decides how
much anomaly signal the faces carry. Anomalous snippets are rare (8.6% with these
defaults), so reading 0.3 as the phi correlation of the two indicators forces
P(face | anomalous) = 0.99 vs 0.45 for normal snippets: a face comes with nearly every
anomaly, the detector's own loss keeps the face direction, and no projection can remove
faces without removing anomaly evidence. Read as a risk difference, P(face | anomalous) -
P(face | normal) = 0.3 gives 0.77 vs 0.47 (phi 0.17): faces still entangled with
anomalies, but not a near-certain cue. The paper's claim is that the face attribute can
be projected out while detection is kept (ShanghaiTech AUC 97.3 with G-OPL vs 97.0
without), which presupposes faces that are not themselves the anomaly evidence; of the
two readings the risk difference is the one consistent with that premise, so it is the
default. The report judges the row at both readings (`opl.face_coupling_readings`),
rerunning only the arms the primary criteria read (none, OPL(small_k), G-OPL(small_k)).
"""

import ml_collections

import jaxlab.presets


def get_config(arg=None):
  preset = jaxlab.presets.parse_preset(arg)
  config = ml_collections.ConfigDict()
  config.experiment = "opl"
  config.preset = preset
  config.seeds = (0, 1, 2)

  # The synthetic MIL video world (jaxlab.privacy.world.WorldConfig; jaxlab interpretation).
  config.world = ml_collections.ConfigDict(dict(
      num_train=400, num_test=200, num_snippets=32, feat_dim=128, task_dim=8, face_dim=4,
      nuisance_dim=16, noise=0.1, crop_noise=0.1, abnormal_fraction=0.5, anomaly_len=(3, 8),
      anomaly_shift=2.5, face_rate=0.5, face_anomaly_corr=0.3,
      face_mean=1.5,                # jaxlab interpretation: faces shift the feature mean
      face_coupling="risk_difference"))  # jaxlab interpretation of the 0.3 (docstring)
  # train.batch_size counts videos (each with all its snippets).
  config.train = ml_collections.ConfigDict(dict(
      num_steps=400, batch_size=32, top_k=3, hidden=32))
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=3e-3, schedule="constant", warmup_steps=0))
  config.opl = ml_collections.ConfigDict(dict(
      arms="none,opl,gopl",          # families; expanded over ks (and lambdas for gopl)
      ks=(2, 4, 8, 16, 32, 64),
      lambdas=(0.1, 1.0),            # λ_face
      lam_orth=1.0,                  # jaxlab interpretation: the paper's λ_orth was not found
      mode="qr",                     # jaxlab interpretation: "qr" or "direct"
      opl_placement="input",         # jaxlab interpretation: "input" or "hidden"
      small_k=4,                     # the k the criteria judge (the paper's best, k = 4)
      criteria_lambda=1.0,           # the λ_face the criteria judge
      face_coupling_readings=("phi", "risk_difference")))  # the row is judged at each
  # The face probe (FPD): LinearSVC on a fixed per-seed subsample of test snippets.
  config.eval = ml_collections.ConfigDict(dict(probe_samples=2000, probe_folds=5, probe_c=1.0))

  # Declared before the run; judged on paired seeds by jaxlab.report.judge_all.
  config.criteria = ml_collections.ConfigDict(dict(
      probe_near_chance=dict(
          claim="G-OPL brings the face probe near chance (spec: <= 60% vs >= 95% without)",
          metric="face-probe accuracy of G-OPL(k=small_k) + OPL minus the majority-class rate",
          direction="lower", threshold=-0.10, unit="accuracy"),
      auc_kept=dict(
          claim="G-OPL keeps detection: AUC within 1 point at small k (paper 97.3 vs RTFM 97.0)",
          metric="snippet AUC, G-OPL(k=small_k) + OPL minus no projection",
          direction="higher", threshold=-0.01, unit="AUC",
          # Keeping the AUC of a detector at chance shows nothing: the unprojected detector
          # must rank anomalous snippets above normal ones (the paper's host: 0.97).
          floor="chance", floor_value=0.5, floor_margin=0.1),
      opl_probe_weaker=dict(
          mechanism=True,  # G-OPL's projection against OPL alone
          claim="plain OPL lowers the face probe only slightly; G-OPL far more",
          metric="face-probe accuracy, G-OPL(k=small_k) + OPL minus OPL(k=small_k)",
          direction="lower", threshold=0.20, unit="accuracy"),
      auc_falls_with_k=dict(
          claim="AUC falls as k grows (paper: 97.3 at k = 4 -> 92.5 at k_G-OPL = 64)",
          metric="snippet AUC, G-OPL at the largest k minus at small_k",
          direction="lower", threshold=0.0, unit="AUC", primary=False),
      ard_grows_with_k=dict(
          claim="ARD grows with k",
          metric="ARD (KL of score KDEs), G-OPL at the largest k minus at small_k",
          direction="higher", threshold=0.0, unit="nats", primary=False),
      ssc_rises=dict(
          claim="SSC rises with G-OPL: its subspace captures the face attribute",
          metric="SSC of the first privacy layer, G-OPL(k=small_k) minus OPL(k=small_k)",
          direction="higher", threshold=0.0, unit="cosine", primary=False)))

  if preset == "smoke":
    config.world.update(num_train=48, num_test=24, feat_dim=64)
    config.train.update(num_steps=30, batch_size=16)
    config.opl.update(ks=(4,), lambdas=(1.0,))
    config.eval.probe_samples = 400
  elif preset == "full":
    config.seeds = (0, 1, 2, 3, 4)
    config.train.num_steps = 1200
    config.eval.probe_samples = 6400
  return config
