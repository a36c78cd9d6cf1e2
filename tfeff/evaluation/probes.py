"""Feature-based evaluation: probes trained on frozen embedder outputs, and fine-tuning.

As in Li et al. (2019, Section 5), a probe is a learned `ScalarMix` over an exported
embedder's layers, then a linear layer or a small biLSTM, for token tagging and sentence
classification. See docs/papers/elmo-c.md#features; `tfeff-evaluate` is the command line.
"""

import collections
import time

import keras
import numpy as np
import tensorflow as tf

from tfeff.evaluation.tasks import check_split
from tfeff.evaluation.tasks import read_tasks
from tfeff.export import load_embedder
from tfeff.export import model_dir_embedder
from tfeff.export import read_metadata
from tfeff.layers import ScalarMix


def _pad_to(array, width, axis):
    pad = [(0, 0)] * array.ndim
    pad[axis] = (0, width - array.shape[axis])
    return np.pad(array, pad)


def token_features(embedder, sentences, batch_size=64):
    """`(layers [n, L+1, T, d], mask [n, T])` of pre-tokenized sentences: position `j`
    of a row is word `j` (`T` stops at the export's `max_tokens`; a word with no model
    token has a false mask).

    Raises:
        ValueError: `embed_tokens` does not return the given words one for one.
    """
    fn = embedder.signatures["embed_tokens"]
    layers, masks = [], []
    for start in range(0, len(sentences), batch_size):
        batch = sentences[start:start + batch_size]
        width = max(len(s) for s in batch)
        rows = [list(s) + [""] * (width - len(s)) for s in batch]
        out = fn(tokens=tf.constant(rows))
        _check_aligned(rows, out["tokens"].numpy(), start)
        layers.append(out["layers"].numpy())
        masks.append(out["mask"].numpy())
    return _concat(layers, masks)


def _check_aligned(rows, tokens, start):
    """ValueError unless each output token is the given word (a row may stop early)."""
    given = np.array([[w.encode("utf-8") for w in row] for row in rows], dtype=object)
    got = tokens.astype(object)
    width = max(given.shape[1], got.shape[1])
    given = np.pad(given, [(0, 0), (0, width - given.shape[1])], constant_values=b"")
    got = np.pad(got, [(0, 0), (0, width - got.shape[1])], constant_values=b"")
    wrong = np.argwhere((got != b"") & (got != given))
    if len(wrong):
        i, j = wrong[0]
        raise ValueError(
            f"the embedder's output token {j} of sentence {start + i + 1} is "
            f"{got[i, j].decode('utf-8', 'replace')!r}, not the given word "
            f"{given[i, j].decode('utf-8', 'replace')!r}: its outputs are not one per word "
            "(an export with subword_pooling='none' gives one per WordPiece), so tags cannot "
            "be aligned with them; export it with --subword_pooling first or mean")


def sentence_features(embedder, sentences, batch_size=64):
    fn = embedder.signatures["embed"]
    layers, masks = [], []
    for start in range(0, len(sentences), batch_size):
        out = fn(sentences=tf.constant(sentences[start:start + batch_size]))
        layers.append(out["layers"].numpy())
        masks.append(out["mask"].numpy())
    return _concat(layers, masks)


def truncated_sentences(embedder, sentences, batch_size=256):
    """How many of `sentences` the embedder cuts to its `max_tokens` (None: it won't say)."""
    if "tokenize" not in embedder.signatures:
        return None
    fn = embedder.signatures["tokenize"]
    count = 0
    for start in range(0, len(sentences), batch_size):
        out = fn(sentences=tf.constant(sentences[start:start + batch_size]))
        if "truncated" not in out:
            return None
        count += int(out["truncated"].numpy().sum())
    return count


def _concat(layers, masks):
    width = max(m.shape[1] for m in masks)
    return (np.concatenate([_pad_to(a, width, 2) for a in layers]).astype(np.float32),
            np.concatenate([_pad_to(m, width, 1) for m in masks]))


