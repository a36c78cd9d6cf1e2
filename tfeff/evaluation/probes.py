"""Feature-based evaluation: probes trained on frozen embedder outputs, and fine-tuning.

As in the continuous-output paper (Li et al., 2019, Section 5), representations
are compared by training small task models on frozen features. A probe is a
learned `ScalarMix` over an exported embedder's layers followed by a linear
layer or a small biLSTM, for token tagging (token accuracy and macro-F1 over
tags) and sentence classification (accuracy and macro-F1 over labels).
Features are computed once per embedder and task (`embed_tokens` for tagging,
so output token i is input token i; `embed` for sentences), then each probe is
trained with several seeds (`evaluate`); `table` reports mean ± standard
deviation. `fine_tune` instead trains the encoder of a model directory with
the classifier. `tfeff-evaluate` (`tfeff.bin.evaluate`) is the command line.
"""

import time

import keras
import numpy as np
import tensorflow as tf

from tfeff.evaluation.tasks import FormatError
from tfeff.evaluation.tasks import read_conll
from tfeff.evaluation.tasks import read_tsv
from tfeff.export import load_embedder
from tfeff.export import model_dir_embedder
from tfeff.layers import ScalarMix


def _pad_to(array, width, axis):
    pad = [(0, 0)] * array.ndim
    pad[axis] = (0, width - array.shape[axis])
    return np.pad(array, pad)


def token_features(embedder, sentences, batch_size=64):
    """`(layers [n, L+1, T, d], mask [n, T])` of pre-tokenized sentences, token-aligned."""
    fn = embedder.signatures["embed_tokens"]
    layers, masks = [], []
    for start in range(0, len(sentences), batch_size):
        batch = sentences[start:start + batch_size]
        width = max(len(s) for s in batch)
        rows = [list(s) + [""] * (width - len(s)) for s in batch]
        out = fn(tokens=tf.constant(rows))
        layers.append(out["layers"].numpy())
        masks.append(out["mask"].numpy())
    return _concat(layers, masks)


def sentence_features(embedder, sentences, batch_size=64):
    fn = embedder.signatures["embed"]
    layers, masks = [], []
    for start in range(0, len(sentences), batch_size):
        out = fn(sentences=tf.constant(sentences[start:start + batch_size]))
        layers.append(out["layers"].numpy())
        masks.append(out["mask"].numpy())
    return _concat(layers, masks)


def _concat(layers, masks):
    width = max(m.shape[1] for m in masks)
    return (np.concatenate([_pad_to(a, width, 2) for a in layers]).astype(np.float32),
            np.concatenate([_pad_to(m, width, 1) for m in masks]))


def build_probe(num_layers, dim, num_classes, kind="linear", per_token=True, hidden=64,
                layer_norm=True):
    """ScalarMix over the layers, then a linear layer or a biLSTM (+ masked mean pool)."""
    layers = keras.Input((num_layers, None, dim), name="layers")
    mask = keras.Input((None,), dtype="bool", name="mask")
    x = ScalarMix(num_layers, layer_norm=layer_norm, name="scalar_mix")(layers, mask=mask)
    if kind == "bilstm":
        x = keras.layers.Bidirectional(keras.layers.LSTM(hidden, return_sequences=True),
                                       name="bilstm")(x, mask=mask)
    elif kind != "linear":
        raise ValueError(f"Unknown probe {kind!r}: expected 'linear' or 'bilstm'")
    if not per_token:
        weights = keras.ops.cast(mask, x.dtype)[..., None]
        x = keras.ops.sum(x * weights, axis=1) / keras.ops.maximum(
            keras.ops.sum(weights, axis=1), 1.0)
    logits = keras.layers.Dense(num_classes, name="classifier")(x)
    return keras.Model({"layers": layers, "mask": mask}, logits)


def macro_f1(gold, predicted, num_classes):
    scores = []
    for c in range(num_classes):
        tp = np.sum((predicted == c) & (gold == c))
        fp = np.sum((predicted == c) & (gold != c))
        fn = np.sum((predicted != c) & (gold == c))
        if tp + fp + fn == 0:
            continue  # a class absent from both gold and predictions
        scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores))


