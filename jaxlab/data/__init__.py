"""Offline data: a stdlib-source byte corpus, sklearn digits, synthetic helpers."""

from jaxlab.data.corpus import (
    Corpus,
    lm_batch,
    lm_batches,
    load_corpus,
    stdlib_py_files,
    unigram_bits_per_byte,
)
from jaxlab.data.digits import Digits, load_digits
from jaxlab.data.synthetic import gaussian_blobs, linear_regression

__all__ = [
    "Corpus", "Digits", "gaussian_blobs", "linear_regression", "lm_batch", "lm_batches",
    "load_corpus", "load_digits", "stdlib_py_files", "unigram_bits_per_byte",
]
