"""A synthetic catalogue with ground truth for request-aware next-item recommendation (§4(d)).

Items carry 1-2 of `num_genres` genres and a template text ("<adjective> <genre> <noun>").
A user has a Dirichlet genre preference; the next item follows preference x first-order
Markov transitions (each item has a few successors, mostly of its own genres). Histories
carry no request. At the final step a request is drawn: "want g" (g uniform), "avoid g"
(g drawn from the user's preference, so avoiding it matters) or none / neutral, and the
target is drawn from preference x Markov x compatibility (want: only items of g; avoid:
no item of g). Requests are written with paraphrase templates; the last
`num_test_templates` of each intent are held out for test users.

Example:
  >>> from jaxlab.recsys import world
  >>> cfg = world.WorldConfig(num_items=60, num_genres=4, num_train_users=8,
  ...                         num_test_users=4, max_len=6, min_len=3, num_negatives=10)
  >>> w = world.make_world(cfg, seed=0)
  >>> w.train.history.shape, w.test.negatives.shape, len(w.item_texts)
  ((8, 6), (4, 10), 61)
"""

import dataclasses
from typing import NamedTuple

import numpy as np

from jaxlab.recsys import metrics

GENRES = ("romance", "horror", "comedy", "thriller", "science fiction", "documentary",
          "animation", "western", "fantasy", "musical", "crime", "war")
ADJECTIVES = ("tender", "gritty", "quiet", "epic", "strange", "bright", "dark", "gentle",
              "wild", "classic", "modern", "restless")
NOUNS = ("story", "film", "saga", "tale", "feature", "picture", "drama", "chronicle")
INTENTS = ("none", "want", "avoid")
TEMPLATES = {
    "want": ("I want to watch some {g}", "show me {g} titles", "in the mood for {g} tonight",
             "something {g}, please", "recommend me a {g} movie", "I feel like a {g} story",
             "give me more {g}", "looking for a good {g} pick", "any {g} recommendations?",
             "I'd love some {g} right now"),
    "avoid": ("no {g} please", "anything but {g}", "I don't want {g}", "avoid {g} titles",
              "skip the {g} stuff", "not in the mood for {g}", "please, nothing {g}",
              "keep {g} away from me", "I'm tired of {g}", "less {g} from now on"),
    "none": ("surprise me", "what should I watch next?", "anything is fine",
             "just recommend something", "no preference tonight", "show me what's next",
             "pick something for me", "whatever you think", "what else is there?",
             "keep going"),
}


@dataclasses.dataclass(frozen=True)
class WorldConfig:
  """Sizes of the synthetic world (jaxlab interpretation of the spec's CPU plan).

  Attributes:
    num_items: catalogue size (ids 1..num_items).
    num_genres: genres used (<= 12).
    num_train_users: users whose request step trains the arms.
    num_test_users: users whose request step (held-out paraphrases) is evaluated.
    max_len: history length cap (left-padded).
    min_len: shortest history.
    pref_alpha: Dirichlet concentration of the genre preference (small = focused users).
    num_successors: Markov successors per item.
    successor_weight: weight of a successor relative to the uniform floor 1.
    same_genre_successors: share of successors drawn among items sharing a genre.
    second_genre_prob: probability that an item has a second genre.
    request_probs: probabilities of (none, want, avoid) at the request step.
    num_test_templates: paraphrases per intent held out for test users.
    num_negatives: sampled negatives per test step (the paper's 100).
  """
  num_items: int = 480
  num_genres: int = 12
  num_train_users: int = 3000
  num_test_users: int = 600
  max_len: int = 20
  min_len: int = 8
  pref_alpha: float = 0.3
  num_successors: int = 4
  successor_weight: float = 12.0
  same_genre_successors: float = 0.75
  second_genre_prob: float = 0.5
  request_probs: tuple[float, float, float] = (0.4, 0.3, 0.3)
  num_test_templates: int = 3
  num_negatives: int = 100

  def __post_init__(self):
    if not 2 <= self.num_genres <= len(GENRES):
      raise ValueError(f"num_genres must lie in [2, {len(GENRES)}], got {self.num_genres}")
    if not 1 <= self.min_len <= self.max_len:
      raise ValueError(f"need 1 <= min_len <= max_len, got {self.min_len}, {self.max_len}")
    if len(self.request_probs) != 3 or abs(sum(self.request_probs) - 1) > 1e-6:
      raise ValueError(f"request_probs must be 3 probabilities, got {self.request_probs}")
    if not 1 <= self.num_test_templates < 10:
      raise ValueError(f"num_test_templates must lie in [1, 9], got {self.num_test_templates}")
    if self.num_items < self.max_len + 1 + self.num_negatives:
      raise ValueError("num_items must exceed max_len + 1 + num_negatives")


