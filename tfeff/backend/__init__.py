"""What depends on the backend, one module per concern: the layers call these instead of
branching on `keras.backend.backend()` themselves.

Modules: `checks`, `hashing`, `nn`, `ops`, `host_memory`, `sampling`, `tracking`,
`dynamic_rows`, `lstm_tf` and `lstm_torch` (imported on torch only). Nothing here
imports the rest of tfeff.
"""
