"""SATA: topology-agnostic motion autoencoder and zero-shot biped -> quadruped retargeting.

Command:
  python -m launch.main --config=configs/sata.py:quick --workdir=runs/sata

Presets:
  smoke  4 + 4 training clips per seed, 2 arms (sata, no_text), a handful of steps, 3 seeds
         (pipeline check; MiniLM load + compilation dominate).
  quick  128 clips per training species (biped, quadruped; every clip on its own random
         skeleton), 8 frames at 10 fps (about one gait cycle), bipeds below 1 m/s and
         quadrupeds above it, 32 hidden pairs per seed below 1 m/s decoded on quadrupeds of a
         held-out morphology, 800 steps of 4 clips for each of the five arms, 3 seeds vmapped,
         one compilation shared by every arm; every retargeted clip written as BVH and scored
         from the file; MiniLM embeddings of the ~45 joint descriptions cached in the
         workdir.
  full   512 clips per species, 32 frames at 20 fps, 3000 steps, 5 seeds.

Arms (`config.arms`): "sata" (FiLM + gate, text, GINE + spatial + temporal Transformer),
"no_film" (concatenation instead of modulation), "no_text" (geometry-only condition),
"shuffled_text" (each skeleton's descriptions permuted among its own joints), "gnn_only"
(SAME-like: no spatial Transformer, no text, concatenation). Each arm is a jaxlab
interpretation of the paper's ablations.

Expected result (the paper's reconstruction and zero-shot retargeting tables): comparable reconstruction across arms; the lowest zero-shot
cross-species joint-position error with FiLM + text; GNN-only and no-text lose most out of
topology. The report judges the criteria below on paired seeds, whatever the outcome.
"""

import ml_collections

import jaxlab.presets


