"""tools/mlm_arrays.py: the masked-LM pipeline's windows and held-out batches as arrays."""

import numpy as np
import pytest

from tfeff import data as data_lib
from tfeff.data.mlm_dataset import bert_tokenizer

from tools import mlm_arrays
N = 24


def reference_windows(path, vocabulary_path, n):
    """Independent packing: each chunk of 256 lines is one WordPiece stream cut into
    windows of n - 2 (a last window of one token dropped), as `[CLS] w [SEP]`, padded."""
    tokenizer = bert_tokenizer(vocabulary_path)
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    rows = []
    for start in range(0, len(lines), 256):
        stream = tokenizer.tokenize(lines[start:start + 256]).merge_dims(1, 2).flat_values
        stream = stream.numpy()
        for at in range(0, len(stream), n - 2):
            piece = stream[at:at + n - 2]
            if len(piece) >= 2:
                rows.append(np.pad(np.r_[2, piece, 3], (0, n - len(piece) - 2)))
    return np.stack(rows)


@pytest.fixture(scope="module")
def arrays(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlm_arrays")
    train, heldout = data_lib.write_synthetic_corpus(str(root), 300, 60)
    summary = mlm_arrays.build([train], [heldout], str(root / "out" / "a.npz"),
                               sequence_length=N, vocabulary_size=300)
    with np.load(root / "out" / "a.npz") as f:
        loaded = {k: f[k] for k in f.files}
    vocabulary_path = root / "vocabulary.txt"
    vocabulary_path.write_text("".join(f"{w}\t1\n" for w in loaded["vocabulary"]))
    return root, train, heldout, str(vocabulary_path), summary, loaded


def test_training_windows_are_the_pipelines_packing_unmasked(arrays):
    root, train, _, vocabulary_path, summary, loaded = arrays
    expected = reference_windows(train, vocabulary_path, N)
    np.testing.assert_array_equal(loaded["train"], expected)
    assert summary["train_windows"] == len(expected)
    assert summary["train_tokens"] == int((expected != 0).sum())
    assert int(loaded["vocabulary_size"]) == len(loaded["vocabulary"]) == summary["vocabulary_size"]
    assert loaded["vocabulary"][4] == "[MASK]" and int(loaded["max_predictions_per_seq"]) == 4
    # Nothing but the file is left beside it.
    assert sorted(p.name for p in (root / "out").iterdir()) == ["a.npz"]


def test_heldout_batches_are_masked_once_over_the_heldout_windows(arrays):
    _, _, heldout, vocabulary_path, summary, loaded = arrays
    x = {k[len("heldout_"):]: v for k, v in loaded.items() if k.startswith("heldout_")}
    np.testing.assert_array_equal(mlm_arrays.unmask(x),
                                  reference_windows(heldout, vocabulary_path, N))
    masked = x["token_ids"] != mlm_arrays.unmask(x)
    assert masked.sum() > 0.6 * x["masked_weights"].sum()  # ~90% of targets changed
    assert int(x["masked_weights"].sum()) == summary["heldout_predictions"]
    assert not x["segment_ids"].any()


def test_a_missing_file_is_named_and_nothing_is_written(tmp_path):
    missing = str(tmp_path / "nope.txt")
    with pytest.raises(data_lib.CorpusError, match=f"`{missing}`"):
        mlm_arrays.build([missing], [missing], str(tmp_path / "a.npz"))
    assert list(tmp_path.iterdir()) == []
