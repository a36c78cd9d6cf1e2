"""Embedding parameters of ALONE against a conventional table (docs/papers/alone.md).

Counts come from the real layers (`AloneEmbedding.count_params()` and
`keras.layers.Embedding.count_params()`), built at each setting's sizes:
ALONE has D_o + D_inter * (D_o + D_e) parameters whatever V, a table V * D_e.

    python -m benchmarks.alone_parameters        # prints the Markdown table

Also writes `alone_parameters.md` and `alone_parameters.json` to `--output_dir`.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import keras  # noqa: E402

from benchmarks import harness  # noqa: E402

from tfeff.layers import AloneEmbedding  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (setting, V, D_e, D_o, D_inter)
SETTINGS = [
    ("WMT En-De, Takase & Kobayashi (2020)", 37000, 512, 512, 4096),
    ("BERT-base sizes (30,522 WordPiece)", 30522, 768, 768, 4096),
]
CONFIGS = ["configs/elmo_alone.yaml", "configs/demo_elmo_alone.yaml"]


def config_setting(path):
    """`(name, V, D_e, D_o, D_inter)` of a bundled config (V: its WordPiece vocabulary size)."""
    from tfeff.config import load_config

    config = load_config(os.path.join(REPO, path))
    m, v = config.model, config.data.wordpiece_vocabulary_size
    d_e = m.embedding_dim or m.projection_dim
    return (f"{path} (about {v:,} WordPiece)", v, d_e, m.alone.base_dim or d_e,
            m.alone.intermediate_dim)


def parameter_rows():
    rows = []
    for name, v, d_e, d_o, d_inter in SETTINGS + [config_setting(p) for p in CONFIGS]:
        alone = AloneEmbedding(v, d_e, d_o, d_inter, seed=0)
        alone.build()
        table = keras.layers.Embedding(v, d_e)
        table.build((None,))
        rows.append((name, v, d_e, d_o, d_inter, alone.count_params(), table.count_params()))
    return rows


def markdown(rows=None):
    """The Markdown table of `rows` (default: `parameter_rows()`)."""
    lines = [
        "| setting | V | D_e | D_o | D_inter | ALONE parameters | table parameters | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, v, d_e, d_o, d_inter, alone, table in rows or parameter_rows():
        lines.append(f"| {name} | {v:,} | {d_e} | {d_o} | {d_inter} | {alone:,} | {table:,} | "
                     f"{alone / table:.2f} |")
    return "\n".join(lines) + "\n"


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags()


def main(argv):
    del argv
    rows = parameter_rows()
    text = markdown(rows)
    print(text, end="")
    columns = ("setting", "vocabulary", "output_dim", "base_dim", "intermediate_dim",
               "alone_parameters", "table_parameters")
    harness.write_results(flags.FLAGS.output_dir, "alone_parameters", text,
                          [dict(zip(columns, row)) for row in rows])


if __name__ == "__main__":
    define_flags()
    app.run(main)
