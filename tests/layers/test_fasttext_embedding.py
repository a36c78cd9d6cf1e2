import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.layers.layer_checks import run_layer_test
from tfeff.layers import FastTextEmbedding
from tfeff.testing.numerics import assert_close

ODD_WORDS = ["café", "naïve", "Zürich", "日本語", "東京", "🙂", "emoji🙂s", "é", "x", "a",
             "", "</s>", "<s>", "never-seen-word", "ÆØÅ", "ﬁ", "ß", "z" * 40]


def _words(model, rng):
    vocab = model.get_words()
    seen = list(rng.choice(vocab, size=min(150, len(vocab)), replace=False))
    unseen = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyzé日"), size=rng.integers(1, 12)))
              for _ in range(150)]
    return seen + unseen + ODD_WORDS


def _bound(model, words):
    """A word vector is the mean of its k subword rows: fastText adds them and multiplies
    by 1 / k (k + 2 roundings), the layer sums and divides, both in float32; every term
    is at most the largest entry of the input matrix."""
    k = max(len(model.get_subwords(w)[1]) for w in np.ravel(words))
    return dict(n=k + 2, scale=float(np.abs(model.get_input_matrix()).max()))


@pytest.mark.numerics
def test_equals_fasttext_get_word_vector(fasttext_model):
    path, model = fasttext_model
    layer = FastTextEmbedding.from_fasttext(path)
    words = _words(model, np.random.default_rng(0))
    out = layer(tf.constant(words)).numpy()
    ref = np.stack([model.get_word_vector(w) for w in words])
    bound = _bound(model, words)
    assert_close(out, ref, **bound)
    # Batched 2-D input with repeated tokens gives the same rows.
    grid = layer(tf.constant([words[:3], words[:3][::-1]])).numpy()
    assert_close(grid[1], ref[:3][::-1], **bound)


@pytest.mark.numerics
def test_standard_layer_checks(fasttext_model, tmp_path):
    path, model = fasttext_model
    words = np.array([["café", "the", "qqqz"], ["</s>", "日本語", ""]], dtype=object)
    kwargs = dict(words=model.get_words(), input_matrix=model.get_input_matrix(), minn=2,
                  maxn=5, bucket=20000, name="ft_standard")
    bound = _bound(model, words)
    # Not trainable: nothing to fit. String ops: `supports_jit=False`, checked.
    out, = run_layer_test(FastTextEmbedding, kwargs, words, tmp_path, expected_num_weights=1,
                          fit=False, mixed_precision=False, xla_n=bound["n"],
                          scale=bound["scale"])
    ref = np.stack([[model.get_word_vector(w) for w in row] for row in words])
    assert_close(out, ref, **bound)


def test_subword_ids_match_fasttext(fasttext_model):
    path, model = fasttext_model
    layer = FastTextEmbedding.from_fasttext(path)
    for word in ["café", "unseenword", "</s>", "日本語"]:
        ids = layer.subword_ids(tf.constant([word])).to_list()[0]
        assert sorted(ids) == sorted(model.get_subwords(word)[1].tolist()), word


def test_keras_round_trip_keeps_dictionary_and_matrix(fasttext_model, tmp_path):
    path, model = fasttext_model
    layer = FastTextEmbedding.from_fasttext(path, name="ft")
    inputs = keras.Input(shape=(), dtype="string")
    km = keras.Model(inputs, layer(inputs))
    km.save(str(tmp_path / "ft.keras"))
    reloaded = keras.saving.load_model(str(tmp_path / "ft.keras"))
    words = tf.constant(["café", "the", "qqqz"])
    np.testing.assert_array_equal(reloaded(words).numpy(), layer(words).numpy())
    config = layer.get_config()
    assert "words" not in config and config["bucket"] == 20000
