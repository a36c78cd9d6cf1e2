"""Configuration of an ALONE input embedding (`input_embedding: alone`), shared by families."""

import dataclasses

from tfeff.config.base import ConfigError
from tfeff.config.base import join
from tfeff.config.base import one_of
from tfeff.config.base import positive
from tfeff.config.base import positive_keys


@dataclasses.dataclass
class AloneConfig:
    """`tfeff.layers.AloneEmbedding` settings (defaults: the paper's, Takase & Kobayashi 2020).

    Args:
        base_dim: size D_o of the shared vector and the filters; 0: the embedding size.
        intermediate_dim: inner size D_inter of the FFN.
        num_codebooks: M, the number of codebooks (paper: 8).
        codebook_size: c, columns per codebook, below 2**31 (paper: 64).
        filter_type: `binary` or `real`.
        zero_probability: the binary filters' zero rate, in (0, 1) (paper: 0.5).
        dropout_rate: dropout after the FFN's ReLU, in [0, 1).
        seed: the filters' non-negative seed, part of the model (restoring with another fails).
    """

    base_dim: int = 0
    intermediate_dim: int = 4096
    num_codebooks: int = 8
    codebook_size: int = 64
    filter_type: str = "binary"
    zero_probability: float = 0.5
    dropout_rate: float = 0.1
    seed: int = 0

    def validate(self, prefix):
        positive(self.base_dim, join(prefix, "base_dim"), allow_zero=True)
        positive_keys(self, prefix, "intermediate_dim", "num_codebooks", "codebook_size")
        if self.codebook_size >= 2**31:
            raise ConfigError(f"`{join(prefix, 'codebook_size')}` must be < 2**31")
        one_of(self.filter_type, ("binary", "real"), join(prefix, "filter_type"))
        if not 0 < self.zero_probability < 1:
            raise ConfigError(f"`{join(prefix, 'zero_probability')}` must be in (0, 1)")
        if not 0 <= self.dropout_rate < 1:
            raise ConfigError(f"`{join(prefix, 'dropout_rate')}` must be in [0, 1)")
        positive(self.seed, join(prefix, "seed"), allow_zero=True)

    def layer_kwargs(self):
        """`AloneEmbedding` keyword arguments (no `base_dim` when 0: the model's default)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v or k != "base_dim"}
