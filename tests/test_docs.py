"""The documentation cannot drift from the code.

The docs site builds with `mkdocs build --strict` (a broken link, a missing page, an
API docstring griffe cannot parse, or a documented parameter the signature lacks fails
it); the generated references equal what the code gives today; every public name has
its API entry; the README stays a short package description whose links resolve. The
Python blocks of README.md and docs/ run as tests of their own (root conftest.py).
"""

import ast
import glob
import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

API_MODULES = ("layers", "losses", "models", "data", "config", "training", "export", "convert")


def _all(module):
    """`__all__` of `tfeff.<module>`, read statically (the docs build imports nothing),
    with its TensorFlow-only names (`TENSORFLOW_ONLY`: public where TensorFlow is)."""
    with open(os.path.join(REPO, "tfeff", module, "__init__.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    values = {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
              if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
              and node.targets[0].id in ("__all__", "TENSORFLOW_ONLY")}
    assert "__all__" in values, f"tfeff.{module} has no __all__"
    return values["__all__"] + list(values.get("TENSORFLOW_ONLY", ()))


# `mkdocs build` in a process where importing TensorFlow, Keras or tfeff fails: the API
# pages come from static analysis of the source.
_BUILD = """
import sys
for name in ("tensorflow", "keras", "tfeff"):
    sys.modules[name] = None
from mkdocs.__main__ import cli
sys.argv = ["mkdocs", "build", "--strict", "-d", sys.argv[1]]  # not -q: it hides warnings
cli()
"""


def test_docs_site_builds_strictly_without_importing_the_package(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-c", _BUILD, str(tmp_path / "site")],
                            cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert os.path.exists(tmp_path / "site" / "api" / "layers" / "index.html")


def test_generated_references_are_current():
    """`python -m tools.docs_reference --check`: the command-line page equals the binaries'
    absl flags and the configuration page the config dataclasses; an undocumented flag
    or key is an error of its own."""
    result = subprocess.run([sys.executable, "-m", "tools.docs_reference", "--check"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def _docs_reference():
    from tools import docs_reference

    return docs_reference


def test_recipe_tables_compare_the_paper_with_the_configs(tmp_path):
    """A row's status comes from the configs where the paper's value is given; a claim
    the configs contradict, a difference without its reason or a key no config has is
    refused, naming the spec's row. Every row cites the paper's text, or says it is
    silent and names the other source of its value, or is `unverified`."""
    docs_reference = _docs_reference()
    spec = tmp_path / "spec.yaml"

    def table(*rows, sources="{The authors' code: 'their release'}"):
        spec.write_text(f"sources: {sources}\nconfigs: {{ELMo-C: elmo_c.yaml, ELMo-A: "
                        "elmo_a.yaml}\nrows:\n" + "".join(rows))
        return docs_reference.recipe_table(str(spec))

    units = "- {setting: Cells, paper: '4096', cite: Table 2, key: model.units, value: 4096}\n"
    code = ("- {setting: Clipping, cite: silent, source: \"The authors' code: 1.0\", "
            "key: train.clipnorm, value: 1.0}\n")
    rendered = table(units, code)
    assert "| Cells | 4096 (Table 2) | `model.units` | 4096 | same |  |" in rendered
    assert ("| Clipping | the text is silent; The authors' code: 1.0 | `train.clipnorm` | 1 | "
            "same |  |") in rendered
    assert rendered.endswith("Besides the paper's text: **The authors' code**, their "
                             "release.\n")
    batch = ("- {setting: Batch, paper: 768 per card, cite: '§4.1, Table 2', "
             "key: data.batch_size, value: {ELMo-C: 3072, ELMo-A: 768}, "
             "why: ELMo-A's is 4 cards' worth}\n")
    assert ("| Batch | 768 per card (§4.1, Table 2) | `data.batch_size` | ELMo-C: 3072 · "
            "ELMo-A: 1024 | **differs** | ELMo-A's is 4 cards' worth |") in table(code, batch)
    error = docs_reference.UndocumentedError
    with pytest.raises(error, match=r"row 1 \('Batch'\): a row that is 'differs' must say"):
        table(batch.replace(", why: ELMo-A's is 4 cards' worth", ""), code)
    with pytest.raises(error, match=r"row 2 \('Cells'\): says 'differs', but the configs"):
        table(code, units.replace("value: 4096", "value: 4096, status: differs"))
    with pytest.raises(error, match=r"row 1 \('Cells'\): no config key `model.cells`"):
        table(units.replace("model.units", "model.cells"), code)
    with pytest.raises(error, match=r"`status` must be one of"):
        table(code, "- {setting: Hardware, paper: 4 GPUs, cite: Table 2}\n")
    with pytest.raises(error, match=r"a row with a `key` shows the configs' values"):
        table(code, "- {setting: Cells, paper: '4096', cite: Table 1, key: model.units, "
              "tfeff: many, status: same}\n")
    # Citations: a place in the text, or `silent`.
    with pytest.raises(error, match=r"row 1 \('Cells'\): needs `cite`"):
        table(units.replace("cite: Table 2, ", ""), code)
    with pytest.raises(error, match=r"`cite` names no place in the paper: \['the paper'\]"):
        table(units.replace("cite: Table 2", "cite: the paper"), code)
    with pytest.raises(error, match=r"`unverified` is for a setting the paper's text does "
                                    r"not state, but the row cites Table 2"):
        table(code, "- {setting: Cells, paper: '4096', cite: Table 2, status: unverified, "
              "why: not checked}\n")
    with pytest.raises(error, match=r"the paper is silent and no `source` is named: the row "
                                    r"is `unverified`"):
        table(code, "- {setting: Cutoffs, cite: silent, status: differs, why: ours}\n")
    assert "| Cutoffs | the text is silent |  | ours | *unverified* | tfeff's choice |" in \
        table(code, "- {setting: Cutoffs, cite: silent, tfeff: ours, status: unverified, "
              "why: tfeff's choice}\n")
    with pytest.raises(error, match=r"a row citing nothing \(`cite: silent`\) has no `paper`"):
        table(code.replace("cite: silent", "paper: '1.0', cite: silent"))
    with pytest.raises(error, match=r"`source` must read `<name>: <what it gives>` with a name "
                                    r"from the spec's `sources`"):
        table(code.replace("The authors' code: 1.0", "bilm-tf: 1.0"))
    with pytest.raises(error, match=r"`sources` no row uses: \['bilm-tf'\]"):
        table(units, code, sources="{The authors' code: x, bilm-tf: y}")


@pytest.mark.parametrize("module", API_MODULES)
def test_api_page_lists_every_public_name(module):
    with open(os.path.join(REPO, "docs", "api", f"{module}.md"), encoding="utf-8") as f:
        page = f.read()
    # `tfeff.layers.fasttext_embedding.FastTextEmbedding`: a name the package resolves
    # lazily is documented at its module.
    listed = re.findall(rf"^::: tfeff\.{module}\.(?:\w+\.)?(\w+)$", page, re.M)
    public = _all(module)
    # A name that is also a submodule's (`tfeff.data.lm_dataset`) renders the module:
    # such a function is documented at its module (`tfeff.data.lm_dataset.lm_dataset`).
    shadowed = [name for name in re.findall(rf"^::: tfeff\.{module}\.(\w+)$", page, re.M)
                if os.path.exists(os.path.join(REPO, "tfeff", module, f"{name}.py"))]
    assert not shadowed, f"docs/api/{module}.md: write {shadowed} with their module"
    assert sorted(listed) == sorted(public), (
        f"docs/api/{module}.md: missing {sorted(set(public) - set(listed))}, "
        f"not public {sorted(set(listed) - set(public))}")


def test_every_api_module_has_a_page():
    packages = {os.path.basename(os.path.dirname(p))
                for p in glob.glob(os.path.join(REPO, "tfeff", "*", "__init__.py"))}
    # bin: the binaries (documented by the command-line reference); evaluation: the
    # feature probes of tfeff-evaluate and the tools; backend: what the layers call, no
    # public API; testing: what the tests and benchmarks check with.
    assert packages - {"bin", "evaluation", "backend", "testing"} == set(API_MODULES)


def test_readme_is_a_short_package_description():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert len(readme.splitlines()) <= 250
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert os.path.exists(os.path.join(REPO, target)), f"README links to missing {target}"


def demo_record():
    """The newest record of a `make demo` run (`results/demo/<date>.json`) and its path."""
    path = sorted(glob.glob(os.path.join(REPO, "results", "demo", "*.json")))[-1]
    with open(path, encoding="utf-8") as f:
        return json.load(f), os.path.relpath(path, REPO)


def test_demo_figures_are_the_recorded_runs():
    """The `make demo` figures of the README, the ELMo-C page and the pretraining guide are
    the newest record's, rounded as printed: a new record changes them all, or this fails."""
    record, path = demo_record()
    ev = record["eval"]
    acc = [f"{ev[key][k]:.3f}" for key in ("top_k", "unigram_top_k") for k in ("1", "10")]
    minutes, seconds = divmod(round(record["wall_seconds"]), 60)

    def text(page):
        with open(os.path.join(REPO, page), encoding="utf-8") as f:
            return " ".join(f.read().split())  # line breaks as spaces

    readme = text("README.md")
    assert (f"took {minutes} min {seconds} s with `.venv` already installed ({record['date']}; "
            f"the run's record: [{path}]({path}))") in readme
    assert (f"top-1 accuracy of {acc[0]} and a top-10 accuracy of {acc[1]}, against {acc[2]} "
            f"and {acc[3]} for the unigram baseline") in readme
    page = text("docs/papers/elmo-c.md")
    assert f"recorded {record['date']} in `{path}`" in page
    assert f"The whole command took **{minutes} min {seconds} s**" in page
    steps, train = record["steps"], record["train_seconds"]
    assert (f"| `make demo` | {steps} | {train:.0f} s (≈ {1000 * train / steps:.0f} ms/step) | "
            f"{record['validation_loss']:.3f} | **{acc[0]}** | **{acc[1]}** | {acc[2]} | "
            f"{acc[3]} | {ev['median_rank']:g} |") in page
    assert (f"{ev['targets']:,} of the {ev['heldout_targets']:,} targets of both directions, "
            f"ranked among all {ev['vocabulary_size']:,} vocabulary vectors") in page
    assert (f"`make demo`, 2-core development machine, {record['date']}) give top-1 {acc[0]} "
            f"and top-10 {acc[1]} against {acc[2]} and {acc[3]}, yet a median rank of "
            f"{ev['median_rank']:g} against the frequency order's "
            f"{ev['unigram_median_rank']:g}") in text("docs/guides/pretraining.md")
