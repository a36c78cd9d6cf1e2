"""`make_strategy` (the tf.distribute strategy named by `--strategy`) and the workers' helpers:
where this process stands in a run and what it reads."""

import dataclasses
import json
import os

import tensorflow as tf

STRATEGIES = ("default", "mirrored", "multi_worker")
# One MirroredStrategy per device set and process: a second one restarts the collective
# instance keys, whose all-reduces then collide with the first one's cached shapes
# ("Shape mismatch in the collective instance"; tensorflow/tensorflow#62790).
_MIRRORED = {}


def make_strategy(name="default", devices=None):
    """Returns a `tf.distribute.Strategy`.

    Args:
        name: `"default"` (no distribution), `"mirrored"` (one host, all local GPUs, or
            `devices`) or `"multi_worker"` (`TF_CONFIG` describes the cluster).
        devices: optional device list for `"mirrored"` (e.g. two logical CPUs); the
            same set gets the same strategy object in one process.

    Returns:
        The strategy.

    Raises:
        ValueError: `name` is unknown, or `TF_CONFIG` is unset or not JSON (`"multi_worker"`).
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
                "(cluster and task); see docs/guides/pretraining.md, 'One GPU and many'.")
        try:
            json.loads(raw)
        except ValueError as e:
            raise ValueError(f"TF_CONFIG is not valid JSON: {e}") from e
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(
        f"Received an invalid value for `strategy`, expected one of {STRATEGIES}. "
        f"Received: strategy={name!r}")


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """This process's place in the cluster."""

    num_workers: int = 1
    index: int = 0
    is_chief: bool = True
    replicas_per_worker: int = 1


def worker_info(strategy):
    """`WorkerInfo` of `strategy` (one worker unless it is multi-worker)."""
    replicas = strategy.num_replicas_in_sync
    if not getattr(strategy.extended, "_in_multi_worker_mode", lambda: False)():
        return WorkerInfo(replicas_per_worker=replicas)
    resolver = strategy.cluster_resolver
    spec = resolver.cluster_spec().as_dict()
    ordered = [(t, i) for t in ("chief", "worker") for i in range(len(spec.get(t, [])))]
    num_workers = len(ordered)
    index = ordered.index((resolver.task_type, resolver.task_id))
    return WorkerInfo(num_workers=num_workers, index=index, is_chief=index == 0,
                      replicas_per_worker=replicas // num_workers)


def barrier(strategy):
    """Returns once every worker has called it (a no-op on one worker)."""
    if worker_info(strategy).num_workers == 1:
        return

    @tf.function
    def all_reduce():
        return strategy.run(lambda: tf.constant(1.0))

    strategy.reduce(tf.distribute.ReduceOp.SUM, all_reduce(), axis=None)


def chief_first(strategy, fn):
    """Runs `fn` on the chief, then (after a barrier) on the other workers, which then read
    the files it wrote (corpus, vocabulary, fastText) instead of racing it."""
    if worker_info(strategy).is_chief:
        result = fn()
        barrier(strategy)
        return result
    barrier(strategy)
    return fn()


def shard_files(files, batch_size, file_shard):
    """`(files, batch_size)` of one worker: every `num`-th file from `index`, its rows;
    `file_shard` is None (all files, the global batch) or `(num_workers, index)`."""
    if not file_shard:
        return files, batch_size
    num, index = file_shard
    return files[index::num], batch_size // num
