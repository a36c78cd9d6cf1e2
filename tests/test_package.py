import subprocess
import sys


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
