"""Attention arithmetic shared by the attention layers, on every backend."""

from keras import ops

# The logit of a masked entry: exp underflows to 0 in float32 and bfloat16 alike.
MASKED_LOGIT = -1e9


def masked_softmax(logits, mask):
    """Softmax over the last axis of float `logits` where the boolean `mask` (broadcast)
    is True; rows with no True entry are zero. `logits`' shape and dtype."""
    mask = ops.cast(mask, logits.dtype)
    return ops.softmax(logits + (1.0 - mask) * MASKED_LOGIT, axis=-1) * mask
