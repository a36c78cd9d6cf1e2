"""The log-uniform (Zipfian) candidate sampler of sampled softmax, on every backend.

TensorFlow draws with `tf.random.log_uniform_candidate_sampler(unique=True)` (no XLA
kernel); elsewhere `log_uniform_sample` draws with replacement (`unique=False`), in
static shapes that `jax.jit` compiles.
"""

import math

import keras
from keras import ops


def log_uniform_probability(ids, range_max):
    """`P(c) = log((c + 2) / (c + 1)) / log(range_max + 1)`, float32, of int `ids`."""
    ids = ops.cast(ids, "float32")
    return ops.log1p(1.0 / (ids + 1.0)) / math.log(range_max + 1.0)


def log_uniform_sample(num_sampled, range_max, seed=None):
    """`num_sampled` int32 classes drawn with replacement from `log_uniform_probability`
    by inverse CDF, as TensorFlow's `LogUniformSampler`. `seed`: an int, None or a
    `keras.random.SeedGenerator` (needed under `jax.jit`)."""
    u = keras.random.uniform((num_sampled,), dtype="float32", seed=seed)
    c = ops.floor(ops.exp(u * math.log(range_max + 1.0))) - 1.0
    return ops.clip(ops.cast(c, "int32"), 0, range_max - 1)


def sampler_compiles():
    """Whether `log_uniform_candidates` compiles with XLA (not on TensorFlow)."""
    return keras.backend.backend() != "tensorflow"


def sampler_seed_generator(seed):
    """The sampler's state: `keras.random.SeedGenerator(seed)`, None on TensorFlow."""
    return None if keras.backend.backend() == "tensorflow" else keras.random.SeedGenerator(seed)


def log_uniform_candidates(true_classes, num_sampled, range_max, seed=None,
                           seed_generator=None):
    """`(sampled (S,), true expected counts (n,), sampled expected counts (S,))`: S =
    `num_sampled` int32 classes in `[0, range_max)` for int `true_classes` `(n,)`, on
    TensorFlow seeded by the int `seed`, elsewhere drawn from `seed_generator`."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        sampled, true_expected, sampled_expected = tf.random.log_uniform_candidate_sampler(
            true_classes=tf.cast(true_classes[:, None], tf.int64), num_true=1,
            num_sampled=num_sampled, unique=True, range_max=range_max, seed=seed)
        return (tf.cast(tf.stop_gradient(sampled), tf.int32),
                tf.stop_gradient(true_expected[:, 0]), tf.stop_gradient(sampled_expected))
    sampled = log_uniform_sample(num_sampled, range_max, seed_generator)
    return (sampled, num_sampled * log_uniform_probability(true_classes, range_max),
            num_sampled * log_uniform_probability(sampled, range_max))