class Episodes(NamedTuple):
  """Request steps of a set of users (numpy)."""
  history: np.ndarray    # int32 [u, max_len], left-padded, no request
  target: np.ndarray     # int32 [u], the item chosen under the request
  intent: np.ndarray     # int32 [u], index into INTENTS
  genre: np.ndarray      # int32 [u], the requested genre (-1 for none)
  requests: tuple        # str [u], the request text
  negatives: np.ndarray  # int32 [u, num_negatives], never interacted


class World(NamedTuple):
  """A generated recommendation world: item catalogue, train/test episodes and the
  held-out neutral request."""
  item_genres: np.ndarray  # float32 [num_items + 1, num_genres], row 0 = padding
  item_texts: tuple        # str [num_items + 1] ("" for padding)
  train: Episodes
  test: Episodes
  neutral_request: str     # a held-out neutral paraphrase (the "no request" comparison)


def oracle_requests(intent: np.ndarray, genre: np.ndarray, num_genres: int,
                    width: int | None = None) -> np.ndarray:
  """The requests' true attributes as embeddings: a one-hot of (intent, genre).

  Row u is e_0 for no request, e_{1+g} for "want g", e_{1+G+g} for "avoid g" (G =
  `num_genres`), zero-padded to `width` so it can stand in for a text embedding of that
  width: an arm fed these instead of MiniLM's embeddings understands every request
  perfectly (jaxlab interpretation of an oracle request encoder).

  Args:
    intent: int [u], index into INTENTS.
    genre: int [u], the requested genre (-1 for none).
    num_genres: G.
    width: embedding width (>= 1 + 2G); None = 1 + 2G.

  Returns:
    float32 [u, width], unit-norm rows.

  Example:
    >>> oracle_requests(np.array([0, 1, 2]), np.array([-1, 0, 1]), 2).tolist()
    [[1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0]]
  """
  intent, genre = np.asarray(intent), np.asarray(genre)
  width = 1 + 2 * num_genres if width is None else width
  if width < 1 + 2 * num_genres:
    raise ValueError(f"width must be >= 1 + 2 * num_genres = {1 + 2 * num_genres}, got {width}")
  if intent.shape != genre.shape or intent.ndim != 1:
    raise ValueError(f"intent and genre must be [u], got {intent.shape}, {genre.shape}")
  bad = (intent > 0) & ((genre < 0) | (genre >= num_genres)) | (intent < 0) | (intent > 2)
  if bad.any():
    raise ValueError(f"intent must lie in [0, 3) with a genre in [0, {num_genres}) when > 0")
  col = np.where(intent == 0, 0, np.where(intent == 1, 1 + genre, 1 + num_genres + genre))
  out = np.zeros((intent.size, width), np.float32)
  out[np.arange(intent.size), col] = 1.0
  return out


def request_texts(intent: str, num_genres: int, held_out: bool,
                  num_test_templates: int = 3) -> list[str]:
  """Every paraphrase of `intent` for the train (False) or held-out (True) templates.

  Example:
    >>> request_texts("want", 2, held_out=False)[:2]
    ['I want to watch some romance', 'I want to watch some horror']
    >>> len(request_texts("want", 2, held_out=False)), len(request_texts("want", 2, True))
    (14, 6)
  """
  t = TEMPLATES[intent]
  t = t[-num_test_templates:] if held_out else t[:-num_test_templates]
  if intent == "none":
    return list(t)
  return [x.format(g=g) for x in t for g in GENRES[:num_genres]]


