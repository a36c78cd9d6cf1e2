"""`make_strategy`: the tf.distribute strategy named by `--strategy`."""

import json
import os

import tensorflow as tf

STRATEGIES = ("default", "mirrored", "multi_worker")


def make_strategy(name="default", devices=None):
    """Returns a `tf.distribute.Strategy`.

    Args:
        name: `"default"` (no distribution), `"mirrored"` (one host, all local
            GPUs, or `devices`) or `"multi_worker"` (`TF_CONFIG` describes the
            cluster).
        devices: optional device list for `"mirrored"` (e.g. two logical CPUs).
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices=devices)
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
