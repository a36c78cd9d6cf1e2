"""Training: strategies, optimizers and schedules, checkpoints, `pretrain(config)`."""

from tfeff.training.evaluation import target_ranks
from tfeff.training.evaluation import top_k_accuracy
from tfeff.training.evaluation import unigram_top_k_accuracy
from tfeff.training.families import FAMILIES
from tfeff.training.families import DataArtifacts
from tfeff.training.families import RestoredModel
from tfeff.training.families import get_family
from tfeff.training.optimizers import WarmupDecay
from tfeff.training.optimizers import make_optimizer
from tfeff.training.pretraining import build_model
from tfeff.training.pretraining import prepare_data
from tfeff.training.pretraining import pretrain
from tfeff.training.pretraining import restore_model
from tfeff.training.strategy import make_strategy

__all__ = [
    "DataArtifacts",
    "FAMILIES",
    "RestoredModel",
    "WarmupDecay",
    "build_model",
    "get_family",
    "make_optimizer",
    "make_strategy",
    "prepare_data",
    "pretrain",
    "restore_model",
    "target_ranks",
    "top_k_accuracy",
    "unigram_top_k_accuracy",
]
