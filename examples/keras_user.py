"""tfeff's layers and losses in a Keras user's own code: stock compile, fit, save, load.

Every public layer of `tfeff.layers` and every loss of `tfeff.losses` is put in
a small model of the user's own design (their encoder, their task), trained
with a stock `model.compile(optimizer=..., loss=...)` and `model.fit(...)`
(no lambda, no custom `train_step`), saved to a `.keras` file and reloaded
with `keras.saving.load_model` and its default `safe_mode=True`. The script
checks that the loss fell and that the reloaded model gives the same outputs,
prints one row per layer or loss, and exits non-zero if any check fails.

    python examples/keras_user.py [--epochs 8] [--output_dir DIR] [--only NAME ...]

It runs on every Keras backend (`KERAS_BACKEND=tensorflow|jax|torch`).
`FastTextEmbedding` is TensorFlow-only (string ops): its case runs only
where TensorFlow is the backend, and the script says so elsewhere.

The task is next-token prediction on a small synthetic language (token t+1
is a fixed function of token t, with noise), so every model has something
to learn in a few epochs on a CPU.
"""

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import tfeff.layers  # noqa: E402
import tfeff.losses  # noqa: E402
from tfeff.layers import AdaptiveSoftmax  # noqa: E402
from tfeff.layers import AloneEmbedding  # noqa: E402
from tfeff.layers import AnchorMultiHeadAttention  # noqa: E402
from tfeff.layers import CausalAnchorAttention  # noqa: E402
from tfeff.layers import ContinuousOutput  # noqa: E402
from tfeff.layers import FactorizedDense  # noqa: E402
from tfeff.layers import FixedEmbedding  # noqa: E402
from tfeff.layers import FullSoftmax  # noqa: E402
from tfeff.layers import MaskedBiLSTM  # noqa: E402
from tfeff.layers import ProjectedLSTM  # noqa: E402
from tfeff.layers import RotaryMultiHeadAttention  # noqa: E402
from tfeff.layers import SampledSoftmax  # noqa: E402
from tfeff.layers import ScalarMix  # noqa: E402

VOCAB, TIME, DIM, VECTOR_DIM, ROWS = 64, 10, 32, 16, 512


