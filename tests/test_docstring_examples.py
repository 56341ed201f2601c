"""Runs the docstring examples of every module under jaxlab/ and pallas_kernels/.

A public function's docstring carries a runnable example; this keeps each one running and
printing what it shows (`# doctest: +SKIP` marks the few that need a GPU, a dataset or a
long run). One test per module, so a failure names it.
"""

import doctest
import importlib
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _module_names() -> list[str]:
  names = []
  for package in ("jaxlab", "pallas_kernels"):
    for folder, _, files in os.walk(os.path.join(ROOT, package)):
      prefix = os.path.relpath(folder, ROOT).replace(os.sep, ".")
      names += [prefix if f == "__init__.py" else f"{prefix}.{f[:-3]}"
                for f in sorted(files) if f.endswith(".py")]
  return sorted(names)


def _examples(name: str) -> list[doctest.DocTest]:
  module = importlib.import_module(name)
  # Only the module's own objects (a re-exported function is checked where it is defined).
  return [t for t in doctest.DocTestFinder(exclude_empty=True).find(module, name)
          if t.examples]


MODULES = [n for n in _module_names() if _examples(n)]
# Modules whose examples train or compile a model (a few seconds each on 2 cores, most of
# the examples' total time): `slow`, so the default run keeps every other module's examples.
SLOW_EXAMPLES = frozenset({
    "jaxlab.causal", "jaxlab.causal._cvae", "jaxlab.causal._estimators",
    "jaxlab.causal._generator", "jaxlab.diffusion.dit", "jaxlab.diffusion.icl_task",
    "jaxlab.diffusion.positions", "jaxlab.diffusion.render", "jaxlab.distill.cost",
    "jaxlab.distill.training", "jaxlab.motion.model",
    "jaxlab.motion.training", "jaxlab.nn.transformer", "jaxlab.optim", "jaxlab.optim.eco",
    "jaxlab.privacy.training", "jaxlab.recsys.gates", "jaxlab.recsys.sasrec",
    "jaxlab.retrieval.losses", "jaxlab.retrieval.model", "jaxlab.retrieval.nig",
    "jaxlab.retrieval.world", "jaxlab.rl.gymnax_adapter", "jaxlab.rl.knowledge_task",
    "jaxlab.serving.engine", "jaxlab.motion.pipeline", "jaxlab.recsys.pipeline",
    "jaxlab.retrieval.evaluation", "jaxlab.quant.ptq",
    "jaxlab.text.bert", "jaxlab.zeroshot.expansion", "pallas_kernels.moe.reference",
})
# Examples that import an optional extra: skipped where it is not installed.
OPTIONAL_IMPORTS = {"jaxlab.rl.gymnax_adapter": "gymnax"}


def _params(names: list[str]) -> list:
  return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_EXAMPLES else n for n in names]


def test_most_modules_have_examples():
  assert len(MODULES) >= 50
  assert SLOW_EXAMPLES <= set(MODULES) and set(OPTIONAL_IMPORTS) <= set(MODULES)


def _run_examples(name: str) -> None:
  if name in OPTIONAL_IMPORTS:
    pytest.importorskip(OPTIONAL_IMPORTS[name])
  runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
  failed = []
  for test in _examples(name):
    result = runner.run(test, out=failed.append)
    assert result.failed == 0, "".join(failed)


# Two classes, so that `pytest -n 2 --dist loadscope` (a scope per class) runs the examples
# on both workers instead of one.
@pytest.mark.parametrize("name", _params(MODULES[0::2]))
class TestExamplesA:
  def test_docstring_examples_run(self, name):
    _run_examples(name)


@pytest.mark.parametrize("name", _params(MODULES[1::2]))
class TestExamplesB:
  def test_docstring_examples_run(self, name):
    _run_examples(name)
