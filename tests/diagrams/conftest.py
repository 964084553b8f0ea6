"""Fixtures for the diagram tests (and this folder on ``sys.path`` for its helper modules)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from morphcache.spec.loader import load_spec
from morphcache.spec.model import Spec

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # helpers import the same way under any pytest import mode
    sys.path.insert(0, str(HERE))


@pytest.fixture(scope="session")
def spec() -> Spec:
    """The shipped design."""
    return load_spec(HERE.parents[1] / "spec" / "hybrid.yaml")
