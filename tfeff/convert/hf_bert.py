"""Hugging Face BERT layout: `config.json` + `model.safetensors` (+ the tokenizer's files).

`write_hf_bert(bert, directory)` writes what `transformers.BertForPreTraining
.from_pretrained(directory)` loads (a rotary `Bert`: what
`RoFormerForMaskedLM.from_pretrained` loads, `tfeff.convert.hf_roformer`);
`read_hf_bert(directory)` builds a tfeff `Bert` from a BERT directory
(`BertForPreTraining`, `BertForMaskedLM` or a bare `BertModel`), so a BERT
trained elsewhere can be continued with `tfeff-pretrain`.

Parameter names and shapes (PyTorch `Linear` weights are `(out, in)`, the
transpose of Keras kernels; d = hidden, f = intermediate, V = vocabulary):

| Hugging Face name | shape | tfeff weight |
|---|---|---|
| `bert.embeddings.word_embeddings.weight` | (V, d) | `token_embedding/embeddings` |
| `bert.embeddings.position_embeddings.weight` | (n, d) | `position_embedding/embeddings` |
| `bert.embeddings.token_type_embeddings.weight` | (2, d) | `segment_embedding/embeddings` |
| `bert.embeddings.LayerNorm.{weight,bias}` | (d,) | `embeddings_norm/{gamma,beta}` |
| `bert.encoder.layer.{i}.attention.self.{query,key,value}.weight` | (d, d) | `self_attention/{query,key,value}/kernel` (d, h, d/h) |
| `bert.encoder.layer.{i}.attention.self.{query,key,value}.bias` | (d,) | `.../bias` (h, d/h) |
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

An ALONE input embedding is written as its computed table (the vectors the
model uses at inference); read back, it is an ordinary trainable embedding.

The weights file is read and written with the format's own `safetensors`
package (`pip install -e '.[hf]'`): memory-mapped reads and its checked
header; BF16 tensors are widened to float32 on reading.
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
    """`(hf name, tfeff variable, to_hf, from_hf)` for every tensor of a standard Bert
    (the position table only with learned positions)."""
    backbone = bert.backbone
    d = backbone.hidden_dim
    t = (lambda w: w.T, lambda w: w.T)
    same = (lambda w: w, lambda w: w)
    out = []

    def norm(hf, layer):
        out.append((f"{hf}.weight", layer.gamma, *same))
        out.append((f"{hf}.bias", layer.beta, *same))

    def dense(hf, layer):
        out.append((f"{hf}.weight", layer.kernel, *t))
        out.append((f"{hf}.bias", layer.bias, *same))

    e = "bert.embeddings"
    out.append((f"{e}.word_embeddings.weight", None, *same))  # filled from the layer
    if backbone.position_embedding is not None:
        out.append((f"{e}.position_embeddings.weight", backbone.position_embedding.embeddings,
                    *same))
    out.append((f"{e}.token_type_embeddings.weight", backbone.segment_embedding.embeddings,
                *same))
    norm(f"{e}.LayerNorm", backbone.embeddings_norm)
    for i, layer in enumerate(backbone.transformer_layers):
        p = f"bert.encoder.layer.{i}"
        att = layer.self_attention
        for name, sub in (("query", att.query_dense), ("key", att.key_dense),
                          ("value", att.value_dense)):
            shape = tuple(sub.kernel.shape)
            out.append((f"{p}.attention.self.{name}.weight", sub.kernel,
                        lambda w: w.reshape(d, -1).T,
                        lambda w, s=shape: w.T.reshape(s)))
            bshape = tuple(sub.bias.shape)
            out.append((f"{p}.attention.self.{name}.bias", sub.bias,
                        lambda w: w.reshape(-1), lambda w, s=bshape: w.reshape(s)))
        o = att.output_dense
        oshape = tuple(o.kernel.shape)
        out.append((f"{p}.attention.output.dense.weight", o.kernel,
                    lambda w: w.reshape(-1, w.shape[-1]).T,
                    lambda w, s=oshape: w.T.reshape(s)))
        out.append((f"{p}.attention.output.dense.bias", o.bias, *same))
        norm(f"{p}.attention.output.LayerNorm", layer.attention_norm)
        dense(f"{p}.intermediate.dense", layer.intermediate_dense)
        dense(f"{p}.output.dense", layer.output_dense)
        norm(f"{p}.output.LayerNorm", layer.output_norm)
    if bert.use_nsp:
        dense("bert.pooler.dense", bert.pooler)
        dense("cls.seq_relationship", bert.nsp_dense)
    dense("cls.predictions.transform.dense", bert.mlm_dense)
    norm("cls.predictions.transform.LayerNorm", bert.mlm_norm)
    out.append(("cls.predictions.bias", bert.mlm_bias, *same))
    return out


def hf_config(bert):
    """The Hugging Face `config.json` of a tfeff `Bert`.

    Args:
        bert: a standard tfeff `Bert`.

    Returns:
        The dict that `write_hf_bert` writes as `config.json`
        (`BertForPreTraining`, `hidden_act` from `bert.backbone.activation`; with rotary
        positions `RoFormerForMaskedLM`'s, `hf_roformer.roformer_config`).
    """
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
    `tokenizer_config.json` (BERT's tokenizer class, the model's length, and the
    casing of tfeff's tokenizer: without it `AutoTokenizer` lower-cases, splitting a
    cased vocabulary's "European" into `e ##ur ##op ##ea ##n`) and
    `special_tokens_map.json` (BERT's names of the reserved ids 0-4).

    Args:
        bert: the `Bert` whose vocabulary is written.
        lower_case: whether tfeff's tokenizer lower-cased and stripped accents
            (`data.lower_case`); Hugging Face's `do_lower_case` does both.
    """
    pad, unk, cls, sep, mask = BERT_RESERVED_NAMES
    special = {"pad_token": pad, "unk_token": unk, "cls_token": cls, "sep_token": sep,
               "mask_token": mask}
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": bool(lower_case),
              "strip_accents": None, "tokenize_chinese_chars": True,
              "model_max_length": bert.backbone.max_sequence_length,
              "clean_up_tokenization_spaces": False, **special}
    return {TOKENIZER_CONFIG_FILE: config, SPECIAL_TOKENS_FILE: special}


