"""Hugging Face BERT layout: `config.json` + `model.safetensors` (+ the tokenizer's files).

`write_hf_bert` writes what `transformers.BertForPreTraining.from_pretrained` loads (rotary:
`RoFormerForMaskedLM`, `tfeff.convert.hf_roformer`); `read_hf_bert` builds a tfeff `Bert` from
a BERT directory (`BertForPreTraining`, `BertForMaskedLM` or a bare `BertModel`).

Parameter names and shapes (PyTorch `Linear` weights are `(out, in)`, the
transpose of Keras kernels; d = hidden, f = intermediate, V = vocabulary):

| Hugging Face name | shape | tfeff weight |
|---|---|---|
| `bert.embeddings.word_embeddings.weight` | (V, d) | `token_embedding/embeddings` |
| `bert.embeddings.position_embeddings.weight` | (n, d) | `position_embedding/embeddings` |
| `bert.embeddings.token_type_embeddings.weight` | (2, d) | `segment_embedding/embeddings` |
| `bert.embeddings.LayerNorm.{weight,bias}` | (d,) | `embeddings_norm/{gamma,beta}` |
| `bert.encoder.layer.{i}.attention.self.{query,key,value}.{weight,bias}` | (d, d), (d,) | `self_attention/{query,key,value}/{kernel (d, h, d/h), bias (h, d/h)}` |
| `bert.encoder.layer.{i}.attention.output.dense.{weight,bias}` | (d, d), (d,) | `self_attention/attention_output/{kernel (h, d/h, d), bias}` |
| `bert.encoder.layer.{i}.attention.output.LayerNorm.{weight,bias}` | (d,) | `attention_norm` |
| `bert.encoder.layer.{i}.intermediate.dense.{weight,bias}` | (f, d), (f,) | `intermediate_dense` |
| `bert.encoder.layer.{i}.output.dense.{weight,bias}` | (d, f), (d,) | `output_dense` |
| `bert.encoder.layer.{i}.output.LayerNorm.{weight,bias}` | (d,) | `output_norm` |
| `bert.pooler.dense.{weight,bias}` | (d, d), (d,) | `pooler` (with NSP) |
| `cls.predictions.transform.dense.{weight,bias}` | (d, d), (d,) | `mlm_dense` |
| `cls.predictions.transform.LayerNorm.{weight,bias}` | (d,) | `mlm_norm` |
| `cls.predictions.bias` | (V,) | `mlm_bias` (the decoder is tied to the word embeddings) |
| `cls.seq_relationship.{weight,bias}` | (2, d), (2,) | `nsp_dense` (with NSP) |

An ALONE input embedding is written as its computed table. The weights file is read and
written with the `safetensors` package (`pip install -e '.[hf]'`); BF16 is read as float32.
"""

import json
import logging
import os

import keras
import numpy as np

from tfeff.convert import hf_roformer
from tfeff.convert.staging import follow_umask
from tfeff.convert.staging import staged_directory
from tfeff.data import files
from tfeff.data.vocabulary import BERT_RESERVED_NAMES
from tfeff.data.vocabulary import MASK
from tfeff.data.vocabulary import MASK_ID
from tfeff.data.vocabulary import Vocabulary
from tfeff.models import Bert
from tfeff.models import BertBackbone

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
VOCAB_FILE = "vocab.txt"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
_WRITTEN = {CONFIG_FILE, WEIGHTS_FILE, VOCAB_FILE, TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_FILE}
_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new", "relu": "relu"}
_FROM_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_approximate",
                        "gelu_pytorch_tanh": "gelu_approximate", "relu": "relu"}
# Tensors a reader may meet and safely ignore (tied copies, buffers).
_IGNORED = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias",
            "bert.embeddings.position_ids")


def _np(variable):
    return np.asarray(keras.ops.convert_to_numpy(variable), np.float32)


