"""A float64 NumPy BERT forward pass over Hugging Face-named tensors (the test reference)."""

import math

import numpy as np


def _layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _gelu(x, act):
    if act == "gelu":
        erf = np.vectorize(math.erf)
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    if act == "gelu_new":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return np.maximum(x, 0)


def hf_bert_forward(t, cfg, token_ids, segment_ids, padding_mask, rotate=None):
    """BertModel's sequence output, written from the Hugging Face definition.

    `rotate`: a function of `(batch, n, heads, head_dim)` queries or keys
    (rotary positions, as RoFormer); the position table is then not used.
    """
    t = {k: np.asarray(v, np.float64) for k, v in t.items()}
    eps, heads = cfg["layer_norm_eps"], cfg["num_attention_heads"]
    n = token_ids.shape[1]
    x = (t["bert.embeddings.word_embeddings.weight"][token_ids]
         + t["bert.embeddings.token_type_embeddings.weight"][segment_ids])
    if rotate is None:
        x = x + t["bert.embeddings.position_embeddings.weight"][:n][None]
    x = _layer_norm(x, t["bert.embeddings.LayerNorm.weight"], t["bert.embeddings.LayerNorm.bias"],
                    eps)
    bias = np.where(padding_mask[:, None, None, :] > 0, 0.0, -1e9)
    for i in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{i}."

        def lin(h, name):
            return h @ t[p + name + ".weight"].T + t[p + name + ".bias"]

        def split(h, turn=False):
            b, n_, d = h.shape
            h = h.reshape(b, n_, heads, d // heads)
            if turn and rotate is not None:
                h = rotate(h)
            return h.transpose(0, 2, 1, 3)

        q, k, v = (split(lin(x, f"attention.self.{w}"), turn=w != "value")
                   for w in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = _layer_norm(x + lin(ctx, "attention.output.dense"),
                        t[p + "attention.output.LayerNorm.weight"],
                        t[p + "attention.output.LayerNorm.bias"], eps)
        h = _gelu(lin(x, "intermediate.dense"), cfg["hidden_act"])
        x = _layer_norm(x + lin(h, "output.dense"), t[p + "output.LayerNorm.weight"],
                        t[p + "output.LayerNorm.bias"], eps)
    return x


def hf_mlm_logits(t, cfg, sequence_output, positions):
    t = {k: np.asarray(v, np.float64) for k, v in t.items()}
    h = np.take_along_axis(sequence_output, positions[:, :, None], axis=1)
    h = _gelu(h @ t["cls.predictions.transform.dense.weight"].T
              + t["cls.predictions.transform.dense.bias"], cfg["hidden_act"])
    h = _layer_norm(h, t["cls.predictions.transform.LayerNorm.weight"],
                    t["cls.predictions.transform.LayerNorm.bias"], cfg["layer_norm_eps"])
    return h @ t["bert.embeddings.word_embeddings.weight"].T + t["cls.predictions.bias"]
