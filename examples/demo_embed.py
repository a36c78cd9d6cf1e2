"""Loads an exported tfeff embedder WITHOUT importing tfeff and shows what it does.

For a few sentences (some with words never seen in training) it prints the
shape of the contextual representations and, for some positions, the
vocabulary words nearest to the model's prediction of the next word.

    python examples/demo_embed.py --embedder runs/demo/export
"""

import argparse
import os
import sys

import numpy as np
import tensorflow as tf

SENTENCES = [
    "every ploozmarkish glorbinate snarfles the quibbleton .",  # invented, unseen words
    "two zzyzxq ran .",
    "",
]


def nearest_words(vectors, table, words, k=5, chunk=65536):
    """Top-k cosine neighbours of each vector among the table rows, chunked."""
    v = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
    best = np.full((len(v), k), -np.inf)
    best_ids = np.zeros((len(v), k), dtype=np.int64)
    for start in range(0, len(table), chunk):
        rows = np.asarray(table[start:start + chunk], dtype=np.float32)
        rows = rows / np.maximum(np.linalg.norm(rows, axis=-1, keepdims=True), 1e-12)
        sims = v @ rows.T
        sims[:, : max(0, 2 - start)] = -np.inf  # <pad>, <unk>
        cand = np.concatenate([best, sims], axis=1)
        cand_ids = np.concatenate([best_ids, np.arange(start, start + len(rows))[None].repeat(len(v), 0)], axis=1)
        top = np.argsort(-cand, axis=1)[:, :k]
        best = np.take_along_axis(cand, top, 1)
        best_ids = np.take_along_axis(cand_ids, top, 1)
    return [[words[i] for i in row] for row in best_ids]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--embedder", required=True, help="SavedModel directory from tfeff-export")
    parser.add_argument("--sentences", nargs="*", default=SENTENCES)
    parser.add_argument("--sentences_from", help="also embed the first --num lines of this file")
    parser.add_argument("--num", type=int, default=2)
    args = parser.parse_args()
    if args.sentences_from:
        with open(args.sentences_from, encoding="utf-8") as f:
            args.sentences = [next(f).strip() for _ in range(args.num)] + args.sentences

    embedder = tf.saved_model.load(args.embedder)
    sentences = tf.constant(args.sentences)
    out = embedder.signatures["embed"](sentences=sentences)
    pred = embedder.signatures["predict"](sentences=sentences)
    extra = os.path.join(args.embedder, "assets.extra")
    words = [line.split("\t")[0] for line in open(os.path.join(extra, "vocabulary.txt"), encoding="utf-8")]
    table = np.load(os.path.join(extra, "vocabulary_vectors.npy"), mmap_mode="r")
    vocab = set(words)
    assert "tfeff" not in sys.modules, "the demo must run without tfeff"

    print(f"layers: {tuple(out['layers'].shape)}  [batch, layers, tokens, dim]; "
          f"mask: {tuple(out['mask'].shape)}")
    for i, sentence in enumerate(args.sentences):
        tokens = [t.decode() for t, m in zip(out["tokens"][i].numpy(), out["mask"][i].numpy()) if m]
        print(f"\n{sentence!r}: {len(tokens)} tokens, representation "
              f"{tuple(out['layers'][i, :, :len(tokens)].shape)}")
        if not tokens:
            continue
        unseen = [t for t in tokens if t not in vocab]
        if unseen:
            print(f"  words never seen in training (embedded through fastText subwords): {unseen}")
        fwd = pred["forward"][i, :len(tokens)].numpy()
        neighbours = nearest_words(fwd, table, words)
        for t, (tok, near) in enumerate(zip(tokens, neighbours)):
            if t < 4:
                print(f"  after {' '.join(tokens[:t + 1])!r:45} next word ~ {', '.join(near)}")


if __name__ == "__main__":
    main()
