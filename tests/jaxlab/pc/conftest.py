"""One set of tiny 2-D models for the whole `jaxlab.pc` test package (initialised once)."""

import pytest

from tests.jaxlab.pc import pc_testing


@pytest.fixture(scope="package")
def small_models():
  return pc_testing.small_models()