def build_probe(num_layers, dim, num_classes, kind="linear", per_token=True, hidden=64,
                layer_norm=True):
    """ScalarMix over the layers, then a linear layer or a biLSTM (+ masked mean pool)."""
    layers = keras.Input((num_layers, None, dim), name="layers")
    mask = keras.Input((None,), dtype="bool", name="mask")
    mix = ScalarMix(num_layers, layer_norm=layer_norm, name="scalar_mix")
    x = mix(layers, mask=mask)
    if num_layers == 1:
        # One layer (a fastText export): its softmax weight is always 1, nothing to learn.
        mix.layer_weights.trainable = False
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
    """Trains one probe; returns `{"accuracy", "macro_f1"}` on `test`. `train`/`test` are
    `(layers, mask, labels)`; tagging `labels` are `[n, T]`, -1 where nothing is scored."""
    keras.utils.set_random_seed(seed)
    (x_tr, m_tr, y_tr), (x_te, m_te, y_te) = train, test
    model = build_probe(x_tr.shape[1], x_tr.shape[3], num_classes, kind, per_token)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                  ignore_class=-1))
    model.fit({"layers": x_tr, "mask": m_tr}, y_tr, batch_size=batch_size, epochs=epochs,
              shuffle=True, verbose=0)
    predicted = _predict(model, x_te, m_te).argmax(-1)
    keep = y_te >= 0
    gold, predicted = y_te[keep], predicted[keep]
    return {"accuracy": float(np.mean(gold == predicted)),
            "macro_f1": macro_f1(gold, predicted, num_classes)}


def _predict(model, layers, mask, batch_size=256):
    """The logits of every row, called eagerly a batch at a time (`model.predict` would
    trace a new function per probe and seed: TensorFlow's excessive-retracing warning)."""
    return np.concatenate([
        keras.ops.convert_to_numpy(model({"layers": layers[b:b + batch_size],
                                          "mask": mask[b:b + batch_size]}, training=False))
        for b in range(0, len(layers), batch_size)])


def fine_tune(model_dir, train, test, num_classes, seed=0, epochs=3, batch_size=32,
              learning_rate=1e-3, log=None, module=None):
    """Fine-tunes a pre-trained encoder with a sentence classifier; `{"accuracy", "macro_f1"}`.

    The model directory's module (or `module`, trained in place) is trained with a
    `ScalarMix`, a masked mean pool and a linear classifier, as GLUE fine-tuning does.
    `train`/`test` are `[(label_index, sentence)]`.
    """
    check_split("fine-tuning", "the training examples", "the test examples", train, test,
                [y for y, _ in train], [y for y, _ in test],
                [tuple(s.split()) for _, s in train], [tuple(s.split()) for _, s in test])
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
    """Features and labels `[n, T]`, -1 for a token past the export's `max_tokens` or
    without a model token (`(labels >= 0).sum()` tokens are scored)."""
    layers, mask = token_features(embedder, [tokens for tokens, _ in sentences])
    labels = np.full(mask.shape, -1, np.int64)
    width = mask.shape[1]
    for i, (tokens, tags) in enumerate(sentences):
        ids = [tag_index[t] for t in tags[:width]]
        labels[i, :len(ids)] = ids
    labels[~mask] = -1
    return layers, mask, labels


def standardize(data):
    """Scales every (layer, dimension) to zero mean and unit variance over the training
    tokens (also for test): briefly trained fastText vectors share one dominant
    direction that would swamp a linear probe."""
    (x_tr, m_tr, y_tr), (x_te, m_te, y_te) = data
    tokens = x_tr.transpose(0, 2, 1, 3)[m_tr]  # (tokens, layers, dim)
    mean = tokens.mean(axis=0)[None, :, None, :]
    std = tokens.std(axis=0)[None, :, None, :] + 1e-6

    def scale(x, m):
        return ((x - mean) / std * m[:, None, :, None]).astype(np.float32)

    return [(scale(x_tr, m_tr), m_tr, y_tr), (scale(x_te, m_te), m_te, y_te)]


