"""Progress reporting: a live bar on a terminal, one log line per `log_every` steps otherwise."""

import io
import logging

import keras
import numpy as np
import pytest

from tfeff.training.callbacks import ProgressLogger, resolve_verbose


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_auto_is_a_bar_on_a_terminal_and_lines_elsewhere():
    assert resolve_verbose("auto", _Terminal()) == (1, False)
    assert resolve_verbose("auto", io.StringIO()) == (0, True)
    assert resolve_verbose("auto", object()) == (0, True)  # no isatty: not a terminal
    for explicit in (0, 1, 2):
        assert resolve_verbose(explicit, io.StringIO()) == (explicit, False)
        assert resolve_verbose(explicit, _Terminal()) == (explicit, False)


def test_progress_logger_logs_every_n_optimizer_steps(caplog):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    x = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True)
    with caplog.at_level(logging.INFO, logger="tfeff.training"):
        history = model.fit(x, y, batch_size=4, epochs=2, verbose=0,
                            validation_data=(x[:8], y[:8]),
                            callbacks=[ProgressLogger(every=3, total_steps=20)])
    lines = [r.getMessage() for r in caplog.records if r.name == "tfeff.training"]
    steps = [line for line in lines if line.startswith("step ")]
    # 20 updates, a line at each multiple of 3, with the loss Keras reported then.
    assert [int(s.split()[1].split("/")[0]) for s in steps] == [3, 6, 9, 12, 15, 18]
    assert all("/20: loss " in s and "learning rate 0.01" in s and s.endswith("steps/s")
               for s in steps), steps
    validation = [line for line in lines if line.startswith("validation at step")]
    assert validation == [f"validation at step {n}: loss {v:.4f}"
                          for n, v in zip((10, 20), history.history["val_loss"])]


def test_progress_logger_rejects_a_bad_interval():
    with pytest.raises(ValueError, match="Received: every=0"):
        ProgressLogger(every=0, total_steps=10)
