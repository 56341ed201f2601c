"""A synthetic multiple-instance video world in which faces are correlated with anomalies.

jaxlab interpretation: every video has T snippets of d-dim "backbone" features

  f = B_task z_task + 1[face] B_face z_face + B_nuis z_nuis + noise * eps,

with B_task, B_face, B_nuis disjoint blocks of one random orthonormal basis (sizes
task_dim, face_dim, nuisance_dim). Abnormal videos hold one run of `anomaly_len` consecutive
anomalous snippets whose z_task is shifted by `anomaly_shift` along a fixed unit direction.
A face appears in `face_rate` of the snippets, coupled with "anomalous" by
`face_anomaly_corr` (jaxlab's "correlated 0.3": privacy and utility entangled), read as
`face_coupling` says (`face_probabilities`). The face-crop embedding is
f_face = B_face z_face + crop_noise * eps'. Only video labels are used for training; snippet
labels and face flags are ground truth for evaluation.

jaxlab interpretations (config knobs): z_face = face_mean * m + N(0, I) with a fixed unit m
(a face must shift the feature's mean, or a linear face probe could not see it at all);
the detector that gates L_face is perfect (face flags = detections); the coupling's
reading, `face_coupling` (the paper states none: the correlation is jaxlab's own design).

Example:
  >>> w = make_world(WorldConfig(num_train=8, num_test=4), seed=0)
  >>> w.train.features.shape, w.test.snippet_labels.shape, w.face_basis.shape
  ((8, 32, 128), (4, 32), (128, 4))
"""

import dataclasses
from typing import NamedTuple

import numpy as np

# Readings of the face-anomaly coupling `face_anomaly_corr` (`face_probabilities`).
FACE_COUPLINGS = ("phi", "risk_difference")


@dataclasses.dataclass(frozen=True)
class WorldConfig:
  """The synthetic world (defaults: jaxlab interpretation).

  Attributes:
    num_train: training videos.
    num_test: test videos.
    num_snippets: snippets per video (T).
    feat_dim: feature dimension d.
    task_dim: dimension of the task (anomaly) subspace.
    face_dim: dimension of the face subspace.
    nuisance_dim: dimension of the general nuisance subspace.
    noise: scale of the isotropic feature noise.
    crop_noise: scale of the noise on the face-crop embedding.
    abnormal_fraction: fraction of abnormal videos.
    anomaly_len: (min, max) length of the anomalous run, inclusive.
    anomaly_shift: shift of z_task on anomalous snippets.
    face_rate: P(face) per snippet.
    face_anomaly_corr: the coupling of the face and anomaly indicators, read as
      `face_coupling` says.
    face_mean: norm of the mean of z_face (jaxlab interpretation).
    face_coupling: jaxlab interpretation of `face_anomaly_corr`: "phi", the Pearson
      correlation of the two indicators, or "risk_difference", P(face | anomalous) -
      P(face | normal) (`face_probabilities`).
  """
  num_train: int = 400
  num_test: int = 200
  num_snippets: int = 32
  feat_dim: int = 128
  task_dim: int = 8
  face_dim: int = 4
  nuisance_dim: int = 16
  noise: float = 0.1
  crop_noise: float = 0.1
  abnormal_fraction: float = 0.5
  anomaly_len: tuple[int, int] = (3, 8)
  anomaly_shift: float = 2.5
  face_rate: float = 0.5
  face_anomaly_corr: float = 0.3
  face_mean: float = 1.5
  face_coupling: str = "risk_difference"


class VideoSet(NamedTuple):
  """Videos of one split (numpy arrays)."""
  features: np.ndarray        # [n, t, d] float32
  face_crops: np.ndarray      # [n, t, d] float32; zeros where there is no face
  faces: np.ndarray           # [n, t] bool
  snippet_labels: np.ndarray  # [n, t] bool, anomalous snippets
  video_labels: np.ndarray    # [n] int32


class World(NamedTuple):
  """One seeded draw: both splits and the ground-truth bases."""
  train: VideoSet
  test: VideoSet
  face_basis: np.ndarray      # [d, face_dim]
  task_basis: np.ndarray      # [d, task_dim]


