r"""tfeff-pretrain: prepare data, pretrain, evaluate. Resumes from `--model_dir`.

    tfeff-pretrain --config configs/demo_elmo_c.yaml --model_dir runs/demo \
        [--override train.steps=2000 ...] [--strategy default|mirrored|multi_worker] \
        [--on_nan stop|skip] [--restore_fallback] [--deterministic]

Exit status: 0 when training finished, 1 on bad input or a training fault (the directory
stays resumable), 42 (`PREEMPTED_EXIT_CODE`) after SIGTERM or Ctrl-C (SIGINT), with one
line: in training, the step is finished and a checkpoint saved (a second Ctrl-C stops at
once, keeping the previous one); elsewhere the run stops at once and nothing half-written
is left. Rerunning the same command resumes.
"""

import sys

from absl import app
from absl import flags

from tfeff.bin import common

FLAGS = common.DEFINE_path("config", None, "YAML config file.", required=True)
_MODEL_DIR = common.DEFINE_path("model_dir", None, "Output/resume directory.", required=True)
_OVERRIDE = flags.DEFINE_multi_string("override", [], "key.sub=value (repeatable).")
_STRATEGY = flags.DEFINE_enum(
    "strategy", "default", ["default", "mirrored", "multi_worker"], "tf.distribute strategy.")
_ON_NAN = flags.DEFINE_enum(
    "on_nan", None, ["stop", "skip"], "A step with NaN/Inf loss or gradients: stop (naming "
    "the step) or skip its update (sets train.on_nan).")
_RESTORE_FALLBACK = flags.DEFINE_bool(
    "restore_fallback", False,
    "If the latest checkpoint is corrupted or truncated, restore the newest readable one.")
_DETERMINISTIC = flags.DEFINE_bool(
    "deterministic", None,
    "Enable TensorFlow op determinism (sets train.deterministic): bit-identical resumes on CPU.")

# tfeff.training.fault_tolerance's, without importing TensorFlow: every stop's status.
PREEMPTED_EXIT_CODE = 42
# A stop outside a training step (which saves a checkpoint and stops by itself).
_STOPPED = ("stopped by {signal} outside a training step (preparing the data, building, "
            "evaluating; or a second Ctrl-C): nothing half-written is left; rerun the same "
            "command to resume")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    from tfeff.config import load_config
    from tfeff.training import get_family
    from tfeff.training import pretrain

    def body():
        overrides = list(_OVERRIDE.value)
        if _ON_NAN.value is not None:
            overrides.append(f"train.on_nan={_ON_NAN.value}")
        if _DETERMINISTIC.value is not None:
            overrides.append(f"train.deterministic={str(_DETERMINISTIC.value).lower()}")
        config = load_config(FLAGS.value, overrides)
        results = pretrain(config, _MODEL_DIR.value, strategy=_STRATEGY.value,
                           restore_fallback=_RESTORE_FALLBACK.value)
        if results.get("preempted"):
            print(f"preempted: saved the checkpoint of step {results['step']}; rerun the same "
                  "command to resume", file=sys.stderr)
            sys.exit(PREEMPTED_EXIT_CODE)
        for line in get_family(config).summary_lines(results):
            print(line)

    common.run_main(body)


def run():
    common.run_app(main, stopped=_STOPPED, stop_status=PREEMPTED_EXIT_CODE)


if __name__ == "__main__":
    run()