def _pairs(bert):
    """`(hf name, tfeff variable, to_hf, from_hf)` for every tensor of a standard Bert."""
    backbone = bert.backbone
    d = backbone.hidden_dim
    out = []

    def add(name, variable, to_hf=lambda w: w, from_hf=lambda w: w):
        out.append((name, variable, to_hf, from_hf))

    def norm(hf, layer):
        add(f"{hf}.weight", layer.gamma)
        add(f"{hf}.bias", layer.beta)

    def dense(hf, layer):
        add(f"{hf}.weight", layer.kernel, np.transpose, np.transpose)
        add(f"{hf}.bias", layer.bias)

    e = "bert.embeddings"
    add(f"{e}.word_embeddings.weight", None)  # filled from the layer
    if backbone.position_embedding is not None:
        add(f"{e}.position_embeddings.weight", backbone.position_embedding.embeddings)
    add(f"{e}.token_type_embeddings.weight", backbone.segment_embedding.embeddings)
    norm(f"{e}.LayerNorm", backbone.embeddings_norm)
    for i, layer in enumerate(backbone.transformer_layers):
        p = f"bert.encoder.layer.{i}"
        att = layer.self_attention
        for name, sub in (("query", att.query_dense), ("key", att.key_dense),
                          ("value", att.value_dense)):
            add(f"{p}.attention.self.{name}.weight", sub.kernel, lambda w: w.reshape(d, -1).T,
                lambda w, s=tuple(sub.kernel.shape): w.T.reshape(s))
            add(f"{p}.attention.self.{name}.bias", sub.bias, lambda w: w.reshape(-1),
                lambda w, s=tuple(sub.bias.shape): w.reshape(s))
        o = att.output_dense
        add(f"{p}.attention.output.dense.weight", o.kernel, lambda w: w.reshape(-1, d).T,
            lambda w, s=tuple(o.kernel.shape): w.T.reshape(s))
        add(f"{p}.attention.output.dense.bias", o.bias)
        norm(f"{p}.attention.output.LayerNorm", layer.attention_norm)
        dense(f"{p}.intermediate.dense", layer.intermediate_dense)
        dense(f"{p}.output.dense", layer.output_dense)
        norm(f"{p}.output.LayerNorm", layer.output_norm)
    if bert.use_nsp:
        dense("bert.pooler.dense", bert.pooler)
        dense("cls.seq_relationship", bert.nsp_dense)
    dense("cls.predictions.transform.dense", bert.mlm_dense)
    norm("cls.predictions.transform.LayerNorm", bert.mlm_norm)
    add("cls.predictions.bias", bert.mlm_bias)
    return out


def hf_config(bert):
    """The `config.json` dict of a standard tfeff `Bert`: `BertForPreTraining`'s, or with
    rotary positions `RoFormerForMaskedLM`'s (`hf_roformer.roformer_config`)."""
    backbone = bert.backbone
    config = {
        "architectures": ["BertForPreTraining"],
        "model_type": "bert",
        "vocab_size": backbone.vocabulary_size,
        "hidden_size": backbone.hidden_dim,
        "num_hidden_layers": backbone.num_layers,
        "num_attention_heads": backbone.num_heads,
        "intermediate_size": backbone.intermediate_dim,
        "hidden_act": _HF_ACTIVATIONS[backbone.activation],
        "hidden_dropout_prob": backbone.dropout_rate,
        "attention_probs_dropout_prob": backbone.dropout_rate,
        "max_position_embeddings": backbone.max_sequence_length,
        "type_vocab_size": backbone.num_segments,
        "initializer_range": backbone.initializer_range,
        "layer_norm_eps": backbone.layer_norm_epsilon,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
    }
    if backbone.position_embedding_type == "rotary":
        return hf_roformer.roformer_config(config)
    return config


def tokenizer_files(bert, lower_case):
    """`{file name: dict}` of the JSON files `transformers` reads beside `vocab.txt`:
    `tokenizer_config.json` (the casing of tfeff's tokenizer, `lower_case`: without it
    `AutoTokenizer` lower-cases a cased vocabulary) and `special_tokens_map.json`."""
    special = dict(zip(("pad_token", "unk_token", "cls_token", "sep_token", "mask_token"),
                       BERT_RESERVED_NAMES))
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": bool(lower_case),
              "strip_accents": None, "tokenize_chinese_chars": True,
              "model_max_length": bert.backbone.max_sequence_length,
              "clean_up_tokenization_spaces": False, **special}
    return {TOKENIZER_CONFIG_FILE: config, SPECIAL_TOKENS_FILE: special}


def _not_only(path, written, required, which):
    """None when the directory `path` holds only `written` names, `required` among them;
    else what it is instead (`"it holds X, which " + which`, ...)."""
    if not os.path.isdir(path):
        return "a file, not a directory"
    names = set(os.listdir(path))
    # Visible names first (a model directory's own hidden files say less).
    other = sorted(names - written, key=lambda name: (name.startswith("."), name))
    if other:
        return f"it holds {', '.join(other[:5])}, which {which}"
    if not required <= names:
        return f"it lacks {' or '.join(sorted(required))}"
    return None


