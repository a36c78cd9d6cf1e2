"""`make_strategy`: the tf.distribute strategy named by `--strategy`."""

import json
import os

import tensorflow as tf

STRATEGIES = ("default", "mirrored", "multi_worker")
# One MirroredStrategy per device set and process. A second strategy on the
# same devices restarts the collective instance keys, and its all-reduces
# then collide with the first one's cached shapes ("Shape mismatch in the
# collective instance"; tensorflow/tensorflow#62790) as soon as it trains a
# model with other variables.
_MIRRORED = {}


def make_strategy(name="default", devices=None):
    """Returns a `tf.distribute.Strategy`.

    Args:
        name: `"default"` (no distribution), `"mirrored"` (one host, all local
            GPUs, or `devices`) or `"multi_worker"` (`TF_CONFIG` describes the
            cluster).
        devices: optional device list for `"mirrored"` (e.g. two logical CPUs).
            The same `"mirrored"` device set gets the same strategy object
            in one process (see `_MIRRORED`).
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        key = tuple(devices) if devices else None
        if key not in _MIRRORED:
            _MIRRORED[key] = tf.distribute.MirroredStrategy(devices=devices)
        return _MIRRORED[key]
    if name == "multi_worker":
        raw = os.environ.get("TF_CONFIG")
        if not raw:
            raise ValueError(
                "--strategy=multi_worker needs the TF_CONFIG environment variable "
                "(cluster and task); see the README, 'Running at scale'."
            )
        try:
            json.loads(raw)
        except ValueError as e:
            raise ValueError(f"TF_CONFIG is not valid JSON: {e}") from e
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(
        f"Received an invalid value for `strategy`, expected one of {STRATEGIES}. "
        f"Received: strategy={name!r}"
    )
