"""What the benchmark and study scripts share: writing their results, and pyplot."""

import json
import os


def write_results(results_dir, stem, text, data):
    """Writes `stem.md` (the markdown table) and `stem.json` (`data`) to `results_dir`,
    each atomically, creating the directory."""
    from tfeff.data.files import write_text_atomic

    write_text_atomic(os.path.join(results_dir, f"{stem}.md"), text)
    write_text_atomic(os.path.join(results_dir, f"{stem}.json"), json.dumps(data, indent=2) + "\n")


def pyplot():
    """matplotlib's pyplot on the Agg backend, or None (said once) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'tfeff[bench]'): no PNG")
        return None
    return plt
