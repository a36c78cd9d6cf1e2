"""Writes the saved models that `test_saved_models_load.py` loads: every public model as a
`.keras` file, three model directories (ELMo, BERT, Masked ELMo) of a two-step run, and
their outputs on fixed ids (`outputs.npz`).

The files in `saved/` were written by this script with tfeff 0.1.0 as it was before its
models were split into backbones and tasks; they are kept as they are. The script calls
that version's constructors (`Bert(vocabulary_size, num_layers=...)`, before a task took
its backbone) and runs with it installed only; rerunning it with a later tfeff would only
test that version against itself.

    python tests/compat/write_saved_models.py tests/compat/saved
"""
import os
import shutil
import sys

import keras
import numpy as np

from tfeff.config import load_config
from tfeff.models import Bert, ElmoLM, MaskedElmo, MaskedElmoBackbone, TransformerLM
from tfeff.training import pretrain
from tfeff.training import restore_model

out = os.path.abspath(sys.argv[1])
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(0)
table = rng.normal(size=(20, 6)).astype("float32")
table[:2] = 0
np.save(os.path.join(out, "vectors.npy"), table)
os.chdir(out)  # the models keep the table's path: relative, beside them
ids = np.array([[2, 5, 7, 9, 3, 0], [2, 11, 4, 3, 0, 0]], "int32")
alone = {"intermediate_dim": 8, "seed": 1, "dropout_rate": 0.0}
models = {
    "elmo_continuous": lambda: ElmoLM(embedding_table="vectors.npy", num_layers=2, units=8,
                                      projection_dim=4, dropout_rate=0.0),
    "elmo_adaptive": lambda: ElmoLM(embedding_table="vectors.npy", num_layers=1, units=8,
                                    projection_dim=4, dropout_rate=0.0, output_layer="adaptive",
                                    adaptive_cutoffs=[8, 14], adaptive_div_value=2.0),
    "elmo_alone_tied": lambda: ElmoLM(20, num_layers=1, units=8, projection_dim=4,
                                      dropout_rate=0.0, output_layer="full",
                                      input_embedding="alone", embedding_dim=6,
                                      tie_output=True, alone=alone),
    "transformer_lm_anchors": lambda: TransformerLM(
        20, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16,
        max_sequence_length=8, dropout_rate=0.0, num_anchors=2, input_embedding="trainable",
        output_layer="full"),
    "bert_nsp": lambda: Bert(20, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16,
                             max_sequence_length=8, dropout_rate=0.0, use_nsp=True),
    "bert_relaxed": lambda: Bert(20, num_layers=1, hidden_dim=8, num_heads=2,
                                 intermediate_dim=16, max_sequence_length=8, dropout_rate=0.0,
                                 relaxed={"num_anchors": 2, "ffn_rank": 2}),
    "masked_elmo": lambda: MaskedElmo(20, num_layers=2, units=8, projection_dim=3,
                                      dropout_rate=0.0, use_cudnn=False),
    "masked_elmo_backbone": lambda: MaskedElmoBackbone(20, num_layers=2, units=8,
                                                       projection_dim=3, dropout_rate=0.0,
                                                       use_cudnn=False),
}
manifest = {}
for name, make in models.items():
    keras.utils.set_random_seed(0)
    model = make()
    if name.startswith("bert"):
        x = {"token_ids": ids, "segment_ids": np.zeros_like(ids),
             "padding_mask": ids > 0, "masked_positions": np.array([[1, 2], [1, 2]], "int32")}
    elif name == "masked_elmo":
        x = None
    else:
        x = ids
    print(name, type(model).__name__)
    manifest[name] = type(model).__name__


def inputs(name):
    if name.startswith("bert"):
        return {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": ids > 0,
                "masked_positions": np.array([[1, 2], [1, 2]], "int32")}
    if name == "masked_elmo":
        return {"token_ids": ids, "padding_mask": ids > 0,
                "masked_positions": np.array([[1, 2], [1, 2]], "int32")}
    if name == "masked_elmo_backbone":
        return {"token_ids": ids, "padding_mask": ids > 0}
    return ids


arrays = {}


def record(name, outputs):
    """Keeps a model's outputs (a list output as one array per entry) under its name."""
    for key, value in sorted(outputs.items()):
        if isinstance(value, (list, tuple)):
            arrays.update({f"{name}/{key}/{i}": keras.ops.convert_to_numpy(v)
                           for i, v in enumerate(value)})
        else:
            arrays[f"{name}/{key}"] = keras.ops.convert_to_numpy(value)


for name, make in models.items():
    keras.utils.set_random_seed(0)
    model = make()
    x = inputs(name)
    y = model(x, training=False)
    model.save(os.path.join(out, f"{name}.keras"))
    record(name, y)

# Model directories of a few steps, for `restore_model` (the checkpoint's variable paths).

SYNTHETIC = ["data.synthetic.num_train_sentences=200", "data.synthetic.num_heldout_sentences=20",
             "data.synthetic.lexicon_size=60", "data.max_sequence_length=12",
             "data.batch_size=4", "train.steps=2", "train.warmup_steps=1",
             "train.checkpoint_every=2", "train.validation_steps=0"]
RUNS = {
    "elmo_dir": ("demo_elmo_c", ["model.units=8", "model.projection_dim=4", "fasttext.dim=6",
                                 "fasttext.epoch=1", "eval.max_targets=20"]),
    "bert_dir": ("demo_bert", ["model.num_layers=1", "model.hidden_dim=8", "model.num_heads=2",
                               "model.intermediate_dim=16", "data.wordpiece_vocabulary_size=120",
                               "data.max_predictions_per_seq=2", "eval.max_batches=1"]),
    "masked_elmo_dir": ("demo_masked_elmo", [
        "model.units=8", "model.projection_dim=3", "model.num_layers=1",
        "data.wordpiece_vocabulary_size=120", "data.max_predictions_per_seq=2",
        "model.mask_accumulation=2", "model.use_cudnn=false", "eval.max_batches=1",
        "data.synthetic.paragraph_sentences=4"]),
}

for name, (demo, overrides) in RUNS.items():
    config = load_config(os.path.join(REPO, "configs", f"{demo}.yaml"), SYNTHETIC + overrides)
    model_dir = os.path.join(out, name)
    pretrain(config, model_dir, verbose=0)
    # What restoring needs; the rest (corpus, logs, fastText, the lock) is left out.
    for extra in ("logs", "corpus", ".tfeff-lock", "fasttext.bin", "wordpiece_corpus.txt"):
        path = os.path.join(model_dir, extra)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
    model = restore_model(model_dir)[0]
    kind = {"elmo_dir": "elmo", "bert_dir": "bert", "masked_elmo_dir": "masked_elmo"}[name]
    y = model(inputs(kind), training=False)
    record(name, y)
np.savez_compressed(os.path.join(out, "outputs.npz"), **arrays)