def make_data(seed=0):
    """Token ids (0 is padding) and their next tokens, frequency-ordered ids."""
    rng = np.random.default_rng(seed)
    successor = rng.permutation(np.arange(1, VOCAB))  # token -> next token
    ids = np.zeros((ROWS, TIME + 1), np.int32)
    ids[:, 0] = np.minimum(rng.zipf(1.3, ROWS), VOCAB - 1)
    for t in range(1, TIME + 1):
        follow = successor[ids[:, t - 1] - 1]
        noise = rng.integers(1, VOCAB, ROWS)
        ids[:, t] = np.where(rng.random(ROWS) < 0.9, follow, noise)
    lengths = rng.integers(TIME // 2, TIME + 1, ROWS)
    ids[np.arange(TIME + 1)[None, :] > lengths[:, None]] = 0  # right padding
    return ids[:, :-1], ids[:, 1:]


def target_vectors(seed=1):
    """A fixed table of word vectors (fastText's role in ELMo-C); row 0 is padding."""
    table = np.random.default_rng(seed).normal(size=(VOCAB, VECTOR_DIM)).astype("float32")
    table[0] = 0
    return table


# ------------------------------------------------------------------ the user's models
# Each returns (model, compile loss, x, y): the model is the user's own encoder
# with a tfeff layer in it; `fit(x, y)` and `model.predict(x)` use the same x.


def _encoder(tokens, embedding=None, mask_zero=True):
    embedded = (embedding or keras.layers.Embedding(VOCAB, DIM, mask_zero=mask_zero))(tokens)
    return keras.layers.LSTM(DIM, return_sequences=True)(embedded)


def _classifier(hidden):
    return keras.layers.Dense(VOCAB, activation="softmax", name="next_token")(hidden)


def softmax_output(layer):
    """An output layer that adds its own loss: targets are a model input, no `loss`."""

    def build(x, y):
        tokens = keras.Input((TIME,), dtype="int32", name="tokens")
        targets = keras.Input((TIME,), dtype="int32", name="targets")
        log_probs = layer(_encoder(tokens), targets)
        return keras.Model([tokens, targets], log_probs), None, [x, y], None

    return build


def continuous_output(loss_name, loss_from_layer=False, **layer_kwargs):
    """ContinuousOutput predicting the fixed vector of the next word, a Keras loss."""

    def build(x, y):
        tokens = keras.Input((TIME,), dtype="int32")
        output = ContinuousOutput(VECTOR_DIM, loss=loss_name, **layer_kwargs)
        model = keras.Model(tokens, output(_encoder(tokens)))
        loss = output.make_loss() if loss_from_layer else tfeff.losses.DISTANCES[loss_name]
        return model, loss, x, target_vectors()[y]

    return build


def encoder_layer(make_hidden):
    """A tfeff layer inside the user's encoder, under a softmax classifier."""

    def build(x, y):
        tokens = keras.Input((TIME,), dtype="int32")
        model = keras.Model(tokens, _classifier(make_hidden(tokens)))
        return model, "sparse_categorical_crossentropy", x, y

    return build


def _stack(tensors):
    """(batch, time, dim) tensors -> (batch, len, time, dim), with stock layers only."""
    rows = [keras.layers.Reshape((1, TIME, DIM))(t) for t in tensors]
    return keras.layers.Concatenate(axis=1)(rows)


def _fasttext_model(workdir, x):
    """A real fastText model, trained on this language written out as words."""
    from tfeff.data import train_fasttext

    path = os.path.join(workdir, "words.txt")
    with open(path, "w", encoding="utf-8") as f:
        for row in x:
            f.write(" ".join(f"w{i}" for i in row if i) + "\n")
    model_path = os.path.join(workdir, "fasttext.bin")
    train_fasttext(path, model_path, dim=DIM, minn=2, maxn=3, bucket=5000, epoch=2)
    return model_path


def fasttext_encoder(workdir):
    def build(x, y):
        layer = tfeff.layers.FastTextEmbedding.from_fasttext(_fasttext_model(workdir, x))
        words = keras.Input((TIME,), dtype="string")
        hidden = keras.layers.Dense(DIM, activation="tanh")(layer(words))
        model = keras.Model(words, _classifier(hidden))
        import tensorflow as tf  # string tensors: FastTextEmbedding is TensorFlow-only

        strings = tf.constant(np.where(x > 0, np.char.add("w", x.astype(str)), ""))
        return model, "sparse_categorical_crossentropy", strings, y

    return build


def fixed_encoder(workdir):
    def build(x, y):
        path = os.path.join(workdir, "table.npy")
        np.save(path, target_vectors(seed=2))
        tokens = keras.Input((TIME,), dtype="int32")
        hidden = keras.layers.Dense(DIM, activation="tanh")(FixedEmbedding(path)(tokens))
        return keras.Model(tokens, _classifier(hidden)), "sparse_categorical_crossentropy", x, y

    return build


def _attention(layer_cls, **kwargs):
    def hidden(tokens):
        embedded = keras.layers.Embedding(VOCAB, DIM)(tokens)
        return layer_cls(**kwargs)(embedded, embedded)

    return hidden


def cases(workdir):
    """(name, what it covers, builder) for every public layer and loss of the backend
    (`tfeff.layers.__all__` lists the TensorFlow-only layers where TensorFlow is it)."""
    all_cases = [
        ("AdaptiveSoftmax", "layer", softmax_output(AdaptiveSoftmax(VOCAB, [8, 24]))),
        ("FullSoftmax", "layer", softmax_output(FullSoftmax(VOCAB))),
        ("SampledSoftmax", "layer", softmax_output(SampledSoftmax(VOCAB, 16, seed=0))),
        ("ContinuousOutput", "layer", continuous_output("cosine", loss_from_layer=True)),
        ("AloneEmbedding", "layer", encoder_layer(lambda t: _encoder(
            t, AloneEmbedding(VOCAB, DIM, base_dim=DIM, intermediate_dim=64, seed=0,
                              mask_zero=True)))),
        ("AnchorMultiHeadAttention", "layer", encoder_layer(_attention(
            AnchorMultiHeadAttention, num_heads=2, key_dim=8, num_anchors=4, seed=0))),
        ("RotaryMultiHeadAttention", "layer", encoder_layer(_attention(
            RotaryMultiHeadAttention, num_heads=2, key_dim=8))),
        ("CausalAnchorAttention", "layer", encoder_layer(_attention(
            CausalAnchorAttention, num_heads=2, key_dim=8, max_sequence_length=TIME,
            num_anchors=2, seed=0))),
        ("FactorizedDense", "layer", encoder_layer(
            lambda t: FactorizedDense(DIM, rank=4, activation="gelu")(_encoder(t)))),
        # (A bidirectional encoder sees the next token in this task; pretraining masks
        # the predicted tokens instead: tfeff.models.MaskedElmo.)
        ("MaskedBiLSTM", "layer", encoder_layer(lambda t: MaskedBiLSTM(DIM, DIM // 2)(
            keras.layers.Embedding(VOCAB, DIM, mask_zero=True)(t)))),
        ("ProjectedLSTM", "layer", encoder_layer(lambda t: ProjectedLSTM(DIM, DIM)(
            keras.layers.Embedding(VOCAB, DIM, mask_zero=True)(t)))),
        ("ScalarMix", "layer", encoder_layer(lambda t: ScalarMix(2)(_stack(
            [keras.layers.Embedding(VOCAB, DIM)(t), _encoder(t, mask_zero=False)])))),
        ("FixedEmbedding", "layer", fixed_encoder(workdir)),
        ("FastTextEmbedding", "layer", fasttext_encoder(workdir)),
        ("cosine_distance", "loss", continuous_output("cosine")),
        ("l2_distance", "loss", continuous_output("l2")),
        ("vmf_nll", "loss", continuous_output("vmf")),
        ("CosineDistance", "loss", continuous_output("cosine", loss_from_layer=True)),
        ("L2Distance", "loss", continuous_output("l2", loss_from_layer=True)),
        ("VonMisesFisherLoss", "loss", continuous_output(
            "vmf", loss_from_layer=True, vmf_regularization1=0.02)),
    ]
    return [case for case in all_cases
            if case[0] not in tfeff.layers.TENSORFLOW_ONLY or case[0] in tfeff.layers.__all__]


def run_case(name, build, workdir, epochs):
    """Compile, fit, save, reload; returns (first loss, last loss, max |difference|)."""
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model, loss, x, y = build(x, y)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss)
    history = model.fit(x, y, epochs=epochs, batch_size=64, verbose=0).history["loss"]
    path = os.path.join(workdir, f"{name}.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)  # safe_mode=True: no lambda, all registered
    expected = model.predict(x, verbose=0)
    actual = reloaded.predict(x, verbose=0)
    difference = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(e))))
                     for a, e in zip(keras.tree.flatten(actual), keras.tree.flatten(expected)))
    return history[0], history[-1], difference


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--output_dir", default=None,
                        help="where the .keras files go (default: a temporary directory)")
    parser.add_argument("--only", nargs="*", default=None, help="names of cases to run")
    args = parser.parse_args(argv)
    workdir = args.output_dir or tempfile.mkdtemp(prefix="tfeff_keras_user_")
    os.makedirs(workdir, exist_ok=True)
    all_cases = cases(workdir)
    covered = {name for name, kind, _ in all_cases if kind == "layer"}
    missing = set(tfeff.layers.__all__) - covered
    if missing:
        print(f"error: no example for public layers {sorted(missing)}", file=sys.stderr)
        return 2
    if args.only:
        unknown = set(args.only) - {name for name, _, _ in all_cases}
        if unknown:
            print(f"error: no case named {sorted(unknown)} on the "
                  f"{keras.backend.backend()} backend", file=sys.stderr)
            return 2
    skipped = sorted(set(tfeff.layers.TENSORFLOW_ONLY) - covered)
    if skipped and not args.only:
        print(f"note: {', '.join(skipped)} is TensorFlow-only (string ops): not run on the "
              f"{keras.backend.backend()} backend")
    failures = []
    print(f"{'case':<26} {'kind':<6} {'loss first':>11} {'loss last':>10} "
          f"{'reload diff':>12} {'s':>5}")
    for name, kind, build in all_cases:
        if args.only and name not in args.only:
            continue
        start = time.perf_counter()
        first, last, difference = run_case(name, build, workdir, args.epochs)
        # The reloaded model runs the same computation on the same machine: the same outputs.
        ok = np.isfinite(last) and last < first and difference == 0
        print(f"{name:<26} {kind:<6} {first:>11.4f} {last:>10.4f} {difference:>12.2e} "
              f"{time.perf_counter() - start:>5.1f}{'' if ok else '  FAILED'}", flush=True)
        if not ok:
            failures.append(name)
    if failures:
        print(f"error: failed: {', '.join(failures)} (the loss must fall and the reloaded "
              "model must give the same outputs)", file=sys.stderr)
        return 1
    print(f"ok: every case trained, saved and reloaded; files in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
