"""Naive references for exported embedders, and a loader that runs without tfeff.

The references embed one sentence at a time, unpadded, with the tokenizers of
the pre-training pipelines and plain NumPy pooling, so they share none of the
embedder's batching, ragged or pooling code.
"""

import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from tfeff.testing.numerics import assert_close

# Loads every embedder given in a fresh interpreter that never imports tfeff.
FRESH = r"""
import json, os, sys
import numpy as np, tensorflow as tf
paths, sentences, token_rows, out_dir = sys.argv[1:5]
sentences, token_rows = json.loads(sentences), json.loads(token_rows)
for i, path in enumerate(json.loads(paths)):
    meta = json.load(open(os.path.join(path, "assets.extra", "embedder.json")))
    if "tensorflow_text" in meta["requires"]:
        import tensorflow_text  # registers the tokenizer ops
    m = tf.saved_model.load(path)
    e = m.signatures["embed"](sentences=tf.constant(sentences))
    t = m.signatures["embed_tokens"](tokens=tf.constant(token_rows))
    k = m.signatures["tokenize"](sentences=tf.constant(sentences))
    z = m.signatures["embed"](sentences=tf.constant([], tf.string))
    zt = m.signatures["embed_tokens"](tokens=tf.zeros([0, 3], tf.string))
    out = {"layers": e["layers"], "mask": e["mask"], "tokens": e["tokens"],
           "t_layers": t["layers"], "t_mask": t["mask"], "t_tokens": t["tokens"],
           "k_tokens": k["tokens"], "k_mask": k["mask"],
           "z_layers": z["layers"], "z_mask": z["mask"], "z_tokens": z["tokens"],
           "zt_layers": zt["layers"], "zt_mask": zt["mask"]}
    np.savez(os.path.join(out_dir, f"{i}.npz"), **{k: v.numpy() for k, v in out.items()})
assert "tfeff" not in sys.modules, sorted(m for m in sys.modules if m.startswith("tfeff"))
"""


