"""The log-uniform (Zipfian) candidate sampler of sampled softmax, on every backend.

TensorFlow draws with `tf.random.log_uniform_candidate_sampler(unique=True)`
(distinct classes; no XLA kernel, so a layer that samples cannot be compiled
there). Other backends have no such sampler: there `log_uniform_sample` draws
with replacement (TensorFlow's `unique=False`: a class drawn twice counts
twice, its expected count is `num_sampled * P(c)`), in static shapes that
`jax.jit` compiles, from a `keras.random.SeedGenerator`.

* `log_uniform_probability` and `log_uniform_sample`: the distribution and
  its portable sampler.
* `sampler_compiles` and `sampler_seed_generator`: what a layer that samples
  sets up (whether it supports XLA, the sampler's state off TensorFlow).
* `log_uniform_candidates`: one draw with its expected counts.

TensorFlow is imported only inside the functions, on TensorFlow.
"""

import math

import keras
from keras import ops


def log_uniform_probability(ids, range_max):
    """`P(c) = log((c + 2) / (c + 1)) / log(range_max + 1)`, float32, of int `ids`."""
    ids = ops.cast(ids, "float32")
    return ops.log1p(1.0 / (ids + 1.0)) / math.log(range_max + 1.0)


def log_uniform_sample(num_sampled, range_max, seed=None):
    """`num_sampled` int32 classes drawn with replacement from `log_uniform_probability`.

    Inverse-CDF sampling, as TensorFlow's `LogUniformSampler`:
    `c = floor(exp(u * log(range_max + 1))) - 1` for `u ~ U[0, 1)`. `seed` is
    an int, None or a `keras.random.SeedGenerator` (needed under `jax.jit`).
    """
    u = keras.random.uniform((num_sampled,), dtype="float32", seed=seed)
    c = ops.floor(ops.exp(u * math.log(range_max + 1.0))) - 1.0
    return ops.clip(ops.cast(c, "int32"), 0, range_max - 1)


def sampler_compiles():
    """Whether `log_uniform_candidates` compiles: False on TensorFlow (its candidate
    sampler has no XLA kernel), True elsewhere (the portable sampler compiles)."""
    return keras.backend.backend() != "tensorflow"


def sampler_seed_generator(seed):
    """The state of `log_uniform_candidates` off TensorFlow: a
    `keras.random.SeedGenerator(seed)`; None on TensorFlow, whose sampler keeps
    its own state (seeded by the int `seed`)."""
    if keras.backend.backend() == "tensorflow":
        return None
    return keras.random.SeedGenerator(seed)


def log_uniform_candidates(true_classes, num_sampled, range_max, seed=None,
                           seed_generator=None):
    """`(sampled (S,), true expected counts (n,), sampled expected counts (S,))`.

    `S = num_sampled` int32 classes in `[0, range_max)` for int `true_classes`
    `(n,)`, with the expected count of each true class and of each sample.
    TensorFlow: `tf.random.log_uniform_candidate_sampler` with `unique=True`,
    seeded by the int `seed` (None: nondeterministic), its outputs cut from the
    gradient. Elsewhere: `log_uniform_sample` from `seed_generator` (see
    `sampler_seed_generator`), with replacement, expected counts
    `num_sampled * log_uniform_probability`.
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        sampled, true_expected, sampled_expected = tf.random.log_uniform_candidate_sampler(
            true_classes=tf.cast(true_classes[:, None], tf.int64), num_true=1,
            num_sampled=num_sampled, unique=True, range_max=range_max, seed=seed,
        )
        return (tf.cast(tf.stop_gradient(sampled), tf.int32),
                tf.stop_gradient(true_expected[:, 0]), tf.stop_gradient(sampled_expected))
    sampled = log_uniform_sample(num_sampled, range_max, seed_generator)

    def expected(ids):
        return num_sampled * log_uniform_probability(ids, range_max)

    return sampled, expected(true_classes), expected(sampled)
