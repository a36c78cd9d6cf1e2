import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.export.embedder_reference import Reference
from tfeff.data import fasttext_tables
from tfeff.export import export_model_dir, load_embedder
from tfeff.testing.numerics import assert_close
from tfeff.training import restore_model

SENTENCES = ["the cat sat .", "", "   ", "zzqx blorf unseenword café 日本 .", "a " * 300]

_FRESH = r"""
import json, sys
import numpy as np, tensorflow as tf
m = tf.saved_model.load(sys.argv[1])
s = tf.constant(json.loads(sys.argv[2]))
e = m.signatures["embed"](sentences=s)
p = m.signatures["predict"](sentences=s)
assert "tfeff" not in sys.modules
np.savez(sys.argv[3], layers=e["layers"].numpy(), mask=e["mask"].numpy(),
         tokens=e["tokens"].numpy(), forward=p["forward"].numpy())
"""


@pytest.fixture(scope="module")
def exported(trained_dir, tmp_path_factory):
    model_dir, _ = trained_dir
    path = str(tmp_path_factory.mktemp("export") / "embedder")
    export_model_dir(model_dir, path, max_tokens=64)
    return model_dir, path


def _library_embeddings(model_dir, sentences, max_tokens=64):
    """The same computation through the library: fixed table rows / fastText + model.

    Returns the stacks, the in-memory model's forward and backward predictions
    (`ElmoLM.head_inputs`) at the words (what `predict` promises) and the float32
    roundings of each sentence's stack (`Reference.roundings`).
    """
    import fasttext

    model, _, _, _ = restore_model(model_dir)
    ft = fasttext.load_model(os.path.join(model_dir, "fasttext.bin"))
    mean = np.load(fasttext_tables.mean_path(os.path.join(model_dir, "vocabulary_vectors.npy")))
    counter = Reference("elmo_fixed", model, fasttext_model=ft, vector_mean=mean)
    outs, predicted, roundings = [], [], []
    for s in sentences:
        words = ["<s>"] + s.split()[:max_tokens] + ["</s>"]
        vec = np.stack([ft.get_word_vector(w) for w in words])[None] - mean
        stack, forward, backward = model.backbone.encode(vec, np.ones((1, len(words)), bool))
        outs.append(stack.numpy()[0, :, 1:-1])
        predicted.append({name: np.asarray(model.head_inputs(h))[0, 1:-1]
                          for name, h in (("forward", forward), ("backward", backward))})
        roundings.append(counter.roundings(words[1:-1], [[w] for w in words[1:-1]]))
    return outs, predicted, roundings


