"""The package's shape: rooms import only downward, and no module circle exists.

The layers contract is `.importlinter` (import-linter, in the `test` extra):
testing > bin > evaluation > export | convert > training > models > layers > losses > config
> data > backend (testing on top: no module of tfeff imports it).
The circle check covers what a layers contract cannot see: modules of one room
importing each other in a loop (function-level imports included).
Outside the package, `benchmarks/` and `tools/` name nothing of `tests/`.
"""

import glob
import os
import re
import subprocess
import sys

import grimp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_linter_layers_contract_is_kept():
    lint = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    result = subprocess.run([lint, "--config", os.path.join(ROOT, ".importlinter")],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "1 kept, 0 broken" in result.stdout


def _cycle(graph, modules):
    """One import cycle among `modules` as a list, or None (iterative DFS)."""
    state = {}
    for start in sorted(modules):
        if start in state:
            continue
        stack = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        path = [start]
        state[start] = "open"
        while stack:
            node, children = stack[-1]
            child = next((c for c in children if c in modules), None)
            if child is None:
                state[node] = "done"
                stack.pop()
                path.pop()
            elif state.get(child) == "open":
                return path[path.index(child):] + [child]
            elif child not in state:
                state[child] = "open"
                path.append(child)
                stack.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
    return None


def test_no_module_import_cycle():
    graph = grimp.build_graph("tfeff")
    # A package's __init__ re-exports its modules: an import of `tfeff.x` from inside
    # `tfeff.x.y` is not a design circle, so package nodes are left out.
    modules = {m for m in graph.modules
               if not os.path.exists(os.path.join(ROOT, *m.split("."), "__init__.py"))}
    cycle = _cycle(graph, modules)
    assert cycle is None, " -> ".join(cycle)


def test_benchmarks_and_tools_never_name_the_tests():
    """`benchmarks/` and `tools/` depend on the package, never on `tests/`: what they
    check with (the GPU suite's LSTM parity, float64 references, tolerances) lives in
    `tfeff.testing`, which a machine without the test folder has too."""
    naming = re.compile(r"\bfrom tests\b|\bimport tests\b|\btests\.\w|[\"']tests[\"'/]|\btests/")
    found = []
    for folder in ("benchmarks", "tools"):
        for path in sorted(glob.glob(os.path.join(ROOT, folder, "**", "*.py"), recursive=True)):
            with open(path, encoding="utf-8") as f:
                found += [f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}"
                          for n, line in enumerate(f, 1) if naming.search(line)]
    assert not found, "\n".join(found)