def run_fresh(paths, sentences, token_rows, out_dir):
    """Runs every embedder of `paths` in a fresh process; returns one dict per path."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    r = subprocess.run(
        [sys.executable, "-c", FRESH, json.dumps(paths), json.dumps(sentences),
         json.dumps(token_rows), str(out_dir)],
        capture_output=True, text=True, timeout=600, env=env, cwd=str(out_dir))
    assert r.returncode == 0, r.stderr[-4000:]
    return [dict(np.load(os.path.join(out_dir, f"{i}.npz"), allow_pickle=True))
            for i in range(len(paths))]


def pool(stack, counts, how):
    """`stack` (layers, 1 + tokens + 1, d) -> (layers, words, d) by piece counts."""
    out, start = [], 1
    for c in counts:
        if c == 0:
            out.append(np.zeros_like(stack[:, 0]))
            continue
        piece = stack[:, start:start + c]
        out.append(piece[:, 0] if how == "first" else piece.mean(axis=1))
        start += c
    return np.stack(out, axis=1) if out else np.zeros((stack.shape[0], 0, stack.shape[-1]))


def fit(words, pieces, budget, subwords):
    """The leading whole words whose pieces fit in `budget` (what embedders document)."""
    words, pieces = words[:budget], pieces[:budget]
    if subwords:
        total, keep = 0, 0
        for p in pieces:
            total += len(p)
            if total > budget:
                break
            keep += 1
        words, pieces = words[:keep], pieces[:keep]
    return words, pieces


def stack_roundings(kind, model, tokens):
    """The float32 roundings (tfeff/testing/numerics.py) of the longest path from the token vectors
    to any layer of the stack of `model`'s backbone (a `kind` of `Reference`) on `tokens`
    model tokens.

    An exported embedder runs the stack batched and padded in a graph, a reference or
    another batch alone: their sums may split differently. A dot or sum of K counts K, a
    function (exp, tanh, sigmoid, erf, rsqrt) 4, an elementwise step 1.
    """
    encoder = model.backbone
    if kind == "bert":
        d, f = encoder.hidden_dim, encoder.intermediate_dim
        r = (encoder.relaxed or {}).get("ffn_rank", 0)  # a factorized dense's second product
        norm = 2 * d + 8  # the mean's and variance's sums, rsqrt, 4 elementwise
        attention = ((d + 1) + (d // encoder.num_heads + 1)  # projection, scaled scores
                     + (tokens + 6) + tokens  # softmax over the tokens, times the values
                     + (d + 1) + 1 + norm)  # output projection, residual, layer norm
        ffn = (d + r + 1) + 8 + (f + r + 1) + 1 + norm  # dense, gelu, dense, residual, norm
        return 2 + norm + encoder.num_layers * (attention + ffn)
    # biLSTMs: a step (gates: a dot over the input and the projection, the bias; sigmoids
    # and tanh, the cell, tanh; the projection over the units) on a path across every step
    # and layer, each layer normalized and added to its input.
    p = encoder.projection_dim
    if kind == "masked_elmo":
        width, token = 2 * p, 0  # the layers' input: both directions
    else:
        width, token = p, encoder.token_embedding_dim + 1  # after the token projection
    step = (width + p + 1) + 12 + 3 + 5 + encoder.units
    return token + (tokens + encoder.num_layers - 1) * step + encoder.num_layers * (2 * p + 10)


class Reference:
    """One sentence at a time through the library pieces, no batching or padding.

    Args:
        kind: `"elmo_fixed"`, `"elmo_word"`, `"elmo_wordpiece"`, `"masked_elmo"`,
            `"bert"` or `"fasttext"`.
        model: the task model, whose backbone computes the stack (for `"fasttext"`, a
            loaded `fasttext` model).
        vocabulary_path: the vocabulary file (not for fixed/fastText).
    """

    def __init__(self, kind, model, vocabulary_path=None, lower_case=False, max_tokens=256,
                 pooling="first", fasttext_model=None, vector_mean=None):
        from tfeff.data import vocabulary as vocabulary_lib
        from tfeff.data.pipeline import lookup_table
        from tfeff.data.mlm_dataset import bert_tokenizer
        from tfeff.data.wordpiece import wordpiece_tokenizer

        self.kind, self.model, self.max_tokens, self.pooling = kind, model, max_tokens, pooling
        self.encoder = None if kind == "fasttext" else model.backbone
        self.fasttext_model, self.vector_mean = fasttext_model, vector_mean
        self.subwords = kind in ("elmo_wordpiece", "masked_elmo", "bert")
        if vocabulary_path:
            self.words = vocabulary_lib.Vocabulary.load(vocabulary_path).words
            self.index = {w: i for i, w in enumerate(self.words)}
        if kind in ("masked_elmo", "bert"):
            self.tokenizer = bert_tokenizer(vocabulary_path, lower_case)
            from tfeff.data.wordpiece import BasicTokenizer  # keeps a literal <unk> whole
            self.basic = BasicTokenizer(lower_case=lower_case)
        if kind == "elmo_wordpiece":
            self.tokenizer = wordpiece_tokenizer(lookup_table(vocabulary_path, -1))

    def split(self, sentence):
        """(words, pieces per word) of one sentence."""
        if self.kind in ("masked_elmo", "bert"):
            words = [w.decode() for w in self.basic.tokenize([sentence]).to_list()[0]]
            pieces = self.tokenizer.tokenize([sentence]).to_list()[0]
        else:
            words = sentence.split()
            if self.kind == "elmo_wordpiece":
                pieces = self.tokenizer.tokenize(words).to_list() if words else []
            elif self.kind == "elmo_word":
                pieces = [[self.index.get(w, 1)] for w in words]
            else:
                pieces = [[w] for w in words]
        return fit(words, pieces, self.max_tokens, self.subwords)

    def word_pieces(self, word):
        """The model tokens of one pre-tokenized word ("" has none)."""
        if not word:
            return []
        if self.kind in ("masked_elmo", "bert"):
            return [int(p) for p in self.tokenizer.tokenize([word]).merge_dims(1, 2).to_list()[0]]
        return self.split(word)[1][0]

    def __call__(self, sentence):
        """(words, layers (L+1, words, d)) of one sentence."""
        return self.embed(*self.split(sentence))

    def tokens(self, row):
        """(words, layers, mask, roundings) of one row of a token matrix ("" is padding)."""
        while row and not row[-1]:
            row = row[:-1]
        words, pieces = fit(row, [self.word_pieces(w) for w in row], self.max_tokens,
                            self.subwords)
        words, layers = self.embed(words, pieces)
        return (words, layers, np.array([bool(p) for p in pieces], bool),
                self.roundings(words, pieces))

    def roundings(self, words, pieces):
        """The float32 roundings (tfeff/testing/numerics.py) of the longest path to any layer of the
        stack of one sentence (`words` split into model `pieces`): `stack_roundings`, after
        the token vectors and before the pooling."""
        vector = 0  # a table row, exact
        if self.kind in ("fasttext", "elmo_fixed"):  # n-gram rows summed, times 1/n, - mean
            ft = self.fasttext_model
            vector = 3 + max([len(ft.get_subwords(w)[1]) for w in ["<s>", "</s>"] + words])
        elif self.encoder.input_embedding == "alone":  # codebooks, two dots
            e = self.encoder.token_embedding
            vector = e.num_codebooks + 1 + e.base_dim + 1 + e.intermediate_dim
        if self.kind == "fasttext":
            return vector
        pooling = max(map(len, pieces), default=0) + 1 if self.pooling == "mean" else 0
        tokens = 2 + sum(len(p) for p in pieces)  # with the boundaries
        return vector + stack_roundings(self.kind, self.model, tokens) + pooling

    def embed(self, words, pieces):
        flat = [p for word in pieces for p in word]
        counts = [len(p) for p in pieces]
        if self.kind in ("fasttext", "elmo_fixed"):
            dim = self.fasttext_model.get_dimension()
            tokens = ["<s>"] + flat + ["</s>"]
            vectors = np.stack([self.fasttext_model.get_word_vector(w) for w in tokens])
            if self.kind == "fasttext":
                vectors[[0, -1]] = 0
                return words, pool(vectors.reshape(1, -1, dim), counts, "first")
            stack, _, _ = self.encoder.encode((vectors - self.vector_mean)[None],
                                              np.ones((1, len(tokens)), bool))
            return words, pool(stack.numpy()[0], counts, "first")
        ids = np.array([[2] + [int(i) for i in flat] + [3]], np.int32)
        mask = np.ones(ids.shape, bool)
        if self.kind.startswith("elmo"):
            stack, _, _ = self.encoder.encode(self.encoder.token_embedding(ids), mask)
        elif self.kind == "masked_elmo":
            stack, _ = self.encoder.encode(ids, mask)
        else:
            stack = self.encoder.encode(ids, padding_mask=mask, return_all_layers=True)
        stack = tf.cast(stack, tf.float32).numpy()[0]
        if self.pooling == "none":
            return [self.words[i] for i in flat], stack[:, 1:-1]
        return words, pool(stack, counts, self.pooling)


def assert_matches(out, reference, sentences, prefix=""):
    """Exported outputs (`layers`, `mask`, `tokens` under `prefix`) equal the reference, to
    the rounding of each sentence's stack (`Reference.roundings`) at its largest value."""
    layers, mask, tokens = out[prefix + "layers"], out[prefix + "mask"], out[prefix + "tokens"]
    assert layers.shape[0] == len(sentences)
    for i, sentence in enumerate(sentences):
        words, pieces = reference.split(sentence)
        words, ref = reference.embed(words, pieces)
        n = len(words)
        assert mask[i].sum() == n and mask[i, :n].all(), (sentence, mask[i])
        assert [t.decode() for t in tokens[i, :n]] == words, sentence
        assert_close(layers[i, :, :n], ref, n=reference.roundings(words, pieces),
                     err_msg=sentence)
        assert not layers[i, :, n:].any() and not tokens[i, n:].astype(bool).any()


MODEL_DIR_SENTENCES = ["the dogs run .", "", "Zürich blorfish , a cat sat !",
                       " ".join(["many unbelievable snarfles"] * 20)]


def check_model_dir_export(model_dir, path, kind, model, lower_case=False, max_tokens=256):
    """`export_model_dir` of a trained directory reproduces the restored `model`."""
    from tfeff.export import export_model_dir, load_embedder

    export_model_dir(model_dir, path)
    loaded = load_embedder(path)
    out = loaded.signatures["embed"](sentences=tf.constant(MODEL_DIR_SENTENCES))
    out = {k: v.numpy() for k, v in out.items()}
    vocabulary = os.path.join(model_dir, "vocabulary.txt")
    ref = Reference(kind, model, vocabulary, lower_case=lower_case, max_tokens=max_tokens)
    assert_matches(out, ref, MODEL_DIR_SENTENCES)
    assert out["mask"][3].sum() == len(ref.split(MODEL_DIR_SENTENCES[3])[0]) > 0
    return loaded
