"""Feature evaluations of exported embedders: task readers, probes, fine-tuning, tables."""

from tfeff.evaluation.probes import build_probe
from tfeff.evaluation.probes import evaluate
from tfeff.evaluation.probes import fine_tune
from tfeff.evaluation.probes import macro_f1
from tfeff.evaluation.probes import majority_baseline
from tfeff.evaluation.probes import sentence_features
from tfeff.evaluation.probes import standardize
from tfeff.evaluation.probes import table
from tfeff.evaluation.probes import tagging_data
from tfeff.evaluation.probes import token_features
from tfeff.evaluation.probes import train_probe
from tfeff.evaluation.probes import truncated_sentences
from tfeff.evaluation.tasks import FormatError
from tfeff.evaluation.tasks import Task
from tfeff.evaluation.tasks import check_split
from tfeff.evaluation.tasks import read_conll
from tfeff.evaluation.tasks import read_task
from tfeff.evaluation.tasks import read_tasks
from tfeff.evaluation.tasks import read_tsv

__all__ = [
    "FormatError",
    "Task",
    "build_probe",
    "check_split",
    "evaluate",
    "fine_tune",
    "macro_f1",
    "majority_baseline",
    "read_conll",
    "read_task",
    "read_tasks",
    "read_tsv",
    "sentence_features",
    "standardize",
    "table",
    "tagging_data",
    "token_features",
    "train_probe",
    "truncated_sentences",
]
