import configparser
import glob
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_import_tfeff_is_light_and_subpackages_load_on_first_use():
    code = ("import sys, tfeff; assert 'tensorflow' not in sys.modules, 'eager import'; "
            "layer = tfeff.layers.FullSoftmax(5); print(type(layer).__name__, "
            "'layers' in dir(tfeff))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["FullSoftmax", "True"]
    missing = subprocess.run([sys.executable, "-c", "import tfeff; tfeff.nope"],
                             capture_output=True, text=True)
    assert "has no attribute 'nope'" in missing.stderr


@pytest.mark.parametrize("old, new, name", [
    ("tfeff.models.experiment", "tfeff.models.from_config", "elmo_lm"),
    ("tfeff.convert.core", "tfeff.convert.relaxed_to_standard", "convert_model_dir"),
])
def test_a_renamed_module_still_imports_for_one_release_and_warns(old, new, name):
    """Old import paths of renamed modules give the same objects, with a warning naming
    the new path (in a fresh interpreter: the warning fires on the first import)."""
    code = (f"import warnings\nwarnings.simplefilter('error', DeprecationWarning)\n"
            f"try:\n    import {old}\nexcept DeprecationWarning as w:\n    print(w)\n"
            f"warnings.simplefilter('ignore')\nimport importlib, {new}\n"
            f"print(getattr(importlib.import_module('{old}'), '{name}') is {new}.{name})")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert lines[0] == (f"{old} is {new} now; the old name goes in the next release")
    assert lines[-1] == "True"


def _extras():
    """`{extra: [requirement, ...]}` of setup.cfg."""
    config = configparser.ConfigParser()
    config.read(os.path.join(REPO, "setup.cfg"), encoding="utf-8")
    section = config["options.extras_require"]
    return {name: [line.strip() for line in section[name].splitlines() if line.strip()]
            for name in section}


# Install lines: `pip install -e '.[gpu]'`, `pip install 'tfeff[jax]'`, `.[test,docs]`.
_INSTALL_EXTRAS = re.compile(r"pip install\b[^\n]*?(?:\.|tfeff)\[([\w,-]+)\]")
# The first cell of a row of the extras tables (`| extra | adds | for |`).
_TABLE_ROW = re.compile(r"^\| `([\w-]+)` \|", re.M)


def test_the_docs_install_only_extras_that_exist_and_jax_has_one():
    """Every extra an install line of the README, the docs or the Makefile names is one of
    setup.cfg's; the extras tables of the README and the install guide list them all; the
    `jax` extra installs JAX for the CPU with the test extra's own requirement."""
    extras = _extras()
    files = ["README.md", "Makefile", *glob.glob("docs/**/*.md", root_dir=REPO, recursive=True)]
    named = {}
    for name in files:
        with open(os.path.join(REPO, name), encoding="utf-8") as f:
            for group in _INSTALL_EXTRAS.findall(f.read()):
                for extra in group.split(","):
                    named.setdefault(extra, set()).add(name)
    unknown = {extra: sorted(where) for extra, where in named.items() if extra not in extras}
    assert not unknown, f"install lines name extras setup.cfg lacks: {unknown}"
    assert {"gpu", "jax", "test", "docs"} <= set(named)
    for page in ("README.md", "docs/guides/install.md"):
        with open(os.path.join(REPO, page), encoding="utf-8") as f:
            text = f.read()
        table = text[text.index("| extra | adds | for |"):].split("\n\n")[0]
        assert sorted(_TABLE_ROW.findall(table)) == sorted(extras), (page, table)
    jax = [r for r in extras["test"] if r.startswith("jax[")]
    assert extras["jax"] == jax and jax[0].startswith("jax[cpu]"), (extras["jax"], jax)
