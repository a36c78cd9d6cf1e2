"""What the next-word language-model families share (`ElmoLM`, `TransformerLM`).

Their data, batches, held-out evaluation and export are a language model's
(`tfeff.training.families.shared`); a family names only when its model reads
fixed vectors (`uses_vectors`) and which model it builds (`build_model`).
"""

from tfeff.training.families import shared
from tfeff.training.families.base import Family


class LanguageModelFamily(Family):
    """A `Family` of next-word language models (`tfeff.models.LanguageModel`).

    Subclasses implement `uses_vectors(config)` (True when the model reads the
    vocabulary's fixed fastText vectors) and `build_model`.
    """

    def uses_vectors(self, config):
        raise NotImplementedError

    def check_inputs(self, config, model_dir):
        shared.check_pretrained_vectors(config, model_dir, self.uses_vectors(config))

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
        """The family's module with the data's tokenization (words, `<unk>` for the
        rest, or WordPieces)."""
        options, extra_files = super().embedder_options(config, model_dir)
        options["tokenization"] = config.data.tokenization
        return options, extra_files
