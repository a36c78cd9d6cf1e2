"""The model families and their registry: `get_family(config)` -> the family's object.

Adding a family: docs/contributing/families.md.
"""

from tfeff.training.families.base import DataArtifacts
from tfeff.training.families.base import Family
from tfeff.training.families.base import RestoredModel
from tfeff.training.families.base import train_phase
from tfeff.training.families.bert import BERT
from tfeff.training.families.elmo import ELMO
from tfeff.training.families.masked_elmo import MASKED_ELMO
from tfeff.training.families.transformer_lm import TRANSFORMER_LM

FAMILIES = {family.name: family for family in (ELMO, BERT, MASKED_ELMO, TRANSFORMER_LM)}


def get_family(config_or_name):
    """The `Family` of a config (its `family`) or of a family name.

    Args:
        config_or_name: a family config (with a `family` attribute) or a family name.

    Returns:
        The registered `Family` object.

    Raises:
        ValueError: the family is unknown.
    """
    name = getattr(config_or_name, "family", config_or_name)
    if name not in FAMILIES:
        raise ValueError(f"Unknown model family {name!r}; one of {tuple(FAMILIES)}")
    return FAMILIES[name]


__all__ = ["BERT", "DataArtifacts", "ELMO", "FAMILIES", "Family", "MASKED_ELMO",
           "RestoredModel", "TRANSFORMER_LM", "get_family", "train_phase"]
