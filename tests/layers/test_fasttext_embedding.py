import keras
import numpy as np
import tensorflow as tf

from tests.layers.layer_checks import run_layer_test
from tfeff.layers import FastTextEmbedding

ODD_WORDS = ["café", "naïve", "Zürich", "日本語", "東京", "🙂", "emoji🙂s", "é", "x", "a",
             "", "</s>", "<s>", "never-seen-word", "ÆØÅ", "ﬁ", "ß", "z" * 40]


def _words(model, rng):
    vocab = model.get_words()
    seen = list(rng.choice(vocab, size=min(150, len(vocab)), replace=False))
    unseen = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyzé日"), size=rng.integers(1, 12)))
              for _ in range(150)]
    return seen + unseen + ODD_WORDS


def test_equals_fasttext_get_word_vector(fasttext_model):
    path, model = fasttext_model
    layer = FastTextEmbedding.from_fasttext(path)
    words = _words(model, np.random.default_rng(0))
    out = layer(tf.constant(words)).numpy()
    ref = np.stack([model.get_word_vector(w) for w in words])
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    # Batched 2-D input with repeated tokens gives the same rows.
    grid = layer(tf.constant([words[:3], words[:3][::-1]])).numpy()
    np.testing.assert_allclose(grid[1], ref[:3][::-1], rtol=1e-5, atol=1e-6)


def test_standard_layer_checks(fasttext_model, tmp_path):
    path, model = fasttext_model
    words = np.array([["café", "the", "qqqz"], ["</s>", "日本語", ""]], dtype=object)
    kwargs = dict(words=model.get_words(), input_matrix=model.get_input_matrix(), minn=2,
                  maxn=5, bucket=20000, name="ft_standard")
    # Not trainable: nothing to fit. String ops: `supports_jit=False`, checked.
    out, = run_layer_test(FastTextEmbedding, kwargs, words, tmp_path, expected_num_weights=1,
                          fit=False, mixed_precision=False)
    ref = np.stack([[model.get_word_vector(w) for w in row] for row in words])
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


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
