"""Progress against the whole run: a line redrawn on a terminal, one log line per
`log_every` steps otherwise, with the time elapsed and left."""

import io
import logging
import re

import keras
import numpy as np
import pytest

from tfeff.training.callbacks import ProgressLogger, format_duration, resolve_verbose


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_auto_is_a_live_line_on_a_terminal_and_log_lines_elsewhere():
    assert resolve_verbose("auto", _Terminal()) == (0, "live")
    assert resolve_verbose("auto", io.StringIO()) == (0, "lines")
    assert resolve_verbose("auto", object()) == (0, "lines")  # no isatty: not a terminal
    for explicit in (0, 1, 2):
        assert resolve_verbose(explicit, io.StringIO()) == (explicit, None)
        assert resolve_verbose(explicit, _Terminal()) == (explicit, None)


def test_durations_read_as_a_person_would_say_them():
    assert [format_duration(s) for s in (0, 42.4, 59.6, 425, 3599, 3600, 11220, -3)] == [
        "0s", "42s", "1m00s", "7m05s", "59m59s", "1h00m", "3h07m", "0s"]


def _fit(callback, initial_epoch=0):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    x = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True)
    if initial_epoch:  # a resumed run: the optimizer has made its updates already
        model.optimizer.build(model.trainable_variables)
        model.optimizer.iterations.assign(10 * initial_epoch)
    return model.fit(x, y, batch_size=4, epochs=2, verbose=0, initial_epoch=initial_epoch,
                     validation_data=(x[:8], y[:8]), callbacks=[callback])


def test_progress_logger_logs_every_n_optimizer_steps(caplog):
    with caplog.at_level(logging.INFO, logger="tfeff.training"):
        history = _fit(ProgressLogger(every=3, total_steps=20))
    lines = [r.getMessage() for r in caplog.records if r.name == "tfeff.training"]
    steps = [line for line in lines if line.startswith("step ")]
    # 20 updates, a line at each multiple of 3, with the loss Keras reported then.
    assert [int(s.split()[1].split("/")[0]) for s in steps] == [3, 6, 9, 12, 15, 18]
    pattern = (r"step (\d+)/20 \((\d+)%\): loss [\d.]+, learning rate 0.01, [\d.]+ steps/s, "
               r"elapsed \d+s")
    for i, line in enumerate(steps):
        match = re.fullmatch(pattern + ("" if i == 0 else r", ETA \d+s"), line)
        assert match and int(match[2]) == 100 * int(match[1]) // 20, line
    validation = [line for line in lines if line.startswith("validation at step")]
    assert validation == [f"validation at step {n}: loss {v:.4f}"
                          for n, v in zip((10, 20), history.history["val_loss"])]


def test_a_resumed_run_counts_from_where_it_resumed(caplog):
    with caplog.at_level(logging.INFO, logger="tfeff.training"):
        _fit(ProgressLogger(every=5, total_steps=20), initial_epoch=1)
    steps = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    assert [s.split(":")[0] for s in steps] == ["step 15/20 (75%)", "step 20/20 (100%)"]
    assert "ETA" not in steps[0] and steps[1].endswith("ETA 0s")


def test_on_a_terminal_one_line_is_redrawn_against_the_whole_run():
    terminal = _Terminal()
    _fit(ProgressLogger(every=3, total_steps=20, live=True, stream=terminal))
    text = terminal.getvalue()
    assert text.startswith("\rstep ") and text.endswith("\n")
    drawn = [part.split("\x1b[K")[0] for part in text.split("\r")[1:]]
    assert drawn[-1].startswith("step 20/20 (100%): loss ")  # the last step always drawn
    assert all(re.match(r"step \d+/20 \(\d+%\)", d) for d in drawn), drawn
    assert text.count("\nvalidation at step 10: loss ") == 1
    assert text.count("\nvalidation at step 20: loss ") == 1


def test_progress_logger_rejects_a_bad_interval():
    with pytest.raises(ValueError, match="Received: every=0"):
        ProgressLogger(every=0, total_steps=10)