def evaluate(embedders, tasks, probes=("linear",), seeds=(0, 1, 2), epochs=10, log=print):
    """Every (task, embedder, probe) over `seeds`.

    Every task and export is checked before any embedder is loaded. Items an embedder
    gives no vector and sentences it cuts are logged and kept in the rows (`missing`).

    Args:
        embedders: `{name: path}` of exported embedders.
        tasks: `{name: spec}` (`read_task`), or `{name: Task}` already read.

    Returns:
        A list of rows `{task, embedder, probe, accuracy: [..], macro_f1: [..],
        missing: {unit, train: [lost, total], test: [lost, total], (truncated)},
        majority}`, `majority` as `majority_baseline`'s.

    Raises:
        ValueError (`FormatError` for a task file): naming the file and what is wrong.
    """
    tasks = read_tasks(tasks)
    for name, path in embedders.items():
        _check_embedder_fits(name, path, tasks)
    for task in tasks.values():
        if task.overlap:
            log(f"{task.name}: {task.overlap} of {len(task.test)} test sentences of "
                f"{task.test_path} are also in the training file {task.train_path}")
    loaded = {name: load_embedder(path) for name, path in embedders.items()}
    rows = []
    for task_name, task in tasks.items():
        majority = majority_baseline(task)
        for name, embedder in loaded.items():
            t0 = time.time()
            data, missing = _features(task, name, embedders[name], embedder)
            for part, word in (("train", "training"), ("test", "test")):
                lost, total = missing[part]
                if lost:
                    log(f"{task_name}: embedder {name} gives no vector to {lost} of {total} "
                        f"{word} {task.unit}{_MISSING_WHY[task.kind]}: "
                        + ("they are not scored" if task.kind == "tagging"
                           else "they are classified from no features"))
                cut = missing.get("truncated", {}).get(part)
                if cut:
                    log(f"{task_name}: embedder {name} cuts {cut} of {total} {word} sentences "
                        "to its max_tokens: they are classified from their leading words")
            data = standardize(data)
            for probe in probes:
                scores = [train_probe(data[0], data[1], len(task.classes),
                                      task.kind == "tagging", probe, seed, epochs)
                          for seed in seeds]
                row = {"task": task_name, "embedder": name, "probe": probe,
                       "accuracy": [s["accuracy"] for s in scores],
                       "macro_f1": [s["macro_f1"] for s in scores],
                       "missing": missing, "majority": majority}
                rows.append(row)
                log(f"{task_name:>12} {name:>14} {probe:>7}: accuracy "
                    f"{_mean_std(row['accuracy'])}  macro-F1 {_mean_std(row['macro_f1'])}"
                    f"  ({time.time() - t0:.0f}s)")
    return rows


_MISSING_WHY = {
    "tagging": " (past the export's max_tokens, or without a model token)",
    "classification": " (no token the export embeds)",
}


def _check_embedder_fits(name, path, tasks):
    """Refuses an export with `subword_pooling="none"` before a tagging task loads it."""
    tagging = [t.name for t in tasks.values() if t.kind == "tagging"]
    if tagging and read_metadata(path).get("subword_pooling") == "none":
        raise ValueError(
            f"{path}: embedder {name!r} was exported with subword_pooling='none' (one vector "
            f"per WordPiece, not per word), so tagging task {tagging[0]!r} cannot align its "
            "tags with them; export it again with --subword_pooling first or mean")


