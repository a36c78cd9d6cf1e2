"""What depends on the backend, one module per concern: the layers call these instead of
branching on `keras.backend.backend()` themselves.

* `checks`: input checks (ids, float inputs, mask shapes, right padding), eager or
  in a TensorFlow graph.
* `hashing`: the counter-based integer hashes of seeded draws (ALONE's filters,
  CoRe's anchors), bit-identical on every backend and under XLA.
* `nn`: masked softmax of the attention layers.
* `ops`: small ops whose best form differs: the ids' and hashes' integer widths,
  `unique`, `scan_carries` (`tf.scan`'s semantics), `reverse_sequence`.
* `host_memory`: frozen tables in host memory (`/CPU:0` on TensorFlow) and
  their gather (`FixedEmbedding`, `AloneEmbedding`'s codebooks).
* `sampling`: sampled softmax's log-uniform candidate sampler (TensorFlow's,
  or a portable one with replacement).
* `tracking` (TensorFlow; None elsewhere): the key of the graph being traced
  (`AloneEmbedding`'s per-step table) and a fingerprint written into checkpoints.
* `dynamic_rows` (TensorFlow): computing on the rows selected at run time
  (`compact_rows`; `AdaptiveSoftmax`'s tails on the rows whose targets fall in them).
* `lstm_tf` (TensorFlow) and `lstm_torch` (PyTorch, imported on the torch backend
  only): `MaskedBiLSTM`'s fused LSTMP layer, one `bidirectional_lstmp` each.

Nothing here imports the rest of tfeff.
"""
