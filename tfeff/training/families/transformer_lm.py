"""The transformer LM family (`family: transformer_lm`): `TransformerLM`, ELMo's ends.

Li et al.'s larger encoders (Table 5): a bidirectional transformer LM (a forward and a
backward causal stack) or a GPT-like forward stack, with ELMo's embeddings and outputs.
"""

from tfeff.config.elmo import TABLE_OUTPUTS
from tfeff.models import from_config
from tfeff.training.families.language_model import LanguageModelFamily


class TransformerLMFamily(LanguageModelFamily):
    name = "transformer_lm"
    label = "transformer LM"

    def uses_vectors(self, config):
        m = config.model
        return m.output_layer in TABLE_OUTPUTS or m.input_embedding == "fixed"

    def build_model(self, config, vocabulary_size, vectors_path=None):
        """The `TransformerLM` of `config` (`vectors_path`: the fixed vectors)."""
        return from_config.transformer_lm(config, vocabulary_size, vectors_path)


TRANSFORMER_LM = TransformerLMFamily()