def bert_vocabulary(vocabulary_path, vocabulary_size):
    """`(tokens, None)`: a tfeff BERT vocabulary's tokens in id order, the reserved ones under
    BERT's names (`[PAD] [UNK] [CLS] [SEP] [MASK]`); or `(None, what is wrong with it)`."""
    words = list(Vocabulary.load(vocabulary_path).words)
    if len(words) <= MASK_ID or words[MASK_ID] != MASK:
        return None, f"{vocabulary_path}: not a BERT vocabulary (id {MASK_ID} must be {MASK})"
    if len(words) != vocabulary_size:
        return None, (f"{vocabulary_path}: {len(words)} tokens, but the model has "
                      f"{vocabulary_size}")
    clash = sorted(set(words[len(BERT_RESERVED_NAMES):]) & set(BERT_RESERVED_NAMES))
    if clash:
        return None, f"{vocabulary_path}: the ordinary token {clash[0]} would be a second one"
    words[:len(BERT_RESERVED_NAMES)] = BERT_RESERVED_NAMES
    return words, None


def write_hf_bert(bert, directory, vocabulary_path=None, overwrite=False, lower_case=False):
    """Writes a standard `Bert` as a Hugging Face directory: BERT's, or RoFormer's for
    rotary positions (`tfeff.convert.hf_roformer`: no pooler or next-sentence head).

    Args:
        bert: a built standard (not relaxed: `merge_relaxed_bert` first) `Bert`.
        directory: output directory (staged and renamed: `tfeff.convert.staging`).
        vocabulary_path: optional tfeff vocabulary file, written as `vocab.txt` with BERT's
            names for the reserved tokens, and the tokenizer files (`tokenizer_files`).
        overwrite: replace a directory that `write_hf_bert` wrote (nothing else).
        lower_case: the model was trained on lower-cased, accent-stripped text
            (`data.lower_case`): the tokenizer files say so.

    Returns:
        `directory`.

    Before anything is written, a `directory` that is, contains or lies inside
    `vocabulary_path` raises a ValueError; an existing one without `overwrite`, or holding
    other files, a FileExistsError. Without `safetensors`, an ImportError says how to install.

    Raises:
        ValueError: `bert` is relaxed, rotates with another base than RoFormer's 10000, or
            `vocabulary_path` is not a BERT vocabulary of the model's size.
    """
    backbone = bert.backbone
    if backbone.is_relaxed:
        raise ValueError("write_hf_bert needs a standard Bert: convert the relaxed model with "
                         "tfeff.convert.merge_relaxed_bert first.")
    rotary = backbone.position_embedding_type == "rotary"
    head_dim = backbone.hidden_dim // backbone.num_heads
    for layer in backbone.transformer_layers if rotary else ():
        wavelength = layer.self_attention.max_wavelength
        if wavelength != hf_roformer.MAX_WAVELENGTH:
            raise ValueError(
                f"write_hf_bert writes a rotary Bert as Hugging Face's RoFormer, whose "
                f"rotary base is {hf_roformer.MAX_WAVELENGTH}; {layer.name} rotates with "
                f"max_wavelength={wavelength}.")
    recheck = files.check_output(
        directory, {"vocabulary file (vocabulary_path)": vocabulary_path},
        overwrite=overwrite, kind="a Hugging Face BERT directory",
        foreign=lambda path: _not_only(path, _WRITTEN, {CONFIG_FILE, WEIGHTS_FILE},
                                      "write_hf_bert does not write"))
    words = None
    if vocabulary_path:
        words, problem = bert_vocabulary(vocabulary_path, backbone.vocabulary_size)
        if problem:
            raise ValueError(problem)
    config = hf_config(bert)
    pairs = _pairs(bert)
    if rotary:
        pairs = hf_roformer.roformer_pairs(pairs, head_dim)
        if bert.use_nsp:
            logging.info("RoFormerForMaskedLM has no pooler or next-sentence head: "
                         "the model's are not written")
    tensors = {}
    for name, variable, to_hf, _ in pairs:
        if variable is None:  # the word embeddings
            if backbone.input_embedding == "alone":
                logging.info("Writing the ALONE embedding as its computed table")
                variable = backbone.token_embedding.embedding_table(training=False)
            else:
                variable = backbone.token_embedding.embeddings
        tensors[name] = np.ascontiguousarray(to_hf(_np(variable)))
    if rotary:
        tensors[hf_roformer.POSITIONS] = hf_roformer.sinusoidal_table(
            config["max_position_embeddings"], head_dim)
    with staged_directory(directory, "tfeff.convert.write_hf_bert") as tmp:
        weights = os.path.join(tmp, WEIGHTS_FILE)
        _safetensors().numpy.save_file(tensors, weights, metadata={"format": "pt"})
        follow_umask(weights, tmp)  # safetensors creates its file 0600
        with open(os.path.join(tmp, CONFIG_FILE), "w") as f:
            json.dump(config, f, indent=2)
        if words:
            with open(os.path.join(tmp, VOCAB_FILE), "w", encoding="utf-8") as f:
                f.write("".join(w + "\n" for w in words))
            for name, content in tokenizer_files(bert, lower_case).items():
                with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                    json.dump(content, f, indent=2)
        files.move_directory_into_place(tmp, directory, recheck)
    return directory


