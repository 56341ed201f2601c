"""Zero-shot classifier expansion: ICIS shared mapping vs GA-ZSCE (reconstruction).

Command:
  python -m launch.main --config=configs/zeroshot.py:quick --workdir=runs/zeroshot

Presets:
  smoke  the synthetic world only, 60 mapping steps, 3 seeds (pipeline check).
  quick  the synthetic world (8 groups x 6 classes, 12 unseen) and the semi-real world
         (150 taxonomy classes, MiniLM embeddings of 5 prompt templates, cached in the
         workdir), 400 steps per arm, 3 seeds vmapped.
  full   the same worlds, 2000 steps, 5 seeds.

Arms (`config.arms`): "shared" (ICIS dual-AE shared mapping), "separation" (+ every
source a view and the invariance term L_inv), "full" (+ k-means groups with residual
heads, per-group loss normalisation, intra-group margin). Only the abstract is public:
every choice of the reconstruction is a knob under `config.method` (jaxlab
interpretation). The full arm discovers how many groups there are (`method.group_rule`,
silhouette by default; the abstract does not say how); the worlds' true group counts
(8 / 15) are used only to score.

Criteria: primary are the full method vs the ICIS shared mapping on within-group unseen
accuracy and on H, and the mechanism: the full method vs the separation arm (the same
pipeline without the granularity-aware part) on within-group unseen accuracy, in each
world. The report also shows the row's verdict under each group-count rule
(`config.interpretations.group_rule`).

Expected result (jaxlab interpretation of the abstract's "fine-grained" claim): the
shared map gets groups right but confuses classes inside a group; the full method raises
within-group unseen accuracy and H. The report judges the criteria below on paired seeds,
whatever the outcome.
"""

import ml_collections

import jaxlab.presets

TEMPLATES = ("a photo of a {}.", "a picture of the {}.", "an image showing a {}.",
             "a close-up photo of a {}.", "this is a {}.")


