"""Trained weights and their training script: the corpus split, a short deterministic run, and the
shipped weights of both models (they load, and they predict held-out Python far better than chance)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from morphcache.model import HybridModel
from morphcache.model.config import model_config
from morphcache.model.trained import load_trained, save_trained, trained_weights
from morphcache.training import TrainSpec, held_out_loss, load_corpus, train
from morphcache.training.corpus import HELD_OUT_EVERY


def _tree(root: Path) -> Path:
    (root / "pkg" / "tests").mkdir(parents=True)
    (root / "site-packages").mkdir()
    for i in range(HELD_OUT_EVERY + 2):
        (root / "pkg" / f"m{i:02d}.py").write_text(f"def f{i}(x):\n    return x * {i} + {i % 3}\n" * 40)
    (root / "pkg" / "tests" / "test_x.py").write_text("skipped\n")
    (root / "site-packages" / "y.py").write_text("skipped\n")
    (root / "_sysconfigdata_x.py").write_text("skipped\n")
    return root


def test_corpus_split_and_digest(tmp_path: Path) -> None:
    corpus = load_corpus(_tree(tmp_path))
    assert corpus.n_files == HELD_OUT_EVERY + 2
    assert b"skipped" not in corpus.train.tobytes() + corpus.held_out.tobytes()
    assert b"def f0(" in corpus.held_out.tobytes() and b"def f20(" in corpus.held_out.tobytes()
    assert b"def f1(" in corpus.train.tobytes() and b"def f0(" not in corpus.train.tobytes()
    assert load_corpus(tmp_path).sha256 == corpus.sha256
    (tmp_path / "pkg" / "m05.py").write_text("changed\n")
    assert load_corpus(tmp_path).sha256 != corpus.sha256
    with pytest.raises(ValueError, match="no corpus files"):
        load_corpus(tmp_path / "site-packages" / "nothing")


def test_short_training_run_is_deterministic_and_learns(tmp_path: Path) -> None:
    corpus = load_corpus(_tree(tmp_path))
    spec = TrainSpec(model="gdn-hybrid", steps=6, batch=2, seq_len=32, warmup=2, eval_windows=2, eval_len=32)
    threads = torch.get_num_threads()
    first, second = train(spec, corpus), train(spec, corpus)
    assert torch.get_num_threads() == threads and not torch.are_deterministic_algorithms_enabled()
    for (name, a), (_, b) in zip(first.model.state_dict().items(), second.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert first.held_out_loss == second.held_out_loss
    untrained = held_out_loss(HybridModel(model_config("gdn-hybrid"), seed=0), corpus, 2, 32)
    assert first.held_out_loss < untrained - 0.5
    save_trained(first.model, "gdn-hybrid", {"held_out_loss": first.held_out_loss}, tmp_path / "w")
    loaded = load_trained("gdn-hybrid", tmp_path / "w")
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), first.model.state_dict().values(),
                                                 strict=True))


@pytest.mark.parametrize("name", ["hybrid", "gdn-hybrid"])
def test_shipped_weights_predict_held_out_python(name: str) -> None:
    record = trained_weights(name).record
    assert record["model"] == name and len(record["corpus_sha256"]) == 64
    assert record["held_out_loss"] < 2.0
    corpus = load_corpus()
    trained = held_out_loss(load_trained(name), corpus, windows=4, length=256)
    random = held_out_loss(HybridModel(model_config(name), seed=0), corpus, windows=4, length=256)
    assert trained < 2.2 < math.log(256) - 0.5 < random


def test_missing_weights_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no trained weights for 'hybrid'"):
        trained_weights("hybrid", tmp_path)
    with pytest.raises(ValueError, match="unknown model"):
        load_trained("gpt")