def _safetensors():
    try:
        import safetensors.numpy
    except ImportError as e:
        raise ImportError("The Hugging Face layout is read and written with the safetensors "
                          "package: pip install -e '.[hf]'") from e
    return safetensors


def read_weights(path):
    """`{name: NumPy array}` of a safetensors file, BF16 widened to float32 (ValueError
    naming `path` when it is not a readable safetensors file)."""
    safetensors = _safetensors()
    try:
        with safetensors.safe_open(os.fspath(path), framework="np") as f:
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    except safetensors.SafetensorError as e:
        raise ValueError(f"{path}: not a readable safetensors file ({e})") from e
    return {name: value.astype(np.float32) if value.dtype.name == "bfloat16" else value
            for name, value in tensors.items()}


def read_hf_bert(directory, name="bert"):
    """Builds a tfeff `Bert` from a Hugging Face BERT directory.

    Every tensor must be used (tied copies and buffers aside); a bare `BertModel` gets
    freshly initialized heads, which is logged.

    Args:
        directory: a Hugging Face BERT directory (`config.json`, `model.safetensors`).
        name: the name of the returned model.

    Returns:
        The built tfeff `Bert` (with NSP when the file holds `cls.seq_relationship`).

    Raises:
        FileNotFoundError: `directory` lacks `config.json` or `model.safetensors`.
        ValueError: another `model_type`, a `position_embedding_type` other than
            `absolute`, an unsupported `hidden_act`, an unreadable weights file, or a missing,
            misshapen or unused tensor (naming the file and tensor).
    """
    config_path = os.path.join(directory, CONFIG_FILE)
    weights_path = os.path.join(directory, WEIGHTS_FILE)
    for path in (config_path, weights_path):
        if not os.path.exists(path):
            raise FileNotFoundError(f"{directory} is not a Hugging Face BERT directory "
                                    f"(no {os.path.basename(path)})")
    with open(config_path) as f:
        cfg = json.load(f)
    if cfg.get("model_type", "bert") != "bert":
        raise ValueError(f"{config_path}: model_type {cfg.get('model_type')!r} is not bert")
    position_type = cfg.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"{config_path}: position_embedding_type {position_type!r} is not "
                         "supported (tfeff reads absolute position embeddings only)")
    act = cfg.get("hidden_act", "gelu")
    if act not in _FROM_HF_ACTIVATIONS:
        raise ValueError(f"{config_path}: unsupported hidden_act {act!r}")
    tensors = read_weights(weights_path)
    if not any(k.startswith("bert.") for k in tensors):  # a bare BertModel
        tensors = {(k if k.startswith("cls.") else "bert." + k): v for k, v in tensors.items()}
    bert = Bert(BertBackbone(
        cfg["vocab_size"], num_layers=cfg["num_hidden_layers"], hidden_dim=cfg["hidden_size"],
        num_heads=cfg["num_attention_heads"], intermediate_dim=cfg["intermediate_size"],
        max_sequence_length=cfg["max_position_embeddings"],
        num_segments=cfg.get("type_vocab_size", 2),
        dropout_rate=cfg.get("hidden_dropout_prob", 0.1), activation=_FROM_HF_ACTIVATIONS[act],
        layer_norm_epsilon=cfg.get("layer_norm_eps", 1e-12),
        initializer_range=cfg.get("initializer_range", 0.02), name=f"{name}_backbone",
    ), use_nsp="cls.seq_relationship.weight" in tensors, name=name)
    bert.build()
    used, fresh = set(), []
    for hf_name, variable, _, from_hf in _pairs(bert):
        variable = bert.backbone.token_embedding.embeddings if variable is None else variable
        if hf_name not in tensors:
            if hf_name.startswith("cls.") or hf_name.startswith("bert.pooler"):
                fresh.append(hf_name)
                continue
            raise ValueError(f"{weights_path}: missing tensor {hf_name}")
        value = from_hf(np.asarray(tensors[hf_name], np.float32))
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(f"{weights_path}: {hf_name} has shape "
                             f"{tuple(tensors[hf_name].shape)}, expected one that maps to "
                             f"{tuple(variable.shape)}")
        variable.assign(value)
        used.add(hf_name)
    unused = sorted(set(tensors) - used - set(_IGNORED))
    if unused:
        raise ValueError(f"{weights_path}: tensors not used by a tfeff Bert: {unused[:5]}")
    if fresh:
        logging.info("%s: no %s; those weights are freshly initialized", weights_path,
                     ", ".join(fresh))
    return bert


