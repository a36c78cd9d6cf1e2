"""A resumable run of named parts, each in a process of its own, inside a deadline.

What `benchmarks/gpu_suite.py` runs its parts with, written without its parts:

* A part is a name and a command line. It has succeeded when its process
  exits 0; it writes its own result, `OUT/parts/NAME.json`, and a part whose
  file exists is not run again, so the same run started again resumes.
* Each part runs under a time limit; a part that runs past it is killed with
  its children (its process group) and counts as failed.
* A deadline (for a job's time limit) stops the run in time: no part starts
  with less than `minimum_part_s` before it, and a part still running at it
  is killed and left for the next run, not counted as failed.
* An archive carries the results folder from one machine to the next: one
  .tar.gz of the named files and `parts/*.json`, written atomically, and
  unpacked only when every member is one of those names.

Nothing here imports more than the standard library.
"""

import json
import os
import signal
import subprocess
import sys
import tarfile
import time

# A part is not started with less time than this before the deadline.
MINIMUM_PART_S = 60


def part_path(out, name):
    """The file part `name` writes into the results folder `out`."""
    return os.path.join(out, "parts", f"{name}.json")


def run_process(argv, env, timeout):
    """`(ok, stderr tail)` of one process; `(False, None)` if it ran past `timeout`
    seconds (its process group, children included, is killed)."""
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return False, None
    return process.returncode == 0, stderr[-2000:]


def run_parts(parts, out, limit_s, deadline_s=None, after_each=None,
              minimum_part_s=MINIMUM_PART_S):
    """Runs `parts`, `[(name, argv, env)]` in order, each once: `(failed, left)`.

    A part whose file exists (`part_path`) is skipped ("done earlier"). Each
    runs under `limit_s`, and under what is left of `deadline_s` (seconds from
    this call) when that is less. `failed`: the parts whose process failed or
    ran past `limit_s`; `left`: the parts not started within `minimum_part_s`
    of the deadline, or cut by it. `after_each()` runs after every part that
    ran (to rewrite the results and the archive). Progress goes to stdout, a
    failed part's stderr tail to stderr.
    """
    os.makedirs(os.path.join(out, "parts"), exist_ok=True)
    began = time.perf_counter()
    failed, left = [], []
    for name, argv, env in parts:
        if os.path.exists(part_path(out, name)):
            print(f"{name}: done earlier", flush=True)
            continue
        timeout = limit_s
        if deadline_s is not None:
            timeout = min(limit_s, deadline_s - (time.perf_counter() - began))
            if timeout < minimum_part_s:
                left.append(name)
                continue
        start = time.perf_counter()
        ok, detail = run_process(argv, env, timeout)
        seconds = time.perf_counter() - start
        if ok:
            print(f"{name}: {seconds:.0f} s", flush=True)
        elif detail is None and timeout < limit_s:  # cut by the deadline, not its own limit
            left.append(name)
            print(f"{name}: cut at the deadline after {seconds:.0f} s", flush=True)
        else:
            failed.append(name)
            print(f"{name}: FAILED after {seconds:.0f} s (not written; a rerun retries it)"
                  f"\n{detail or f'over the {limit_s} s limit'}", file=sys.stderr, flush=True)
        if after_each is not None:
            after_each()
    return failed, left


def write_archive(out, path, names):
    """The files `names` of the results folder `out` (those that exist; "parts": its
    `parts/*.json`) as one .tar.gz at `path`, members named relative to `out`;
    written atomically."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for name in names:
                if name == "parts":
                    for part in sorted(os.listdir(os.path.join(out, "parts"))):
                        if part.endswith(".json"):
                            tar.add(os.path.join(out, "parts", part), f"parts/{part}")
                elif os.path.isfile(os.path.join(out, name)):
                    tar.add(os.path.join(out, name), name)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def unpack_archive(path, out, names, check_results, what):
    """Unpacks an archive of `write_archive(..., names)` into `out`; a part file `out`
    has already is kept.

    `check_results(data)` sees the archive's `results.json` first and raises
    ValueError when it belongs to another run (say, another preset). Raises
    ValueError (the caller names the file) for a file that is not such an
    archive (`what` names the command that writes them), or a member outside
    `names`. Nothing is written before every member is checked.
    """
    if not os.path.isfile(path):
        raise ValueError("no such file")
    try:
        with tarfile.open(path, "r:gz") as tar:
            members = tar.getmembers()
            for m in members:
                top = m.name.split("/")[0]
                if (top not in names or not m.isfile() or os.path.isabs(m.name)
                        or ".." in m.name.split("/")
                        or (top == "parts" and (m.name.count("/") != 1
                                                or not m.name.endswith(".json")))):
                    raise ValueError(f"member {m.name!r} is not part of a results archive "
                                     f"({what})")
            results = next((m for m in members if m.name == "results.json"), None)
            if results is None:
                raise ValueError(f"no results.json in it (not a {what})")
            check_results(json.load(tar.extractfile(results)))
            os.makedirs(os.path.join(out, "parts"), exist_ok=True)
            for m in members:
                target = os.path.join(out, m.name)
                if m.name.startswith("parts/") and os.path.exists(target):
                    continue
                with open(target + ".tmp", "wb") as f:
                    f.write(tar.extractfile(m).read())
                os.replace(target + ".tmp", target)
    except (tarfile.TarError, EOFError, OSError, KeyError, json.JSONDecodeError) as e:
        raise ValueError(f"not a readable .tar.gz results archive ({type(e).__name__}: {e})")
