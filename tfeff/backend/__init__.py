"""What depends on the backend, one module per concern: the layers call these instead of
branching on `keras.backend.backend()` themselves.

* `checks`: input checks (ids, float inputs, mask shapes, right padding), eager or
  in a TensorFlow graph.
* `hashing`: the counter-based integer hashes of seeded draws (ALONE's filters,
  CoRe's anchors), bit-identical on every backend and under XLA.
* `nn`: masked softmax of the attention layers.
* `dynamic_rows` (TensorFlow): computing on the rows selected at run time
  (`compact_rows`; `AdaptiveSoftmax`'s tails on the rows whose targets fall in them).
* `lstm_tf` (TensorFlow) and `lstm_torch` (PyTorch, imported on the torch backend
  only): `MaskedBiLSTM`'s fused LSTMP layer, one `bidirectional_lstmp` each.

Nothing here imports the rest of tfeff.
"""
