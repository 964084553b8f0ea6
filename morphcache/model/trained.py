"""Trained weights shipped with the package (morphcache/model/trained_weights/<name>.npz + .json).

``load_trained("gdn-hybrid")`` / ``load_trained("hybrid")`` return a HybridModel of the named
configuration with the weights ``python -m morphcache.training --model <name>`` produced; the
JSON beside them records how (the training spec, the corpus digest, the held-out loss).
Seeded random weights stay the default of ``HybridModel(config, seed)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from morphcache.model.config import model_config
from morphcache.model.hybrid import HybridModel

WEIGHTS_DIR = Path(__file__).resolve().parent / "trained_weights"


@dataclass(frozen=True)
class TrainedWeights:
    """Where a model's trained weights are and what their record says."""

    name: str
    weights: Path
    record: dict[str, Any]

    @property
    def held_out_loss(self) -> float:
        return float(self.record["held_out_loss"])


def trained_weights(name: str, directory: Path | None = None) -> TrainedWeights:
    """The record of the shipped weights of model `name`; ValueError if there are none."""
    base = directory if directory is not None else WEIGHTS_DIR
    model_config(name)  # unknown names fail here with the list of known ones
    weights, record = base / f"{name}.npz", base / f"{name}.json"
    if not weights.is_file() or not record.is_file():
        raise ValueError(f"no trained weights for {name!r} in {base}")
    return TrainedWeights(name, weights, json.loads(record.read_text()))


def save_trained(model: HybridModel, name: str, record: dict[str, Any], directory: Path | None = None) -> Path:
    """Write the model's weights (float32 npz) and its record (JSON); returns the npz path."""
    base = directory if directory is not None else WEIGHTS_DIR
    base.mkdir(parents=True, exist_ok=True)
    arrays = {key: value.detach().cpu().numpy() for key, value in model.state_dict().items()}
    path = base / f"{name}.npz"
    with path.open("wb") as f:
        np.savez_compressed(f, **arrays)
    (base / f"{name}.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return path


def load_trained(name: str, directory: Path | None = None, device: torch.device | None = None) -> HybridModel:
    """A HybridModel of configuration `name` carrying the shipped trained weights."""
    info = trained_weights(name, directory)
    model = HybridModel(model_config(name), seed=0)
    state = model.state_dict()
    with np.load(info.weights, allow_pickle=False) as arrays:
        if set(arrays.files) != set(state):
            raise ValueError(f"{info.weights}: weights do not match the {name!r} configuration")
        loaded = {key: torch.from_numpy(arrays[key].copy()) for key in arrays.files}
    for key, value in loaded.items():
        if value.shape != state[key].shape:
            want = tuple(state[key].shape)
            raise ValueError(f"{info.weights}: {key} has shape {tuple(value.shape)}, expected {want}")
    model.load_state_dict(loaded)
    return model.to(device) if device is not None else model
