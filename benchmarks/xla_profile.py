"""Where a JAX training step's time goes, from a profiler trace (no TensorBoard needed).

`jax.profiler.trace(directory)` writes an XSpace (`*.xplane.pb`); JAX's own
`jax.profiler.ProfileData` reads it. `summarize` turns the trace of a few
training steps into numbers that say what limits the step:

* the device's busy time per step (the union of its ops' intervals) against
  the step's wall time: a device idle most of the step waits on the host
  (Python, dispatch, input);
* the ops the device ran per step and their mean duration: thousands of
  microsecond ops (a recurrent cell stepped through time) are bound by
  launch latency, not by arithmetic;
* the ops that took the most time, by name, with their share of the busy time.

On a GPU the ops are those of the device plane's `XLA Ops` line (or its
streams' kernels); on a CPU, the XLA CPU client's threads' events.
"""

import glob
import os
import re

# Bookkeeping events of the CPU client's threads, and its executor's spans that
# enclose the ops, not work of their own.
_SKIP = ("ThreadpoolListener", "end: ", "ThunkExecutor")


def _ops(data):
    """`[(name, start_ns, duration_ns)]` of the device's work, and where they came from."""
    devices = [p for p in data.planes if p.name.startswith("/device:")]
    planes = devices or [p for p in data.planes if p.name == "/host:CPU"]
    events, source = [], []
    for plane in planes:
        lines = list(plane.lines)
        chosen = ([line for line in lines if line.name == "XLA Ops"]
                  or [line for line in lines if line.name.startswith("Stream")]
                  or [line for line in lines if "PjRt" in line.name or "XLA" in line.name])
        for line in chosen:
            source.append(f"{plane.name} {line.name}")
            events += [(e.name, e.start_ns, e.duration_ns) for e in line.events
                       if not e.name.startswith(_SKIP)]
    return events, source


def busy_ns(intervals):
    """Length of the union of `[(start, duration)]` intervals."""
    total, end = 0.0, None
    for start, duration in sorted(intervals):
        stop = start + duration
        if end is None or start > end:
            total += duration
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def kind(name):
    """An op's kind: its name without the numbers XLA gives it, `.N` in HLO and on
    the CPU, `_N` in a GPU kernel's name (`fusion.12`, `loop_add_fusion_3` ->
    `fusion`, `loop_add_fusion`); a GPU library kernel's name is kept whole."""
    return re.sub(r"([._]\d+)+$", "", name)


def summarize(directory, steps, step_s=None, top=10):
    """The newest trace under `directory`, of `steps` training steps, as a dict:
    `busy_ms_per_step`, `ops_per_step`, `mean_op_us`, `busy_fraction` (of
    `step_s`, when given), `top` (`[{name, ms_per_step, calls_per_step, share}]`),
    `kinds` (the same for the ops' kinds, `kind`: the twelve layers'
    `fusion.12`, `fusion.40`, ... count as one) and `source`
    (the planes and lines read)."""
    from jax.profiler import ProfileData

    traces = sorted(glob.glob(os.path.join(directory, "**", "*.xplane.pb"), recursive=True),
                    key=os.path.getmtime)
    if not traces:
        raise FileNotFoundError(f"{directory}: no *.xplane.pb trace")
    events, source = _ops(ProfileData.from_file(traces[-1]))
    if not events:
        raise ValueError(f"{traces[-1]}: no device op events in {source or 'any plane'}")
    busy = busy_ns([(start, duration) for _, start, duration in events])
    by_name = {}
    for name, _, duration in events:
        total, calls = by_name.get(name, (0.0, 0))
        by_name[name] = (total + duration, calls + 1)
    by_kind = {}
    for name, (total, calls) in by_name.items():
        kind_total, kind_calls = by_kind.get(kind(name), (0.0, 0))
        by_kind[kind(name)] = (kind_total + total, kind_calls + calls)
    summed = sum(total for total, _ in by_name.values())

    def ranked(table):
        return [{"name": name, "ms_per_step": total / steps / 1e6,
                 "calls_per_step": calls / steps, "share": total / summed}
                for name, (total, calls) in sorted(table.items(),
                                                   key=lambda item: -item[1][0])[:top]]

    out = {"steps": steps, "busy_ms_per_step": busy / steps / 1e6,
           "ops_per_step": len(events) / steps,
           "mean_op_us": summed / len(events) / 1e3,
           "top": ranked(by_name), "kinds": ranked(by_kind), "source": source}
    if step_s:
        out["busy_fraction"] = busy / steps / 1e9 / step_s
    return out


def trace_steps(step, steps, directory, step_s=None):
    """Traces `steps` calls of `step` (a training step that blocks until it is done)
    with `jax.profiler` into `directory`; `{"profile": summarize(...)}`, or
    `{"profile_error": ...}`: a profiler that cannot trace costs the profile, not the
    timing it follows."""
    import jax

    try:
        with jax.profiler.trace(directory):
            for _ in range(steps):
                step()
        return {"profile": summarize(directory, steps, step_s)}
    except Exception as e:  # whatever the profiler or the trace's reader raised
        return {"profile_error": f"{type(e).__name__}: {e}"}


def table(summary, step_s):
    """Markdown: the busy time against the step, then the top ops."""
    lines = [f"Device busy {summary['busy_ms_per_step']:.1f} ms of a {1000 * step_s:.1f} ms "
             f"step ({100 * summary['busy_ms_per_step'] / 1000 / step_s:.0f}%); "
             f"{summary['ops_per_step']:,.0f} ops per step, {summary['mean_op_us']:.1f} us "
             "each on average.", "",
             *_op_rows("op", summary["top"])]
    if summary.get("kinds"):
        lines += ["", *_op_rows("op kind", summary["kinds"])]
    return "\n".join(lines)


def _op_rows(heading, ops):
    """A Markdown table of `ops` (`summarize`'s `top` or `kinds`)."""
    return [f"| {heading} | ms per step | calls per step | share of op time |",
            "|---|---|---|---|",
            *(f"| `{op['name'][:60]}` | {op['ms_per_step']:.2f} | "
              f"{op['calls_per_step']:,.0f} | {100 * op['share']:.1f}% |" for op in ops)]
