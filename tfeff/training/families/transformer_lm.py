"""The transformer LM family (`family: transformer_lm`): `TransformerLM`, ELMo's ends.

Li et al.'s larger encoders (Table 5): a bidirectional transformer LM (a
forward and a backward causal stack) or a GPT-like forward stack, with any of
ELMo's input embeddings and output layers. The data, vectors and evaluation
are a language model's (`tfeff.training.families.shared`): word models read
fixed fastText vectors when their input or output layer needs them,
WordPiece models none; evaluation ranks the vocabulary for every held-out
next (and previous) token against the unigram baseline.
"""

from tfeff.models.transformer_lm import transformer_lm_from_config
from tfeff.training.families import shared
from tfeff.training.families.base import Family

# Layers that read the fixed vectors of the vocabulary.
_VECTOR_OUTPUTS = ("continuous", "fixed")


class TransformerLMFamily(Family):
    name = "transformer_lm"
    label = "transformer LM"

    def check_inputs(self, config, model_dir):
        shared.check_pretrained_vectors(config, model_dir, self.uses_vectors(config))

    def uses_vectors(self, config):
        m = config.model
        return m.output_layer in _VECTOR_OUTPUTS or m.input_embedding == "fixed"

    def prepare_data(self, config, model_dir):
        """`shared.lm_artifacts` (the fastText vectors of the vocabulary when the model
        reads them), then the output layer's settings are checked against it."""
        artifacts = shared.lm_artifacts(config, model_dir, self.uses_vectors(config))
        shared.check_output_layer(config.model, artifacts.vocabulary)
        return artifacts

    def probe_vocabulary_size(self, config):
        m = config.model
        return max(super().probe_vocabulary_size(config), m.num_sampled + 1,
                   *(c + 1 for c in m.adaptive_cutoffs))

    def build_model(self, config, vocabulary_size, vectors_path=None):
        """The `TransformerLM` of `config` (`vectors_path`: the fixed vectors)."""
        return transformer_lm_from_config(config, vocabulary_size, vectors_path)

    def train_dataset(self, config, artifacts, position=0, file_shard=None):
        return shared.lm_dataset(config, artifacts, position, file_shard)

    def example_batch(self, config, vocabulary_size, batch_size=2, length=9, seed=0):
        return shared.lm_example_batch(vocabulary_size, batch_size, length, seed)

    def validation_dataset(self, config, artifacts):
        if artifacts.heldout_files and config.train.validation_steps:
            return shared.lm_dataset(config, artifacts, heldout=True)
        return None

    def evaluate(self, model, config, artifacts):
        return shared.evaluate_lm(model, config, artifacts)

    def eval_summary(self, results):
        return shared.lm_summary(results)

    def embedder_options(self, config, model_dir):
        """Every layer for vocabulary ids (`TokenIdsEmbedderModule`), with the data's
        tokenization (words, `<unk>` for the rest, or WordPieces)."""
        options, extra_files = super().embedder_options(config, model_dir)
        options["tokenization"] = config.data.tokenization
        return options, extra_files


TRANSFORMER_LM = TransformerLMFamily()