def train_probe(train, test, num_classes, per_token, kind="linear", seed=0, epochs=10,
                batch_size=32, learning_rate=1e-2):
    """Trains one probe; returns `{"accuracy", "macro_f1"}` on `test`.

    `train`/`test` are `(layers, mask, labels)`; for tagging `labels` is
    `[n, T]` with -1 where there is no token to score.
    """
    keras.utils.set_random_seed(seed)
    (x_tr, m_tr, y_tr), (x_te, m_te, y_te) = train, test
    model = build_probe(x_tr.shape[1], x_tr.shape[3], num_classes, kind, per_token)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                  ignore_class=-1))
    model.fit({"layers": x_tr, "mask": m_tr}, y_tr, batch_size=batch_size, epochs=epochs,
              shuffle=True, verbose=0)
    logits = model.predict({"layers": x_te, "mask": m_te}, batch_size=256, verbose=0)
    predicted = logits.argmax(-1)
    keep = y_te >= 0
    gold, predicted = y_te[keep], predicted[keep]
    return {"accuracy": float(np.mean(gold == predicted)),
            "macro_f1": macro_f1(gold, predicted, num_classes)}


def fine_tune(model_dir, train, test, num_classes, seed=0, epochs=3, batch_size=32,
              learning_rate=1e-3, log=None, module=None):
    """Fine-tunes a pre-trained encoder with a sentence classifier; `{"accuracy", "macro_f1"}`.

    Unlike the probes, the encoder is not frozen: the model directory's latest
    checkpoint is restored (`tfeff.export.model_dir_embedder`, the module an
    export would write), and a `ScalarMix` over its layers, a masked mean pool
    and a linear classifier are trained together with every trainable weight
    of the encoder, as GLUE fine-tuning does (dropout off; the fixed fastText
    input of ELMo-C stays fixed). `train`/`test` are `[(label_index, sentence)]`;
    `module` is the directory's module if the caller has already built it
    (it is trained in place).
    """
    keras.utils.set_random_seed(seed)
    if module is None:
        module, _, _ = model_dir_embedder(model_dir)
    mix = ScalarMix(module.num_layers, layer_norm=True, name="scalar_mix")
    head = keras.layers.Dense(num_classes, name="classifier")
    optimizer = keras.optimizers.Adam(learning_rate)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def logits_of(sentences):
        out = module.embed(sentences)
        x = mix(out["layers"], mask=out["mask"])
        weights = tf.cast(out["mask"], x.dtype)[..., None]
        pooled = tf.reduce_sum(x * weights, 1) / tf.maximum(tf.reduce_sum(weights, 1), 1.0)
        return head(pooled)

    logits_of(tf.constant([s for _, s in train[:2]]))  # builds the head
    variables = module.model.trainable_variables + mix.trainable_variables + \
        head.trainable_variables

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string),
                                  tf.TensorSpec([None], tf.int64)])
    def step(sentences, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, logits_of(sentences))
        grads = tape.gradient(loss, variables)
        # Output layers (softmax, MLM head) get no gradient from the classifier.
        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        optimizer.apply([g for g, _ in pairs], [v for _, v in pairs])
        return loss

    predict = tf.function(logits_of, input_signature=[tf.TensorSpec([None], tf.string)])
    rng = np.random.default_rng(seed)
    sentences = np.array([s for _, s in train], dtype=object)
    labels = np.array([y for y, _ in train], np.int64)
    for epoch in range(epochs):
        order = rng.permutation(len(train))
        losses = [float(step(tf.constant(list(sentences[idx])), tf.constant(labels[idx])))
                  for idx in np.array_split(order, max(1, len(order) // batch_size))]
        if log:
            log(f"  fine-tune epoch {epoch + 1}: loss {np.mean(losses):.4f}")
    predicted = np.concatenate([
        predict(tf.constant([s for _, s in test[b:b + 256]])).numpy().argmax(-1)
        for b in range(0, len(test), 256)])
    gold = np.array([y for y, _ in test])
    return {"accuracy": float(np.mean(gold == predicted)),
            "macro_f1": macro_f1(gold, predicted, num_classes)}


def tagging_data(embedder, sentences, tag_index):
    """Features and labels `[n, T]` (-1 where a token is not scored or has no vector)."""
    layers, mask = token_features(embedder, [tokens for tokens, _ in sentences])
    labels = np.full(mask.shape, -1, np.int64)
    for i, (tokens, tags) in enumerate(sentences):
        ids = [tag_index[t] for t in tags]
        labels[i, :len(ids)] = ids
    labels[~mask] = -1
    return layers, mask, labels


def standardize(data):
    """Scales every (layer, dimension) to zero mean and unit variance over the training
    tokens (the same statistics for test). fastText vectors trained briefly share one
    dominant direction that would otherwise swamp a linear probe."""
    (x_tr, m_tr, y_tr), (x_te, m_te, y_te) = data
    tokens = x_tr.transpose(0, 2, 1, 3)[m_tr]  # (tokens, layers, dim)
    mean = tokens.mean(axis=0)[None, :, None, :]
    std = tokens.std(axis=0)[None, :, None, :] + 1e-6

    def scale(x, m):
        return ((x - mean) / std * m[:, None, :, None]).astype(np.float32)

    return [(scale(x_tr, m_tr), m_tr, y_tr), (scale(x_te, m_te), m_te, y_te)]


def evaluate(embedders, tasks, probes=("linear",), seeds=(0, 1, 2), epochs=10, log=print):
    """Every (task, embedder, probe) over `seeds`.

    Args:
        embedders: `{name: path}` of exported embedders.
        tasks: `{name: ("tagging", train, test, tag_column) | ("classification", train, test)}`.

    Returns:
        A list of result rows `{task, embedder, probe, accuracy: [..], macro_f1: [..]}`.
    """
    loaded = {name: load_embedder(path) for name, path in embedders.items()}
    rows = []
    for task_name, spec in tasks.items():
        if spec[0] == "tagging":
            train, test = read_conll(spec[1], spec[3]), read_conll(spec[2], spec[3])
            classes = sorted({t for _, tags in train for t in tags})
            index = {t: i for i, t in enumerate(classes)}
            unknown = sorted({t for _, tags in test for t in tags} - set(index))
            if unknown:
                raise FormatError(f"{spec[2]}: tags not in the training file: {unknown}")
        else:
            train, test = read_tsv(spec[1]), read_tsv(spec[2])
            classes = sorted({label for label, _ in train})
            index = {c: i for i, c in enumerate(classes)}
            unknown = sorted({label for label, _ in test} - set(index))
            if unknown:
                raise FormatError(f"{spec[2]}: labels not in the training file: {unknown}")
        for name, embedder in loaded.items():
            t0 = time.time()
            if spec[0] == "tagging":
                data = [tagging_data(embedder, part, index) for part in (train, test)]
            else:
                data = []
                for part in (train, test):
                    layers, mask = sentence_features(embedder, [s for _, s in part])
                    data.append((layers, mask, np.array([index[lb] for lb, _ in part])))
            data = standardize(data)
            for probe in probes:
                scores = [train_probe(data[0], data[1], len(classes), spec[0] == "tagging",
                                      probe, seed, epochs) for seed in seeds]
                row = {"task": task_name, "embedder": name, "probe": probe,
                       "accuracy": [s["accuracy"] for s in scores],
                       "macro_f1": [s["macro_f1"] for s in scores]}
                rows.append(row)
                log(f"{task_name:>12} {name:>14} {probe:>7}: accuracy "
                    f"{_mean_std(row['accuracy'])}  macro-F1 {_mean_std(row['macro_f1'])}"
                    f"  ({time.time() - t0:.0f}s)")
    return rows


def _mean_std(values):
    v = 100 * np.asarray(values)
    return f"{v.mean():.1f} ± {v.std(ddof=1) if len(v) > 1 else 0.0:.1f}"


def table(rows, seeds):
    """Markdown: one row per embedder (and probe), accuracy / macro-F1 columns per task."""
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    keys = list(dict.fromkeys((r["embedder"], r["probe"]) for r in rows))
    by = {(r["task"], r["embedder"], r["probe"]): r for r in rows}
    header = "| features | probe | " + " | ".join(
        f"{t} acc | {t} macro-F1" for t in tasks) + " |"
    lines = [header, "|" + "---|" * (2 + 2 * len(tasks))]
    for embedder, probe in keys:
        cells = []
        for t in tasks:
            r = by.get((t, embedder, probe))
            cells += ([_mean_std(r["accuracy"]), _mean_std(r["macro_f1"])] if r else ["", ""])
        lines.append(f"| {embedder} | {probe} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Mean ± standard deviation over probe seeds {list(seeds)} (percent).")
    return "\n".join(lines) + "\n"
