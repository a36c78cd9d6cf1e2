"""Hugging Face RoFormer layout: a rotary tfeff `Bert` as `RoFormerForMaskedLM`.

`write_hf_bert` writes a `Bert` on a `BertBackbone(position_embedding="rotary")` in this layout:
`transformers.RoFormerForMaskedLM.from_pretrained(directory)` loads it and computes
what the tfeff model computes. RoFormer (`transformers/models/roformer`) is BERT's
layout under the prefix `roformer.` with three differences, each matching a rotary
tfeff `Bert`:

* no position table in the embeddings (word + token type, layer norm);
* every self-attention layer rotates its projected queries and keys (not its values:
  `rotary_value: false`) by their positions 0..n-1, with RoFormer's fixed base 10000
  (tfeff's `ROTARY_MAX_WAVELENGTH`), from a sinusoidal table of
  `max_position_embeddings` rows of the head size k, `[sin(p theta_0..theta_{k/2-1}),
  cos(...)]` with `theta_i = 10000 ** (-2 i / k)`, which it saves as
  `roformer.encoder.embed_positions.weight` (written here as it computes it);
* no pooler and no next-sentence head (`RoFormerForMaskedLM`): a `use_nsp` model's
  are left out.

Which features rotate together differs. Per head, RoFormer rotates features
`(2i, 2i+1)` by the angle `p theta_i` (interleaved: `[-q1, q0, -q3, q2, ...]`);
tfeff's `apply_rotary` rotates features `(i, i + k/2)` by the same angle (rotate-half).
With `sigma(2i) = i` and `sigma(2i+1) = i + k/2` (`rotary_pair_order`), RoFormer's
query and key projections are tfeff's with each head's output features taken in the
order `sigma`: `q' = q[sigma]`. Then, writing `R` for tfeff's rotation and `R'` for
RoFormer's, for every i

    R'(q')[2i]   = q[i] cos - q[i + k/2] sin = R(q)[i]         = R(q)[sigma(2i)]
    R'(q')[2i+1] = q[i + k/2] cos + q[i] sin = R(q)[i + k/2]   = R(q)[sigma(2i+1)]

so `R'(q[sigma]) = R(q)[sigma]`, likewise for keys, and every score
`sum_j R'(q')[j] R'(k')[j] = sum_m R(q)[m] R(k)[m]` is tfeff's, sigma being a
bijection: exact, but for the order of the score's sum. Values, the output
projection and everything else are BERT's tensors unchanged.

| Hugging Face name | tfeff weight |
|---|---|
| `roformer.embeddings.word_embeddings.weight` | `token_embedding/embeddings` |
| `roformer.embeddings.token_type_embeddings.weight` | `segment_embedding/embeddings` |
| `roformer.embeddings.LayerNorm.{weight,bias}` | `embeddings_norm/{gamma,beta}` |
| `roformer.encoder.embed_positions.weight` | none: the sinusoidal table, (max_sequence_length, k) |
| `roformer.encoder.layer.{i}.attention.self.{query,key}.{weight,bias}` | BERT's, each head's features in the order `sigma` |
| `roformer.encoder.layer.{i}...` (the rest) | as `bert.encoder.layer.{i}...` (`tfeff.convert.hf_bert`) |
| `cls.predictions.{transform.*,bias}` | as in BERT (the decoder is tied to the word embeddings) |
"""

import numpy as np

# RoFormer's rotary base: fixed in `transformers` (not a config key).
MAX_WAVELENGTH = 10000
PREFIX = "roformer"
POSITIONS = f"{PREFIX}.encoder.embed_positions.weight"
# BERT tensors that RoFormerForMaskedLM has no place for.
_LEFT_OUT = ("bert.pooler.", "cls.seq_relationship.")


def rotary_pair_order(head_dim):
    """`sigma`: RoFormer's feature j of a head is tfeff's feature `sigma[j]`.

    Args:
        head_dim: the head size k, even.

    Returns:
        The int array `[0, k/2, 1, k/2 + 1, ..., k/2 - 1, k - 1]`: RoFormer's
        interleaved pair `(2i, 2i+1)` is tfeff's rotate-half pair `(i, i + k/2)`.
    """
    half = head_dim // 2
    return np.stack([np.arange(half), np.arange(half) + half], axis=-1).reshape(-1)


def sinusoidal_table(num_positions, head_dim):
    """RoFormer's `embed_positions` table, computed as `transformers` computes it
    (`RoFormerSinusoidalPositionalEmbedding.create_weight`: float64, rounded to float32):
    row p is `[sin(p theta_i) for i < k/2] + [cos(p theta_i) for i < k/2]`,
    `theta_i = 10000 ** (-2 i / k)`."""
    j = np.arange(head_dim)
    angles = np.arange(num_positions)[:, None] / np.power(
        MAX_WAVELENGTH, 2 * (j // 2) / head_dim)[None, :]
    return np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])],
                          axis=1).astype(np.float32)


def roformer_config(bert_config):
    """RoFormer's `config.json` from BERT's (`tfeff.convert.hf_bert.hf_config`): the same
    sizes, activation, epsilon and length (`max_position_embeddings`, the rows of the
    sinusoidal table: the longest input), no absolute positions, values not rotated."""
    config = {key: value for key, value in bert_config.items()
              if key != "position_embedding_type"}
    config.update({"architectures": ["RoFormerForMaskedLM"], "model_type": "roformer",
                   "embedding_size": bert_config["hidden_size"], "rotary_value": False})
    return config


def roformer_pairs(bert_pairs, head_dim):
    """RoFormer's `(hf name, tfeff variable, to_hf, from_hf)` from BERT's
    (`tfeff.convert.hf_bert`'s pairs of a rotary `Bert`, which hold no position table):
    `bert.` becomes `roformer.`, the pooler and next-sentence head are left out, and
    the query and key projections take each head's features in the order
    `rotary_pair_order(head_dim)` (their tfeff kernels `(d, heads, k)` and biases
    `(heads, k)` end in the head's features)."""
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
