"""tfeff's benchmarks and studies: speed, memory and quality, measured and published.

Each module is a command run from the repository root, `python -m benchmarks.<name>`,
with absl flags, the presets `tiny` (seconds: the tests), `cpu` (minutes on a
development machine) and `paper` (the papers' sizes: an accelerator) where a module has
sizes, and `--output_dir` for what it writes (a JSON file and a Markdown table, and a
PNG chart where there is one). `docs/benchmarks.md` lists every published figure with
the command that reproduces it.

Shared pieces:

    harness       the shared flags, timing (interleaved rounds, medians, ratios),
                  a training clock, synthetic data, tfeff's BERT of given sizes,
                  result writing
    runner        a resumable runner of parts (subprocesses) with time limits,
                  a deadline and an archive (the GPU suite's)

Benchmarks (one speed or memory comparison each): `output_layers`, `alone`, `core`,
`lstm`, `peers`, `pipeline`, `precision`, `gpu` (one training step per family at the
papers' sizes), `gpu_suite` (everything an accelerator should measure, in resumable
parts), `xla_profile`.

Studies (quality at equal budget): `alone_reconstruct`, `alone_parameters`,
`bert_curves`, `core_study` (with `core_training`), `quality_study`, `feature_study`.
"""
