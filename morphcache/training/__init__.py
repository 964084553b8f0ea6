"""Training of the reference models on the byte-level stdlib corpus (``python -m morphcache.training``)."""

from morphcache.training.corpus import Corpus, load_corpus
from morphcache.training.train import TOLERANCE, TrainResult, TrainSpec, held_out_loss, train

__all__ = ["TOLERANCE", "Corpus", "TrainResult", "TrainSpec", "held_out_loss", "load_corpus", "train"]