def _catalogue(cfg: WorldConfig, rng):
  n, g = cfg.num_items, cfg.num_genres
  first = rng.integers(0, g, n)
  second = np.where(rng.random(n) < cfg.second_genre_prob, rng.integers(0, g, n), first)
  genres = np.zeros((n + 1, g), np.float32)
  genres[np.arange(1, n + 1), first] = 1.0
  genres[np.arange(1, n + 1), second] = 1.0
  adj, noun = rng.integers(0, len(ADJECTIVES), n), rng.integers(0, len(NOUNS), n)
  texts = [""] + [
      f"{ADJECTIVES[adj[i]]} {GENRES[first[i]]}"
      + (f" and {GENRES[second[i]]}" if second[i] != first[i] else "") + f" {NOUNS[noun[i]]}"
      for i in range(n)]
  # Successors: mostly items sharing a genre (coherent sessions), some random.
  share = genres[1:] @ genres[1:].T > 0
  succ = np.zeros((n + 1, n + 1), np.float32)
  for i in range(n):
    pool = np.flatnonzero(share[i]) + 1
    same = rng.random(cfg.num_successors) < cfg.same_genre_successors
    picks = np.where(same, rng.choice(pool, cfg.num_successors),
                     rng.integers(1, n + 1, cfg.num_successors))
    succ[i + 1, picks] = 1.0
  return genres, tuple(texts), succ


def _draw(rng, probs):
  """One categorical draw per row of unnormalised probabilities [u, n]."""
  c = np.cumsum(probs, axis=1)
  u = rng.random((probs.shape[0], 1)) * c[:, -1:]
  return np.minimum((c < u).sum(axis=1), probs.shape[1] - 1)


def _episodes(cfg, rng, genres, succ, num_users, held_out) -> Episodes:
  n, g, t = cfg.num_items, cfg.num_genres, cfg.max_len
  pref_g = rng.dirichlet(np.full(g, cfg.pref_alpha), num_users)       # [u, g]
  counts = genres.sum(1, keepdims=True).T                             # [1, n+1]
  pref = (pref_g @ genres.T) / np.maximum(counts, 1.0) + 1e-3 / n     # [u, n+1]
  pref[:, 0] = 0.0
  lengths = rng.integers(cfg.min_len, t + 1, num_users)
  seq = np.zeros((num_users, t + 1), np.int32)  # t history slots + the request step
  prev = _draw(rng, pref)
  seq[:, 0] = prev
  markov = lambda p: 1.0 + cfg.successor_weight * succ[p]
  for s in range(1, t):
    prev = _draw(rng, pref * markov(prev))
    seq[:, s] = prev
  # The request step.
  intent = rng.choice(3, num_users, p=cfg.request_probs)
  want_g = rng.integers(0, g, num_users)
  avoid_g = _draw(rng, pref_g)
  genre = np.where(intent == 1, want_g, np.where(intent == 2, avoid_g, -1)).astype(np.int32)
  has = genres.T[np.maximum(genre, 0)]                                # [u, n+1]
  compat = np.where((intent == 1)[:, None], has,
                    np.where((intent == 2)[:, None], 1.0 - has, 1.0))
  compat[:, 0] = 0.0
  target = _draw(rng, pref * markov(prev) * compat).astype(np.int32)
  # Left-pad each history to its own length: keep the last `length` items before the target.
  history = np.zeros((num_users, t), np.int32)
  for u in range(num_users):
    history[u, t - lengths[u]:] = seq[u, t - lengths[u]:t]
  requests = []
  for i, gi in zip(intent, genre, strict=True):
    name = INTENTS[i]
    pool = TEMPLATES[name][-cfg.num_test_templates:] if held_out else \
        TEMPLATES[name][:-cfg.num_test_templates]
    text = pool[rng.integers(len(pool))]
    requests.append(text.format(g=GENRES[gi]) if gi >= 0 else text)
  negatives = metrics.sample_negatives(
      rng, np.concatenate([history, target[:, None]], 1), n, cfg.num_negatives)
  return Episodes(history, target, intent.astype(np.int32), genre, tuple(requests), negatives)


def make_world(cfg: WorldConfig, seed: int) -> World:
  """Draws the catalogue, the train users and the test users of one seed.

  Example:
    >>> cfg = WorldConfig(num_items=30, num_genres=3, num_train_users=16, num_test_users=8,
    ...                   max_len=6, min_len=3, num_negatives=10)
    >>> w = make_world(cfg, seed=0)
    >>> w.item_genres.shape, w.train.history.shape, w.test.negatives.shape
    ((31, 3), (16, 6), (8, 10))
    >>> w.item_texts[1], w.test.requests[0]
    ('dark comedy and romance story', 'less horror from now on')
  """
  rng = np.random.default_rng(seed)
  genres, texts, succ = _catalogue(cfg, rng)
  train = _episodes(cfg, rng, genres, succ, cfg.num_train_users, held_out=False)
  test = _episodes(cfg, rng, genres, succ, cfg.num_test_users, held_out=True)
  neutral = TEMPLATES["none"][-cfg.num_test_templates]
  return World(genres, texts, train, test, neutral)
