"""The contract of tfeff's output heads: what a language model asks its last layer.

Every output head (`FullSoftmax`, `AdaptiveSoftmax`, `SampledSoftmax`,
`ContinuousOutput`) answers the same questions by the same names, so a model
calls them without asking which head it holds:

* `features(hidden)` -> what the head scores at each position, from the
  encoder's hidden states `(..., input_dim)`: the hidden states themselves
  for a softmax head, the predicted target vectors for `ContinuousOutput`. A
  model's outputs are these features; its loss and evaluation start there.
* `per_position_loss(features, targets, mask=None, training=False)` -> the
  float32 loss of each target id, shaped like `targets`, 0 where `mask` is
  False: the negative log-likelihood (sampled in training for
  `SampledSoftmax`), or the distance to the target's fixed vector.
* `ranking_scores(features)` -> float32 `(..., vocabulary_size)`, higher for a
  likelier target: log-probabilities, or the cosine similarity with every
  fixed target vector.
* `log_prob(features)` -> the log-distribution `(..., vocabulary_size)`
  (`ContinuousOutput`, which has none, raises `ValueError`).

`targets` are int class ids in `[0, vocabulary_size)` where `mask` is True
(other entries may hold any value). `tests/layers/test_softmax_contract.py`
checks every head against this contract.
"""


class OutputHead:
    """The output-head contract (mix in before `keras.layers.Layer`), as the module describes."""

    def features(self, hidden):
        """What the head scores at each position, from hidden states `(..., input_dim)`."""
        raise NotImplementedError

    def per_position_loss(self, features, targets, mask=None, training=False):
        """float32 loss of each target id `targets.shape` (0 where `mask` is False)."""
        raise NotImplementedError

    def ranking_scores(self, features):
        """float32 `(..., vocabulary_size)` scores, higher for a likelier target."""
        raise NotImplementedError

    def log_prob(self, features):
        """The log-distribution `(..., vocabulary_size)` (ValueError if the head has none)."""
        raise NotImplementedError
