"""Data: corpora, vocabularies, fastText files, training and tables, tf.data pipelines."""

from tfeff.data.corpus import CorpusError
from tfeff.data.corpus import ResolvedFiles
from tfeff.data.corpus import paragraphs
from tfeff.data.corpus import resolve_files
from tfeff.data.corpus import text_lines
from tfeff.data.corpus import training_and_heldout_files
from tfeff.data.fasttext_files import WordVectors
from tfeff.data.fasttext_files import WordVectorsError
from tfeff.data.fasttext_files import check_fasttext_model
from tfeff.data.fasttext_files import check_word_vectors_file
from tfeff.data.fasttext_tables import compute_vocabulary_vectors
from tfeff.data.fasttext_tables import load_vocabulary_vectors
from tfeff.data.fasttext_tables import mean_path
from tfeff.data.fasttext_training import train_fasttext
from tfeff.data.lm_dataset import count_windows
from tfeff.data.lm_dataset import lines_to_windows
from tfeff.data.lm_dataset import lm_dataset
from tfeff.data.masked_elmo_dataset import masked_elmo_dataset
from tfeff.data.masked_elmo_dataset import tokenize_documents
from tfeff.data.mlm_dataset import learn_bert_vocabulary
from tfeff.data.mlm_dataset import mlm_dataset
from tfeff.data.mlm_dataset import token_counts
from tfeff.data.synthetic import synthetic_corpus
from tfeff.data.synthetic import synthetic_tasks
from tfeff.data.synthetic import write_synthetic_corpus
from tfeff.data.unknown_rate import check_unknown_rate
from tfeff.data.vocabulary import SPECIALS
from tfeff.data.vocabulary import Vocabulary
from tfeff.data.wordpiece import learn_wordpiece_vocabulary

__all__ = [
    "CorpusError",
    "ResolvedFiles",
    "SPECIALS",
    "Vocabulary",
    "WordVectors",
    "WordVectorsError",
    "check_fasttext_model",
    "check_unknown_rate",
    "check_word_vectors_file",
    "compute_vocabulary_vectors",
    "count_windows",
    "learn_bert_vocabulary",
    "learn_wordpiece_vocabulary",
    "lines_to_windows",
    "lm_dataset",
    "load_vocabulary_vectors",
    "masked_elmo_dataset",
    "mlm_dataset",
    "token_counts",
    "paragraphs",
    "resolve_files",
    "synthetic_corpus",
    "synthetic_tasks",
    "text_lines",
    "tokenize_documents",
    "train_fasttext",
    "training_and_heldout_files",
    "write_synthetic_corpus",
]