def _features(task, name, path, embedder):
    """`([train, test] as (layers, mask, labels), missing)` (see `evaluate`)."""
    data, missing, index = [], {"unit": task.unit}, task.index
    for part, file, examples in (("train", task.train_path, task.train),
                                 ("test", task.test_path, task.test)):
        if task.kind == "tagging":
            try:
                layers, mask, labels = tagging_data(embedder, examples, index)
            except ValueError as e:
                raise ValueError(f"{file}: embedder {name!r} ({path}): {e}") from e
            total = sum(len(tokens) for tokens, _ in examples)
            lost = total - int((labels >= 0).sum())
        else:
            sentences = [s for _, s in examples]
            layers, mask = sentence_features(embedder, sentences)
            labels = np.array([index[label] for label, _ in examples])
            total = len(examples)
            lost = int((~mask.any(axis=1)).sum())
            missing.setdefault("truncated", {})[part] = truncated_sentences(embedder,
                                                                            sentences)
        if lost == total:
            raise ValueError(f"{file}: embedder {name!r} ({path}) gives no vector to any of "
                             f"its {total} {task.unit}{_MISSING_WHY[task.kind]}")
        data.append((layers, mask, labels))
        missing[part] = [lost, total]
    return data, missing


def majority_baseline(task):
    """`{class, accuracy, macro_f1}` of predicting the training set's most frequent class
    (the first in sorted order on a tie) for every test token or sentence."""
    counts = collections.Counter(task.labels(task.train))
    top = max(task.classes, key=lambda c: counts[c])
    index = task.index
    gold = np.array([index[label] for label in task.labels(task.test)])
    predicted = np.full_like(gold, index[top])
    return {"class": top, "accuracy": float(np.mean(gold == predicted)),
            "macro_f1": macro_f1(gold, predicted, len(task.classes))}


def _mean_std(values):
    v = 100 * np.asarray(values)
    return f"{v.mean():.1f} ± {v.std(ddof=1) if len(v) > 1 else 0.0:.1f}"


def table(rows, seeds):
    """`evaluate`'s rows as a Markdown table, with the majority-class row and notes."""
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    keys = list(dict.fromkeys((r["embedder"], r["probe"]) for r in rows))
    by = {(r["task"], r["embedder"], r["probe"]): r for r in rows}
    header = "| features | probe | " + " | ".join(
        f"{t} acc | {t} macro-F1" for t in tasks) + " |"
    lines = [header, "|" + "---|" * (2 + 2 * len(tasks))]
    for embedder, probe in keys:
        cells = [_mean_std(by[t, embedder, probe][k]) if (t, embedder, probe) in by else ""
                 for t in tasks for k in ("accuracy", "macro_f1")]
        lines.append(f"| {embedder} | {probe} | " + " | ".join(cells) + " |")
    majority = {r["task"]: r["majority"] for r in rows if r.get("majority")}
    if majority:
        cells = [f"{100 * majority[t][k]:.1f}" if t in majority else ""
                 for t in tasks for k in ("accuracy", "macro_f1")]
        lines.append("| majority class | — | " + " | ".join(cells) + " |")
    lines += ["", f"Mean ± standard deviation over probe seeds {list(seeds)} (percent)."]
    if majority:
        lines.append("Majority class: the most frequent training tag or label, predicted for "
                     "every test token or sentence.")
    notes = {(r["task"], r["embedder"]): r["missing"] for r in rows if r.get("missing")}
    for (task, embedder), m in notes.items():
        unit = m["unit"]
        if m["train"][0] or m["test"][0]:
            text = (f"{embedder} on {task}: {m['test'][0]} of {m['test'][1]} test {unit} "
                    f"and {m['train'][0]} of {m['train'][1]} training {unit} have no vector")
            tagging = unit == "tokens"
            text += _MISSING_WHY["tagging" if tagging else "classification"] + (
                "; the scores count the others only." if tagging
                else "; they are classified from no features.")
            lines.append(f"Not embedded: {text}")
        cut = m.get("truncated", {})
        if cut.get("train") or cut.get("test"):
            lines.append(f"Cut to max_tokens: {embedder} on {task}: {cut['test'] or 0} of "
                         f"{m['test'][1]} test and {cut['train'] or 0} of {m['train'][1]} "
                         "training sentences; they are classified from their leading words.")
    return "\n".join(lines) + "\n"