@pytest.mark.numerics
def test_reload_in_fresh_process_equals_library(exported, tmp_path):
    model_dir, path = exported
    out_file = str(tmp_path / "out.npz")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    r = subprocess.run([sys.executable, "-c", _FRESH, path, json.dumps(SENTENCES), out_file],
                       capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    out = np.load(out_file, allow_pickle=True)
    lib, _, roundings = _library_embeddings(model_dir, SENTENCES)
    assert out["layers"].shape[:2] == (len(SENTENCES), 3)
    for i, ref in enumerate(lib):
        n = ref.shape[1]
        assert out["mask"][i].sum() == n
        assert_close(out["layers"][i, :, :n], ref, n=roundings[i], err_msg=SENTENCES[i])
        assert not out["layers"][i, :, n:].any()
    assert out["mask"][1].sum() == 0 and out["mask"][2].sum() == 0  # empty, whitespace
    assert out["mask"][4].sum() == 64  # truncated to max_tokens
    assert [t.decode() for t in out["tokens"][3][:3]] == ["zzqx", "blorf", "unseenword"]


@pytest.mark.numerics
def test_signatures_and_unseen_word_vectors(exported):
    model_dir, path = exported
    loaded = load_embedder(path)
    assert set(loaded.signatures) == {"embed", "embed_tokens", "tokenize", "predict"}
    sentences = ["zzqx blorf café", ""]
    pred = loaded.signatures["predict"](sentences=tf.constant(sentences))
    assert pred["forward"].shape[:2] == (2, 3) and not pred["mask"].numpy()[1].any()
    assert np.isfinite(pred["forward"].numpy()).all()
    # What the signature promises: the in-memory model's predictions at each word.
    _, expected, roundings = _library_embeddings(model_dir, sentences)
    model = restore_model(model_dir)[0]
    for name in ("forward", "backward"):
        # The top layer's roundings, then the output projection (a dot over it, the bias).
        assert_close(pred[name].numpy()[0], expected[0][name],
                     n=roundings[0] + model.backbone.projection_dim + 1, err_msg=name)
        assert expected[1][name].shape[0] == 0 and not pred[name].numpy()[1].any()


def test_export_refuses_to_overwrite_and_needs_a_checkpoint(exported, tmp_path):
    model_dir, path = exported
    with pytest.raises(FileExistsError, match="overwrite"):
        export_model_dir(model_dir, path)
    with pytest.raises(FileNotFoundError, match="not a tfeff model directory"):
        export_model_dir(str(tmp_path), str(tmp_path / "out"))
    assert not os.path.exists(str(tmp_path / "out"))


@pytest.mark.numerics
def test_literal_unk_and_pad_get_the_input_they_get_in_training(exported):
    """A literal `<unk>` or `<pad>` in text is the unknown word in training (the LM
    pipeline's `<unk>` id, whose fixed vector is zero) and in the export alike."""
    import fasttext

    from tfeff.data import Vocabulary, lines_to_windows, vocabulary
    from tfeff.data.pipeline import lookup_table

    model_dir, path = exported
    vocab_path = os.path.join(model_dir, "vocabulary.txt")
    known = Vocabulary.load(vocab_path).words[10:14]
    sentence = " ".join([known[0], "<unk>", known[1], known[2], "<pad>", known[3]])
    ids = lines_to_windows(tf.constant([sentence]), lookup_table(vocab_path), 64).to_tensor()
    assert ids.numpy()[0, [2, 5]].tolist() == [vocabulary.UNK_ID] * 2  # after <s>
    model, _, _, _ = restore_model(model_dir)
    stack, _, _ = model.backbone.encode(model.backbone.token_embedding(ids), ids > 0)
    out = load_embedder(path).signatures["embed"](sentences=tf.constant([sentence]))
    ft = fasttext.load_model(os.path.join(model_dir, "fasttext.bin"))
    mean = np.load(fasttext_tables.mean_path(os.path.join(model_dir, "vocabulary_vectors.npy")))
    # The model's table rows against the export's fastText vectors minus the mean.
    words = sentence.split()
    roundings = Reference("elmo_fixed", model, fasttext_model=ft, vector_mean=mean).roundings(
        words, [[w] for w in words])
    assert_close(out["layers"].numpy()[0], stack.numpy()[0, :, 1:-1], n=roundings)
    # What the strings used to get (fastText's vectors of "<unk>", "<pad>") is far from it.
    vectors = model.backbone.token_embedding(ids).numpy()
    assert not vectors[0, [2, 5]].any()  # the unknown word's fixed vector is zero
    vectors[0, [2, 5]] = np.stack([ft.get_word_vector(w) for w in ("<unk>", "<pad>")]) - mean
    before, _, _ = model.backbone.encode(vectors, ids > 0)
    gap = np.abs(before.numpy()[0, 0, [2, 5]] - out["layers"].numpy()[0, 0, [1, 4]]).max()
    assert gap > 0.1, gap


def test_export_refuses_max_tokens_0(exported, tmp_path):
    model_dir, _ = exported
    with pytest.raises(ValueError, match="expected a positive integer. Received: max_tokens=0"):
        export_model_dir(model_dir, str(tmp_path / "zero"), max_tokens=0)
    assert not os.listdir(tmp_path)
