"""Hugging Face RoFormer layout: a rotary tfeff `Bert` as `RoFormerForMaskedLM`.

`write_hf_bert` writes a rotary `Bert` in this layout, which computes what tfeff computes:
BERT's under `roformer.`, without position table, pooler or next-sentence head, rotating
queries and keys (not values: `rotary_value: false`) by positions 0..n-1 with the fixed base
10000, from a sinusoidal table of head size k (`embed_positions`, as `transformers` has it).

Which features rotate together differs: RoFormer rotates a head's features `(2i, 2i+1)` by
`p theta_i` (`theta_i = 10000 ** (-2i/k)`), tfeff's `apply_rotary` `(i, i + k/2)`. With
`sigma(2i) = i`, `sigma(2i+1) = i + k/2` (`rotary_pair_order`), RoFormer's query and key
projections are tfeff's with each head's features in the order sigma, `q' = q[sigma]`; with
`R` tfeff's rotation and `R'` RoFormer's,

    R'(q')[2i]   = q[i] cos - q[i + k/2] sin = R(q)[i]       = R(q)[sigma(2i)]
    R'(q')[2i+1] = q[i + k/2] cos + q[i] sin = R(q)[i + k/2] = R(q)[sigma(2i+1)]

so `R'(q[sigma]) = R(q)[sigma]`, likewise for keys, and every score
`sum_j R'(q')[j] R'(k')[j] = sum_m R(q)[m] R(k)[m]` is tfeff's (sigma is a bijection):
exact but for the order of the sum. Every other tensor is BERT's (`tfeff.convert.hf_bert`).

| Hugging Face name | tfeff weight |
|---|---|
| `roformer.encoder.embed_positions.weight` | none: the sinusoidal table, (max_sequence_length, k) |
| `roformer.encoder.layer.{i}.attention.self.{query,key}.{weight,bias}` | BERT's, each head's features in the order `sigma` |
| any other `roformer.X`, `cls.predictions.*` | BERT's `bert.X`, `cls.predictions.*` |
"""

import numpy as np

# RoFormer's rotary base: fixed in `transformers` (not a config key).
MAX_WAVELENGTH = 10000
PREFIX = "roformer"
POSITIONS = f"{PREFIX}.encoder.embed_positions.weight"
# BERT tensors that RoFormerForMaskedLM has no place for.
_LEFT_OUT = ("bert.pooler.", "cls.seq_relationship.")


def rotary_pair_order(head_dim):
    """`sigma = [0, k/2, 1, k/2 + 1, ..., k - 1]`: RoFormer's feature j of a head (size
    `head_dim`, even) is tfeff's feature `sigma[j]`."""
    half = head_dim // 2
    return np.stack([np.arange(half), np.arange(half) + half], axis=-1).reshape(-1)


def sinusoidal_table(num_positions, head_dim):
    """RoFormer's `embed_positions`, as `RoFormerSinusoidalPositionalEmbedding` computes it
    (float64, rounded to float32): row p is `[sin(p theta_i)] + [cos(p theta_i)]` for
    `i < k/2`, `theta_i = 10000 ** (-2 i / k)`."""
    j = np.arange(head_dim)
    angles = np.arange(num_positions)[:, None] / np.power(
        MAX_WAVELENGTH, 2 * (j // 2) / head_dim)[None, :]
    return np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])],
                          axis=1).astype(np.float32)


def roformer_config(bert_config):
    """RoFormer's `config.json` from BERT's (`hf_bert.hf_config`): the same sizes and length,
    no absolute positions, values not rotated."""
    config = {key: value for key, value in bert_config.items()
              if key != "position_embedding_type"}
    config.update({"architectures": ["RoFormerForMaskedLM"], "model_type": "roformer",
                   "embedding_size": bert_config["hidden_size"], "rotary_value": False})
    return config


def roformer_pairs(bert_pairs, head_dim):
    """RoFormer's `(hf name, tfeff variable, to_hf, from_hf)` from BERT's: `bert.` becomes
    `roformer.`, no pooler or next-sentence head, and the query and key projections take
    each head's features (the last axis of their kernels and biases) in the order sigma."""
    sigma = rotary_pair_order(head_dim)
    inverse = np.argsort(sigma)
    out = []
    for name, variable, to_hf, from_hf in bert_pairs:
        if name.startswith(_LEFT_OUT):
            continue
        if ".attention.self.query." in name or ".attention.self.key." in name:
            to_hf = (lambda w, f=to_hf: f(w[..., sigma]))
            from_hf = (lambda w, f=from_hf: f(w)[..., inverse])
        if name.startswith("bert."):
            name = f"{PREFIX}.{name[len('bert.'):]}"
        out.append((name, variable, to_hf, from_hf))
    return out