def get_config(arg=None):
  preset = jaxlab.presets.parse_preset(arg)
  config = ml_collections.ConfigDict()
  config.experiment = "sata"
  config.preset = preset
  config.seeds = (0, 1, 2)
  config.arms = "sata,no_film,no_text,shuffled_text,gnn_only"

  # jaxlab interpretation of the paper's data (procedural species stand in for its BVH sets).
  config.data = ml_collections.ConfigDict(dict(
      num_train=128,             # clips per training species
      num_test=32,               # clips per test split (and hidden pairs)
      num_frames=8, fps=10.0, max_joints=32, bone_jitter=0.3,
      train_species="biped,quadruped", heldout_species="hexapod",
      pair_source="biped", pair_target="quadruped",
      # What the target species never trained on (`generate.make_splits`), so that
      # retargeting is a transfer from the source species: gait speeds (m/s) below
      # split_speed are the source's only, and the pairs move there; with
      # heldout_morphology the pairs' targets have limb tips and long tails, which no
      # training quadruped had. The report also re-scores the same pairs on quadrupeds of
      # the trained morphology (an interpretation line).
      split_speed=1.0, heldout_morphology=True))
  # No `text` knobs: the ~45 joint descriptions go through MiniLM in one call, once per
  # workdir (`jaxlab.motion.text_cache`); a batch-size field here was never read.
  config.model = ml_collections.ConfigDict(dict(
      width=32, num_blocks=1, num_heads=4, latent_dim=16, num_freqs=4))
  # jaxlab interpretation: the paper's loss weights are unreported.
  config.loss = ml_collections.ConfigDict(dict(
      rotation=1.0, position=1.0, velocity=0.05, contact=0.2, root=0.5, kl=1e-4))
  # xla_opt_level: None = XLA's default; 0 compiles the program faster but runs it slower
  # (worth it only for the short smoke preset).
  config.train = ml_collections.ConfigDict(dict(num_steps=800, batch_size=4,
                                                xla_opt_level=ml_collections.FieldReference(
                                                    None, field_type=int)))
  # The paper: Adam, lr 1e-4, warm-up then exponential decay over 400 epochs; our short
  # runs use a larger peak with warm-up + cosine (jaxlab interpretation), gradients clipped
  # to global norm 1.
  config.optimizer = ml_collections.ConfigDict(dict(
      name="adam", learning_rate=1e-2, schedule="warmup_cosine", warmup_steps=20,
      end_frac=0.1, grad_clip=1.0))

  # Declared before the run; judged on paired seeds by jaxlab.report.judge_all.
  # Retargeting errors are compared as ratios (baseline error / SATA error): the paper's
  # claim is a factor ("far below": 398.1 vs 34.6 JP, 11.5x), not a number of cm. Each is
  # floored at the mean-pose predictor (every target joint held at its role's mean training
  # rotation of the target species, measured per seed): the baseline arm must cut the mean
  # pose's error by 1.5x, else neither arm learned to retarget and the ratio is noise.
  floor = dict(floor="mean pose (per-role mean training rotation of the target species)",
               floor_margin=1.5)

  def ratio(arm, claim, threshold, primary=False, mechanism=False):
    return dict(claim=claim, metric=f"{jp}: {arm}'s error / sata's", direction="lower", kind="ratio",
                threshold=threshold, primary=primary, unit="cm", mechanism=mechanism, **floor)

  def vs(metric, direction, claim, threshold=0.0, unit="cm"):
    return dict(claim=claim, metric=metric, direction=direction, threshold=threshold,
                primary=False, unit=unit)

  jp = ("zero-shot retargeting joint-position error vs the hidden pair (cm, root-relative in "
        "the facing frame, scored on the BVH files written and read back), biped -> "
        "quadruped of a held-out morphology at gait speeds no training quadruped had")
  config.criteria = ml_collections.ConfigDict(dict(
      # "Far below" read as at least 2x lower error: the paper's factor is 11.5
      # (398.1 / 34.6, AT-HumanML3D -> AniMo zero-shot JP; 122.7 / 80.9 = 1.5 the other way).
      retarget_vs_gnn_only=ratio(
          "gnn_only", "SATA's zero-shot cross-species error is far below the SAME-like GNN's "
          "(34.6 vs 398.1 JP, 11.5x; 'far below' read as >= 2x)", 2.0, primary=True),
      # The mechanism: the same autoencoder without the joint descriptions. The paper's
      # no-text ablation: cross retargeting 0.25 -> 0.20 (1.25x), internal 0.35 -> 0.21.
      retarget_vs_no_text=ratio(
          "no_text", "joint text semantics lower cross-species error (no-text ablation, "
          "cross retargeting 0.25 vs 0.20: 1.25x)", 1.25, primary=True, mechanism=True),
      # The paper reports FiLM beating plain addition without a number: better at all.
      retarget_vs_no_film=ratio(
          "no_film", "FiLM modulation beats concatenation (fusion ablation)", 1.0,
          mechanism=True),
      retarget_vs_shuffled_text=ratio(
          "shuffled_text", "correct descriptions matter, not just extra inputs", 1.0),
      gait_vs_no_text=vs(
          "retargeting gait-phase correlation (read back from the BVH files): sata minus "
          "no_text", "higher", "text semantics transfer the gait phase across species",
          unit="corr"),
      heldout_vs_gnn_only=vs(
          "held-out hexapod reconstruction JP (cm): sata minus gnn_only", "lower",
          "the model generalises to an unseen topology better than GNN-only"),
      recon_comparable=vs(
          "seen-species reconstruction JR (deg): sata minus gnn_only", "lower",
          "reconstruction on seen species is comparable across variants (within 1 deg)",
          threshold=-1.0, unit="deg")))

  if preset == "smoke":
    config.arms = "sata,no_text"
    config.data.update(num_train=4, num_test=4, num_frames=8)
    config.model.update(width=16, num_heads=2, latent_dim=8, num_freqs=2)
    config.train.update(num_steps=4, batch_size=4, xla_opt_level=0)
    config.optimizer.warmup_steps = 1
  elif preset == "full":
    config.seeds = (0, 1, 2, 3, 4)
    config.data.update(num_train=512, num_test=64, num_frames=32, fps=20.0)
    config.model.update(width=64, num_blocks=2, latent_dim=32)
    config.train.update(num_steps=3000, batch_size=16)
    config.optimizer.update(learning_rate=1e-3, warmup_steps=100)
  return config
