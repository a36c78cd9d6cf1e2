"""benchmarks/runner.py with fake parts (a few lines of Python each): order, resume,
failures, time limits, the deadline, and the archive's round trip. Seconds, where the GPU
suite's real parts take minutes (tests/benchmarks/test_gpu_suite.py)."""

import json
import os
import sys
import tarfile
import time

import pytest

from tests.benchmarks import write_tar

from benchmarks import runner


def _part(out, name, body="", sleep=0.0, child_sleep=None):
    """A fake part: sleeps, optionally leaves a child sleeping in its process group,
    runs `body`, then writes its file (`body` may exit first)."""
    path = runner.part_path(str(out), name)
    code = ["import json, subprocess, sys, time"]
    if child_sleep is not None:
        child = (f"import time; open({str(out / (name + '.child'))!r}, 'w').close(); "
                 f"time.sleep({child_sleep}); "
                 f"open({str(out / (name + '.child_done'))!r}, 'w').close()")
        code.append(f"subprocess.Popen([sys.executable, '-c', {child!r}])")
    code += [f"time.sleep({sleep})", body,
             f"json.dump({{'part': {name!r}}}, open({path!r}, 'w'))"]
    return name, [sys.executable, "-c", "\n".join(code)], dict(os.environ)


def test_parts_run_in_order_once_and_a_rerun_resumes(tmp_path, capsys):
    calls = []
    parts = [_part(tmp_path, "a"), _part(tmp_path, "b", body="sys.exit('boom')"),
             _part(tmp_path, "c")]
    failed, left = runner.run_parts(parts, str(tmp_path), limit_s=30,
                                    after_each=lambda: calls.append(
                                        sorted(os.listdir(tmp_path / "parts"))))
    assert (failed, left) == (["b"], [])
    # after_each saw each part's file as it came.
    assert calls == [["a.json"], ["a.json"], ["a.json", "c.json"]]
    out, err = capsys.readouterr()
    assert "b: FAILED after" in err and "boom" in err
    # The rerun runs only the failed part (here fixed), and says so for the others.
    parts[1] = _part(tmp_path, "b")
    assert runner.run_parts(parts, str(tmp_path), limit_s=30) == ([], [])
    out, _ = capsys.readouterr()
    assert out.splitlines()[0] == "a: done earlier" and "c: done earlier" in out
    assert json.loads((tmp_path / "parts" / "b.json").read_text()) == {"part": "b"}


def test_a_part_past_its_limit_is_killed_with_its_children_and_fails(tmp_path, capsys):
    start = time.perf_counter()
    failed, left = runner.run_parts(
        [_part(tmp_path, "slow", sleep=30, child_sleep=3)], str(tmp_path), limit_s=1.5)
    assert time.perf_counter() - start < 10
    assert (failed, left) == (["slow"], [])
    assert not (tmp_path / "parts" / "slow.json").exists()
    assert "over the 1.5 s limit" in capsys.readouterr().err
    # The child had started, and was killed with the part's process group.
    assert (tmp_path / "slow.child").exists()
    time.sleep(3.5)
    assert not (tmp_path / "slow.child_done").exists()


def test_the_deadline_cuts_a_part_and_starts_none_it_cannot_finish(tmp_path, capsys):
    parts = [_part(tmp_path, "long", sleep=30), _part(tmp_path, "next")]
    failed, left = runner.run_parts(parts, str(tmp_path), limit_s=60, deadline_s=1.5,
                                    minimum_part_s=0.5)
    # "long" was cut at the deadline (left, not failed); "next" had no time to start.
    assert (failed, left) == ([], ["long", "next"])
    assert "long: cut at the deadline after" in capsys.readouterr().out
    assert not os.listdir(tmp_path / "parts")


NAMES = ("results.json", "results.md", "parts")


def _accept(data):
    if data.get("run") != "mine":
        raise ValueError("another run's results")


def test_the_archive_round_trips_and_keeps_parts_already_there(tmp_path):
    out = tmp_path / "out"
    (out / "parts").mkdir(parents=True)
    (out / "results.json").write_text('{"run": "mine"}')
    (out / "results.md").write_text("# table")
    (out / "parts" / "a.json").write_text('{"a": 1}')
    (out / "work").mkdir()
    (out / "work" / "big.npy").write_bytes(b"x" * 10)
    runner.write_archive(str(out), str(tmp_path / "r.tgz"), NAMES)
    with tarfile.open(tmp_path / "r.tgz") as tar:
        assert sorted(tar.getnames()) == ["parts/a.json", "results.json", "results.md"]
    fresh = tmp_path / "fresh"
    (fresh / "parts").mkdir(parents=True)
    (fresh / "parts" / "a.json").write_text('{"a": "newer"}')
    runner.unpack_archive(str(tmp_path / "r.tgz"), str(fresh), NAMES, _accept, "test")
    assert (fresh / "results.md").read_text() == "# table"
    assert (fresh / "parts" / "a.json").read_text() == '{"a": "newer"}'  # kept


@pytest.mark.parametrize("members, message", [
    ({"results.json": b'{"run": "theirs"}'}, "another run's results"),
    ({"results.json": b'{"run": "mine"}', "../escape.json": b"{}"},
     "member '../escape.json' is not part of a results archive (test)"),
    ({"results.json": b'{"run": "mine"}', "parts/x/y.json": b"{}"},
     "member 'parts/x/y.json' is not part of a results archive (test)"),
    ({"results.md": b"#"}, "no results.json in it (not a test)"),
    (None, "not a readable .tar.gz results archive"),
])
def test_a_foreign_archive_is_refused_before_anything_is_written(tmp_path, members, message):
    path = tmp_path / "a.tgz"
    if members is None:
        path.write_bytes(b"not a tarball")
    else:
        write_tar(path, members)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        runner.unpack_archive(str(path), str(tmp_path / "out"), NAMES, _accept, "test")
    assert not (tmp_path / "out").exists() and not (tmp_path / "escape.json").exists()
