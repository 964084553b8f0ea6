"""Fixtures for the diagram tests."""

from __future__ import annotations

import pytest
from diagram_sim import SHIPPED
from morphcache.spec.loader import load_spec
from morphcache.spec.model import Spec


@pytest.fixture(scope="session")
def spec() -> Spec:
    """The shipped design."""
    return load_spec(SHIPPED)
