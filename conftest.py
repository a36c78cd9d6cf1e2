"""Collects the Python blocks of README.md and docs/ as tests (sybil).

Each Markdown file runs its ```python blocks in order in one namespace, so a guide's
later blocks use what its earlier ones defined. A block that needs a CUDA GPU is
preceded by `<!-- skip: next "needs a CUDA GPU" -->`; nothing else is skipped.
"""

from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser
from sybil.parsers.markdown import SkipParser

pytest_collect_file = Sybil(
    parsers=[SkipParser(), PythonCodeBlockParser()],
    patterns=["README.md", "docs/*.md", "docs/**/*.md"],
).pytest()