def get_config(arg=None):
  preset = jaxlab.presets.parse_preset(arg)
  config = ml_collections.ConfigDict()
  config.experiment = "zeroshot"
  config.preset = preset
  config.seeds = (0, 1, 2)
  config.arms = "shared,separation,full"
  config.worlds = "synthetic,semireal"

  # Shared by both worlds (jaxlab interpretation: 64-d features, fine/coarse ratio 0.35,
  # sigma 0.5); the seen-class head trains with `optimizer.head`.
  config.features = ml_collections.ConfigDict(dict(
      feat_dim=64, fine_coarse_ratio=0.35, feature_noise=0.5, train_per_class=40,
      test_per_class=40, head_steps=300))
  config.synthetic = ml_collections.ConfigDict(dict(
      num_groups=8, classes_per_group=6, num_unseen=12, sem_dim=384, num_sources=5,
      nuisance=1.0, class_noise=0.3))
  config.semireal = ml_collections.ConfigDict(dict(
      num_unseen=38, templates=TEMPLATES, encoder_batch_size=128))
  # The mapping: full-batch Adam on every (source, class) pair.
  # No batch_size: the mapping trains full-batch on every (source, class) pair (5 x 48
  # synthetic, 5 x 150 semi-real), so an override of one is refused as an unknown key.
  config.train = ml_collections.ConfigDict(dict(
      num_steps=400,
      latent_dim=64, hidden_dim=128, kmeans_iters=30))
  # The mapping's optimizer (Adam, as ICIS); `head`: the worlds' seen-class softmax head.
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=1e-3, schedule="constant", warmup_steps=0,
      head=dict(learning_rate=0.05)))
  # jaxlab interpretations of the abstract's stages 2 (latent class structure: routing) and
  # 3 (refinement of similar classes).
  config.method = ml_collections.ConfigDict(dict(
      # The method discovers its groups (the abstract: "discovers latent class structure"):
      # 0 = the count chosen by `group_rule` in [2, max_groups] from the class semantics;
      # k > 0 = a fixed k, an explicit sweep override (e.g. the world's true count, reported
      # as such), never the default.
      num_groups=0, group_rule="silhouette", max_groups=24, num_restarts=4,
      routing="hard", temperature=0.1, lam_inv=1.0, lam_margin=1.0, margin=0.5,
      group_norm=True, margin_unseen=True))
  # The readings of `method.group_rule` the report shows (each reruns only the full arm,
  # and only where its counts differ from the default's).
  config.interpretations = ml_collections.ConfigDict(dict(group_rule="silhouette,eigengap"))

  # Declared before the run; judged on paired seeds by jaxlab.report.judge_all.
  # Size anchors (CF-ZSCE, AAAI-26, Table 1; the ICML paper's own numbers are not public
  # and are expected to be at least these): with the same LLM-view semantics, CF-ZSCE beats
  # ICIS in H by +6.6 (CUB 61.3 vs 54.7), +14.9 (AWA2 67.9 vs 53.0) and +7.9 points (SUN
  # 41.3 vs 33.4). Our worlds are not on those benchmarks' scale, so the primary criteria
  # judge the direction (threshold 0) and `H_size_*` judges the smallest anchored gain.
  # Floors: the baseline arm must beat a uniformly random classifier (`metrics.
  # chance_levels`, measured per seed: 1/#classes for u and H, 1/|group| for within-group)
  # by 5 accuracy points, else the comparison is `no signal`.
  floor = dict(floor="chance", floor_margin=0.05)
  criteria = {}
  for world in ("synthetic", "semireal"):
    criteria[f"within_group_{world}"] = dict(
        claim="GA-ZSCE's routing and refinement fix fine-grained confusions of the shared "
              f"mapping ({world} world)",
        metric="within-group unseen accuracy (argmax among the true group's classes), full "
               "method minus ICIS shared mapping",
        direction="higher", threshold=0.0, unit="accuracy", **floor)
    criteria[f"H_{world}"] = dict(
        claim=f"GA-ZSCE raises the GZSL harmonic mean H over the shared mapping ({world}; "
              "CF-ZSCE anchors: +6.6 / +14.9 / +7.9 H points over ICIS on CUB / AWA2 / SUN)",
        metric="H = 2us/(u+s), full method minus shared mapping",
        direction="higher", threshold=0.0, unit="H", **floor)
    criteria[f"mechanism_{world}"] = dict(
        claim="The granularity-aware part (discovered groups with per-group heads, per-group "
              "loss normalisation, intra-group margin) is what fixes fine-grained confusions "
              f"({world})",
        metric="within-group unseen accuracy, full method minus the same pipeline without "
               "it (the separation arm: multi-source semantics + L_inv), equal steps, paired "
               "seeds",
        direction="higher", threshold=0.0, unit="accuracy", mechanism=True, **floor)
    criteria[f"H_mechanism_{world}"] = dict(
        claim=f"The granularity-aware part raises H ({world})",
        metric="H, full method minus the separation arm",
        direction="higher", threshold=0.0, unit="H", mechanism=True, primary=False, **floor)
    criteria[f"H_size_{world}"] = dict(
        claim="GA-ZSCE's H gain over the shared mapping is at least the smallest anchored "
              f"gain, +6.6 H points (CF-ZSCE vs ICIS on CUB, same semantics) ({world})",
        metric="H, full method minus shared mapping",
        direction="higher", threshold=0.066, unit="H", primary=False, **floor)
    criteria[f"u_{world}"] = dict(
        claim=f"GA-ZSCE raises unseen accuracy u over the shared mapping ({world})",
        metric="GZSL unseen accuracy u, full method minus shared mapping",
        direction="higher", threshold=0.0, unit="accuracy", primary=False, **floor)
    criteria[f"T_{world}"] = dict(
        claim=f"GA-ZSCE raises ZSL accuracy T over the shared mapping ({world}; CF-ZSCE "
              "anchors: +9.3 / +11.6 / +5.1 points over ICIS on CUB / AWA2 / SUN)",
        metric="ZSL top-1 T (argmax over unseen classes), full method minus shared mapping",
        direction="higher", threshold=0.0, unit="accuracy", primary=False, **floor)
    criteria[f"template_{world}"] = dict(
        claim=f"GA-ZSCE cuts template sensitivity ({world})",
        metric="spread of synthesized unseen weights across sources (mean 1 - cos to the "
               "source mean), full method minus shared mapping",
        direction="lower", threshold=0.0, unit="1 - cos", primary=False)
  config.criteria = ml_collections.ConfigDict(criteria)

  if preset == "smoke":
    config.worlds = "synthetic"
    config.train.num_steps = 60
    config.features.update(head_steps=100, train_per_class=20, test_per_class=20)
  elif preset == "full":
    config.seeds = (0, 1, 2, 3, 4)
    config.train.num_steps = 2000
  return config