def standard_bert_problem(config, model_dir, what, holder, rotary=False):
    """Why `model_dir` holds no standard BERT with learned (or, with `rotary`, rotary)
    positions that `holder` can hold, naming the config key; or None."""
    from tfeff.training import checkpoints
    from tfeff.training import model_directory
    from tfeff.training.families import bert as bp

    where = os.path.join(model_dir, model_directory.CONFIG_FILE)
    if config.family != "bert":
        return (f"{where}: family {config.family!r}; {what} are written for BERT model "
                "directories only (family: bert)")
    if config.model.position_embedding != "learned" and not rotary:
        return (f"{where}: model.position_embedding is {config.model.position_embedding!r}; "
                f"{holder} has a learned absolute position table only "
                "(position_embedding: learned)")
    if bp.checkpoint_is_relaxed(config):
        return (f"{where}: model.relaxed is set, so {model_dir} holds CoRe's relaxed BERT, "
                f"whose anchor attention and factorized feed-forward layers {holder} does "
                f"not have; merge it first: tfeff-convert-core --model_dir {model_dir} "
                "--output_dir STANDARD, then convert STANDARD")
    if config.two_phase and not checkpoints.has_checkpoints(
            os.path.join(model_dir, model_directory.CHECKPOINT_DIR)):
        return (f"{model_dir} is a two-phase CoRe run (core.coarse_steps: "
                f"{config.core.coarse_steps}) that has not switched to the standard model yet: "
                "continue it past the switch, or merge its relaxed model with "
                f"tfeff-convert-core --model_dir {os.path.join(model_dir, bp.COARSE_DIR)} "
                "--output_dir STANDARD")
    return None


def write_hf_model_dir(model_dir, directory, overwrite=False):
    """Writes the standard BERT of a model directory as a Hugging Face directory
    (`tfeff-convert-core --hf_dir`): `write_hf_bert` with the directory's vocabulary and
    `data.lower_case`. See docs/guides/interop.md#hugging-face.

    Args:
        model_dir: a standard BERT model directory (`family: bert`): a standard run, a
            two-phase CoRe run after its switch, or `tfeff-convert-core --output_dir`'s.
        directory: the Hugging Face directory to write (see `write_hf_bert`).
        overwrite: replace an earlier such directory.

    Returns:
        The step of the checkpoint written.

    Raises:
        ConversionError: `model_dir` holds no standard BERT (naming the config key).
    """
    from tfeff.models.relaxed_merge import ConversionError
    from tfeff.training import model_directory
    from tfeff.training.families import bert as bp

    config = model_directory.load_model_dir_config(model_dir)
    problem = standard_bert_problem(config, model_dir, "Hugging Face directories",
                                    "Hugging Face's BERT (or RoFormer)", rotary=True)
    if problem:
        raise ConversionError(problem)
    bert, _, step, _ = bp.BERT.restore(model_dir, config)
    write_hf_bert(bert, directory, os.path.join(model_dir, model_directory.VOCABULARY_FILE),
                  overwrite=overwrite, lower_case=config.data.lower_case)
    return step
