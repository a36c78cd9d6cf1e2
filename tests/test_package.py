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
