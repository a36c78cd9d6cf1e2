"""The repository's tooling, run from its root as `python -m tools.<name>`:

    english_corpus   English text from Debian packages (WordNet glosses), offline
    mlm_arrays       masked-LM training arrays (.npz) from a corpus, for runs
                     on machines without TensorFlow
    docs_reference   the command-line and configuration reference pages of the
                     docs, generated from the code (`--check` in the tests)
"""
