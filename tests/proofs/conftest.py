from __future__ import annotations

from pathlib import Path

import pytest

from morphcache.proofs.check import Checker, Report
from morphcache.spec.loader import load_spec

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "spec" / "hybrid.yaml"
DESIGNS = sorted((ROOT / "spec" / "designs").glob("*.yaml"))


@pytest.fixture(scope="session")
def shipped_report() -> Report:
    return Checker(load_spec(SHIPPED)).run()
