"""Fixtures of the engine tests (helpers live in eng_helpers.py).

Without a GPU the kernels run under the Triton interpreter; its nested re-patching is skipped
(morphcache.engine.interpreter) to keep the end-to-end runs short.
"""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():  # pragma: no cover
    os.environ["TRITON_INTERPRET"] = "1"

from collections.abc import Iterator  # noqa: E402

from morphcache.engine.interpreter import disable_fast_interpreter, enable_fast_interpreter  # noqa: E402
from morphcache.model import HybridModel, ModelConfig, model_config  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def fast_cpu() -> Iterator[None]:
    """For the engine tests only: the interpreter speed-up, and one intra-op torch thread on CPU (the
    model's tensors are tiny; a second thread costs more than it brings)."""
    threads = torch.get_num_threads()
    if not torch.cuda.is_available():
        torch.set_num_threads(1)
    enable_fast_interpreter()
    yield
    disable_fast_interpreter()
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def model() -> HybridModel:
    """The reference model with the default configuration and seed 0."""
    return HybridModel(ModelConfig(), seed=0)


@pytest.fixture(scope="session")
def gdn_model() -> HybridModel:
    """The GDN hybrid (3 linear : 1 full attention) with seeded weights, seed 0."""
    return HybridModel(model_config("gdn-hybrid"), seed=0)