def _not_hf_bert(path):
    """None when `path` holds what `write_hf_bert` writes and nothing else."""
    if not os.path.isdir(path):
        return "a file, not a directory"
    names = set(os.listdir(path))
    # Visible names first (a model directory's own hidden files say less).
    other = sorted(names - _WRITTEN,
                   key=lambda name: (name.startswith("."), name))
    if other:
        return f"it holds {', '.join(other[:5])}, which write_hf_bert does not write"
    if not {CONFIG_FILE, WEIGHTS_FILE} <= names:
        return f"it lacks {CONFIG_FILE} or {WEIGHTS_FILE}"
    return None


def bert_vocabulary(vocabulary_path, vocabulary_size):
    """`(tokens, problem)`: a tfeff BERT vocabulary's tokens in id order, the reserved ones
    under BERT's names (`[PAD] [UNK] [CLS] [SEP] [MASK]`), and None; or None and what is
    wrong with the file (not a BERT vocabulary, another size than the model's, or an
    ordinary token that would become a second reserved one)."""
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
    rotary positions.

    A `Bert` with learned positions is written in the layout of
    `transformers.BertForPreTraining`; one with rotary positions
    (`position_embedding="rotary"`) in that of `transformers.RoFormerForMaskedLM`,
    which rotates queries and keys as tfeff does (`tfeff.convert.hf_roformer`: the
    same tensors, query and key features reordered, no pooler or next-sentence head).

    Args:
        bert: a built standard (not relaxed) `Bert`; convert a relaxed one
            with `merge_relaxed_bert` first.
        directory: output directory (written to a temporary sibling, then
            renamed: `tfeff.convert.staging`); its modes follow the umask, as
            any directory and file the process creates.
        vocabulary_path: optional tfeff vocabulary file, written as
            `vocab.txt` with BERT's names for the reserved tokens, with the
            tokenizer files `AutoTokenizer.from_pretrained(directory)` reads
            (`tokenizer_files`).
        overwrite: replace an existing directory that `write_hf_bert` wrote
            (nothing else: see `tfeff.data.files.check_output`).
        lower_case: the model was trained on lower-cased, accent-stripped text
            (`data.lower_case`): the tokenizer files say so.

    Returns:
        `directory`.

    A `directory` that is, contains or lies inside `vocabulary_path` raises a
    ValueError naming both; an existing `directory` without `overwrite`, or
    one holding other files than `write_hf_bert` writes, a FileExistsError;
    all before anything is written. Without the `safetensors` package an
    ImportError says how to install it (`pip install -e '.[hf]'`).

    Raises:
        ValueError: `bert` is relaxed, rotates with another base than
            RoFormer's 10000, or `vocabulary_path` is not a BERT vocabulary of the
            model's size.
    """
    backbone = bert.backbone
    if backbone.is_relaxed:
        raise ValueError("write_hf_bert needs a standard Bert: convert the relaxed model with "
                         "tfeff.convert.merge_relaxed_bert first.")
    rotary = backbone.position_embedding_type == "rotary"
    head_dim = backbone.hidden_dim // backbone.num_heads
    if rotary:
        for layer in backbone.transformer_layers:
            wavelength = layer.self_attention.max_wavelength
            if wavelength != hf_roformer.MAX_WAVELENGTH:
                raise ValueError(
                    f"write_hf_bert writes a rotary Bert as Hugging Face's RoFormer, whose "
                    f"rotary base is {hf_roformer.MAX_WAVELENGTH}; {layer.name} rotates with "
                    f"max_wavelength={wavelength}.")
    recheck = files.check_output(
        directory, {"vocabulary file (vocabulary_path)": vocabulary_path},
        overwrite=overwrite, kind="a Hugging Face BERT directory", foreign=_not_hf_bert)
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
        if variable is None:
            if backbone.input_embedding == "alone":
                logging.info("Writing the ALONE embedding as its computed table")
                value = _np(backbone.token_embedding.embedding_table(training=False))
            else:
                value = _np(backbone.token_embedding.embeddings)
        else:
            value = _np(variable)
        tensors[name] = np.ascontiguousarray(to_hf(value))
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
    """Reads every tensor of a safetensors file.

    Args:
        path: the safetensors file.

    Returns:
        `{name: NumPy array}`; BF16 tensors are widened to float32.

    Raises:
        ValueError: `path` is not a readable safetensors file (truncated, bad
            header); the message names the file.
    """
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

    Every tensor of the file must be used (tied copies and buffers aside)
    and every shape must match; a checkpoint without the pretraining heads
    (a bare `BertModel`) gets freshly initialized heads, which is logged.

    Args:
        directory: a Hugging Face BERT directory (`config.json` and
            `model.safetensors`), e.g. one `write_hf_bert` wrote or a
            `BertForMaskedLM` saved with `save_pretrained`.
        name: the name of the returned model.

    Returns:
        The built tfeff `Bert` (with NSP when the file holds
        `cls.seq_relationship`).

    Raises:
        FileNotFoundError: `directory` lacks `config.json` or `model.safetensors`.
        ValueError: another `model_type`, a `position_embedding_type` other than
            `absolute`, an unsupported `hidden_act`, an unreadable weights
            file, or a missing, misshapen or unused tensor (naming the file and
            tensor).
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
    """Why `model_dir` (its `config`) does not hold a standard BERT with learned
    positions (or rotary ones, where `rotary`), which `what` (e.g. "keras-hub presets")
    are written from and `holder` (e.g. "keras-hub's BertBackbone") can hold, naming
    the config key; or None."""
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
    """Writes the standard BERT of a model directory as a Hugging Face directory: the
    weights and `config.json` (`write_hf_bert`: BERT's layout, or RoFormer's for rotary
    positions), `vocab.txt` and the tokenizer files with the directory's
    `data.lower_case`, so that `transformers.AutoTokenizer.from_pretrained(directory)`
    tokenizes as tfeff did (but for a literal `<unk>`, which it splits: write `[UNK]` in
    its text) and `BertForPreTraining.from_pretrained(directory)` (rotary:
    `RoFormerForMaskedLM.from_pretrained(directory)`) computes what the tfeff model
    computes (`tfeff-convert-core --hf_dir`).

    Args:
        model_dir: a standard BERT model directory (`family: bert`), learned or rotary
            positions: a standard run, a two-phase CoRe run after its switch, or
            the output of `tfeff-convert-core --output_dir`.
        directory: the Hugging Face directory to write (see `write_hf_bert`).
        overwrite: replace an earlier such directory.

    Returns:
        The step of the checkpoint written.

    Raises:
        ConversionError: `model_dir` holds no standard BERT (the message names the
            config key and what to do).
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
    write_hf_bert(bert, directory,
                  os.path.join(model_dir, model_directory.VOCABULARY_FILE),
                  overwrite=overwrite, lower_case=config.data.lower_case)
    return step