def face_probabilities(cfg: WorldConfig) -> tuple[float, float]:
  """(P(face | anomalous), P(face | normal)) giving face_rate and the coupling.

  With p_a the expected anomalous-snippet rate and p_f = face_rate, both readings keep
  P(face) = p_f and set the coupling c = `face_anomaly_corr`:

  * "phi": ``phi = (P(f, a) - p_f p_a) / sqrt(p_f (1 - p_f) p_a (1 - p_a)) = c``;
  * "risk_difference": ``P(f | a) - P(f | not a) = c``.

  Anomalies are rare (p_a ~ 0.09 with the defaults), so a phi of 0.3 needs P(f | a) ~ 0.99
  (a face nearly always comes with an anomaly), while a risk difference of 0.3 gives
  P(f | a) ~ 0.77 vs 0.47 (phi ~ 0.17).

  Returns:
    (q1, q0) = (P(face | anomalous), P(face | normal)).

  Raises:
    ValueError: for an unknown `face_coupling`, or when no probabilities in [0, 1] reach
      the requested coupling.

  Example:
    >>> q1, q0 = face_probabilities(WorldConfig(face_coupling="risk_difference"))
    >>> round(q1 - q0, 6)
    0.3
  """
  if cfg.face_coupling not in FACE_COUPLINGS:
    raise ValueError(f"face_coupling must be one of {FACE_COUPLINGS}, got {cfg.face_coupling!r}")
  lo, hi = cfg.anomaly_len
  p_a = cfg.abnormal_fraction * 0.5 * (lo + hi) / cfg.num_snippets
  p_f = cfg.face_rate
  if not (0.0 < p_a < 1.0 and 0.0 < p_f < 1.0):
    raise ValueError(f"face_rate ({p_f}) and the anomalous-snippet rate ({p_a:.3f}) "
                     "must lie in (0, 1)")
  c = cfg.face_anomaly_corr
  if cfg.face_coupling == "phi":
    joint = c * np.sqrt(p_f * (1 - p_f) * p_a * (1 - p_a)) + p_f * p_a
    q1, q0 = joint / p_a, (p_f - joint) / (1 - p_a)
  else:  # q1 - q0 = c and p_a q1 + (1 - p_a) q0 = p_f
    q0 = p_f - c * p_a
    q1 = q0 + c
  if not (0.0 <= q1 <= 1.0 and 0.0 <= q0 <= 1.0):
    raise ValueError(f"face_anomaly_corr={c} ({cfg.face_coupling}) is not reachable with "
                     f"face_rate={p_f} and anomalous-snippet rate {p_a:.3f}")
  return float(q1), float(q0)


def _videos(rng: np.random.Generator, n: int, cfg: WorldConfig, bases, direction, face_mean,
            q1: float, q0: float) -> VideoSet:
  b_task, b_face, b_nuis = bases
  t, lo, hi = cfg.num_snippets, *cfg.anomaly_len
  labels = (rng.random(n) < cfg.abnormal_fraction).astype(np.int32)
  lengths = rng.integers(lo, hi + 1, n)
  starts = rng.integers(0, t - lengths + 1)
  pos = np.arange(t)[None, :]
  anomalous = (labels[:, None] == 1) & (pos >= starts[:, None]) & (
      pos < (starts + lengths)[:, None])
  faces = rng.random((n, t)) < np.where(anomalous, q1, q0)
  z_task = rng.standard_normal((n, t, cfg.task_dim)) + cfg.anomaly_shift * anomalous[
      ..., None] * direction
  z_face = face_mean + rng.standard_normal((n, t, cfg.face_dim))
  z_nuis = rng.standard_normal((n, t, cfg.nuisance_dim))
  face_part = z_face @ b_face.T
  feats = (z_task @ b_task.T + faces[..., None] * face_part + z_nuis @ b_nuis.T
           + cfg.noise * rng.standard_normal((n, t, cfg.feat_dim)))
  crops = faces[..., None] * (face_part + cfg.crop_noise * rng.standard_normal(feats.shape))
  return VideoSet(feats.astype(np.float32), crops.astype(np.float32), faces, anomalous, labels)


def make_world(cfg: WorldConfig, seed: int) -> World:
  """One seeded draw of the world (train and test videos share the bases).

  Example:
    >>> cfg = WorldConfig(num_train=8, num_test=4, num_snippets=16, feat_dim=32)
    >>> w = make_world(cfg, seed=0)
    >>> w.train.features.shape, w.test.faces.shape, w.face_basis.shape, w.task_basis.shape
    ((8, 16, 32), (4, 16), (32, 4), (32, 8))
    >>> np.allclose(w.face_basis.T @ w.task_basis, 0.0, atol=1e-6)   # disjoint subspaces
    True
  """
  dims = (cfg.task_dim, cfg.face_dim, cfg.nuisance_dim)
  if min(dims) < 1 or sum(dims) > cfg.feat_dim:
    raise ValueError(f"task/face/nuisance dims {dims} must be >= 1 and sum to <= feat_dim "
                     f"({cfg.feat_dim})")
  lo, hi = cfg.anomaly_len
  if not 1 <= lo <= hi <= cfg.num_snippets:
    raise ValueError(f"anomaly_len must satisfy 1 <= min <= max <= {cfg.num_snippets}, "
                     f"got {cfg.anomaly_len}")
  if cfg.num_train < 1 or cfg.num_test < 1:
    raise ValueError(f"need >= 1 train and test video, got {cfg.num_train}, {cfg.num_test}")
  q1, q0 = face_probabilities(cfg)
  rng = np.random.default_rng(seed)
  basis, _ = np.linalg.qr(rng.standard_normal((cfg.feat_dim, sum(dims))))
  bases = np.split(basis, np.cumsum(dims)[:-1], axis=1)
  direction = rng.standard_normal(cfg.task_dim)
  direction /= np.linalg.norm(direction)
  m = rng.standard_normal(cfg.face_dim)
  face_mean = cfg.face_mean * m / np.linalg.norm(m)
  train = _videos(rng, cfg.num_train, cfg, bases, direction, face_mean, q1, q0)
  test = _videos(rng, cfg.num_test, cfg, bases, direction, face_mean, q1, q0)
  return World(train, test, bases[1].astype(np.float32), bases[0].astype(np.float32))
