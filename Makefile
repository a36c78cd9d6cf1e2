# Two commands: `make demo` and `make test`. Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEMO_DIR ?= runs/demo
export TF_CPP_MIN_LOG_LEVEL ?= 2
export PYTHONUNBUFFERED := 1

.PHONY: demo test test-isa test-slow test-gpu bench bench-gpu gpu-data gpu-wheels docs install install-test clean

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[test,docs]'
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

# Generate the demo corpus, train fastText, pretrain ELMo-C, export, reload in a fresh process
# (its stderr without TensorFlow's C++ notices, as the binaries': tfeff.bin.quiet).
demo: $(VENV)/.installed
	$(VENV)/bin/tfeff-pretrain --config configs/demo_elmo_c.yaml --model_dir $(DEMO_DIR)
	$(VENV)/bin/tfeff-export --model_dir $(DEMO_DIR) --output $(DEMO_DIR)/export --overwrite
	$(PY) -m tfeff.bin.quiet $(PY) examples/demo_embed.py --embedder $(DEMO_DIR)/export --sentences_from $(DEMO_DIR)/corpus/heldout.txt

# Two pytest processes (pytest-xdist), each running whole files: in one process the suite
# keeps one of two cores busy once the demo runs are done (small models, Python-bound).
# TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
test: $(VENV)/.installed-test
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The docs site, into site/: the command-line and configuration references are regenerated
# from the code first (tools/docs_reference.py), then mkdocs builds strictly (a broken link
# or an unparsable docstring fails).
docs: $(VENV)/.installed-test
	$(PY) -m tools.docs_reference
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The tests that compare two implementations in floating point (`-m numerics`; their
# tolerances: tfeff/testing/numerics.py), again under the kernels and thread counts of other
# machines: AVX2 instead of AVX-512 in PyTorch (ATen), TensorFlow (oneDNN) and XLA (JAX,
# TensorFlow's jit_compile), with one and with two threads per op, then this CPU's own
# kernels with one thread (the default suite runs them with all threads). The variables
# reach the backend subprocesses too.
NUMERICS_SETTINGS ?= avx2:1 avx2:2 native:1
test-isa: $(VENV)/.installed-test
	@set -e; for setting in $(NUMERICS_SETTINGS); do \
	  isa=$${setting%:*}; threads=$${setting#*:}; kernels=""; xla=""; \
	  if [ $$isa = avx2 ]; then \
	    kernels="ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2"; xla="--xla_cpu_max_isa=AVX2"; fi; \
	  if [ $$threads = 1 ]; then xla="$$xla --xla_cpu_multi_thread_eigen=false"; fi; \
	  echo "== numerics tests: $$isa kernels, $$threads thread(s) per op"; \
	  env $$kernels XLA_FLAGS="$$xla" TF_NUM_INTRAOP_THREADS=$$threads \
	    OMP_NUM_THREADS=$$threads OPENBLAS_NUM_THREADS=$$threads TFEFF_TEST_THREADS=$$threads \
	    $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "numerics and not slow and not gpu"; \
	done

test-slow: $(VENV)/.installed-test
	$(PY) -m pytest -q -m slow

test-gpu: $(VENV)/.installed-test
	$(PY) -m pytest -q -m gpu

$(VENV)/.installed-bench: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[bench]'
	touch $@

# Output-layer speed/memory table at a reduced size (minutes; the full run: docs/benchmarks.md),
# the ALONE reconstruction experiment (its cpu preset; --preset paper is section 3.1's full protocol), the ALONE lookup benchmark, the
# CoRe layer benchmark (relaxed vs standard layers), the BERT recipe curves (learned vs
# rotary positions, about 3 minutes), the CoRe study (two-phase vs standard pretraining,
# held-out loss against wall time, about 30 minutes), and
# the MaskedBiLSTM benchmark (portable vs RNN cell vs plain LSTM; cuDNN on a GPU), tfeff
# against its peers layer for layer (keras-hub, Hugging Face, PyTorch, Keras), the
# input-pipeline throughput of every family against the training step's consumption, and the
# feature-based evaluation of every demo model (pre-trains them on one synthetic language,
# about 30 minutes; finished runs in runs/bench/features are reused), and the quality study: each
# cheap model against its expensive twin for the same training time, on the synthetic language
# and on real English text (WordNet glosses; needs `apt-get install wordnet-base`; about two
# hours on 2 cores, the two corpora side by side on one core each; runs in runs/bench/quality reused).
bench: $(VENV)/.installed-bench $(VENV)/.installed-test
	$(PY) -m benchmarks.output_layers --preset cpu --output_dir runs/bench
	$(PY) -m benchmarks.alone_reconstruct --preset cpu --output_dir runs/bench
	$(PY) -m benchmarks.alone --output_dir runs/bench
	$(PY) -m benchmarks.core --output_dir runs/bench
	$(PY) -m benchmarks.bert_curves --output_dir runs/bench
	$(PY) -m benchmarks.core_study --output_dir runs/bench
	$(PY) -m benchmarks.lstm --output_dir runs/bench
	$(PY) -m benchmarks.peers --output_dir runs/bench
	$(PY) -m benchmarks.pipeline --output_dir runs/bench
	$(PY) -m benchmarks.feature_study --output_dir runs/bench
	TF_NUM_INTRAOP_THREADS=1 taskset -c 0 $(PY) -m benchmarks.quality_study --corpora synthetic & \
	pid=$$!; TF_NUM_INTRAOP_THREADS=1 taskset -c 1 $(PY) -m benchmarks.quality_study --corpora english; \
	b=$$?; wait $$pid; a=$$?; test $$a = 0 -a $$b = 0
	$(PY) -m benchmarks.quality_study --table_only

# tfeff against its peers on one GPU, in resumable parts, into one results folder
# (benchmarks/gpu_suite.py; docs/benchmarks.md): BERT-base MLM steps beside keras-hub and
# Hugging Face, CoRe's relaxed model, the output layers at 800K words (and PyTorch's
# adaptive softmax), Masked ELMo's encoder, CoRe's two-phase training on real English. Made
# for a GPU machine with JAX and PyTorch and no network: `make gpu-wheels gpu-data` here
# (the wheels it lacks and the training parts' arrays, made with TensorFlow; the paper
# preset's come from WordNet: apt-get install wordnet-base), then `make bench-gpu` there. It
# installs nothing and needs no .venv: BENCH_PYTHON is the venv's where there is one, else
# python3; each run stops inside GPU_DEADLINE_S, writes GPU_ARCHIVE and resumes from it.
# GPU_PRESET=cpu runs small sizes here.
GPU_PRESET ?= paper
GPU_PYTHON_VERSION ?= 3.12
GPU_DEADLINE_S ?= 540
GPU_OUT ?= runs/bench/gpu_$(GPU_PRESET)
GPU_ARCHIVE ?= $(GPU_OUT).tgz
BENCH_PYTHON ?= $(if $(wildcard $(PY)),$(PY),$(PYTHON))
GPU_DATA_paper = runs/gpu_data/wordnet_128.npz
GPU_DATA_cpu = runs/gpu_data/synthetic_32.npz
runs/gpu_data/wordnet_128.npz:
	$(MAKE) $(VENV)/.installed-test
	$(PY) -m tools.english_corpus --output_dir runs/english
	$(PY) -m tools.mlm_arrays --train_files runs/english/train.txt \
		--heldout_files runs/english/heldout.txt --sequence_length 128 \
		--vocabulary_size 8192 --output $@
runs/gpu_data/synthetic_32.npz:
	$(MAKE) $(VENV)/.installed-test
	$(PY) -m tools.mlm_arrays --synthetic 500 --sequence_length 32 --vocabulary_size 400 \
		--output $@
gpu-data: $(GPU_DATA_$(GPU_PRESET))
# The pure-Python wheels a GPU machine with JAX, PyTorch and transformers lacks (keras,
# keras-hub, keras' namex and optree), for its Python, at the versions installed here.
gpu-wheels: $(VENV)/.installed-test
	mkdir -p runs/gpu_wheels
	$(PY) -m pip download -q --no-deps --only-binary=:all: \
		--python-version $(GPU_PYTHON_VERSION) --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 --platform any -d runs/gpu_wheels \
		"keras==$$($(PY) -c 'import keras; print(keras.__version__)')" \
		"keras-hub==$$($(PY) -c 'import keras_hub; print(keras_hub.__version__)')" \
		"namex==$$($(PY) -c 'import importlib.metadata as m; print(m.version("namex"))')" \
		"optree==$$($(PY) -c 'import importlib.metadata as m; print(m.version("optree"))')"
	ls runs/gpu_wheels
# Where the wheels of gpu-wheels are carried (runs/gpu_wheels/), they are installed into
# runs/gpu_site first, without network or build step.
bench-gpu: $(if $(filter cpu,$(GPU_PRESET)),$(GPU_DATA_cpu))
	set -e; if [ -d runs/gpu_wheels ] && ! $(BENCH_PYTHON) -c 'import keras' 2>/dev/null; then \
	    $(BENCH_PYTHON) -m pip install -q --no-index --no-deps --target runs/gpu_site \
	        runs/gpu_wheels/*.whl; fi; \
	PYTHONPATH=$$(pwd)/runs/gpu_site$${PYTHONPATH:+:$$PYTHONPATH} $(BENCH_PYTHON) \
	    -m benchmarks.gpu_suite --preset $(GPU_PRESET) --output_dir $(GPU_OUT) \
	    --deadline_s $(GPU_DEADLINE_S) --archive $(GPU_ARCHIVE) \
	    $$(test -f $(GPU_ARCHIVE) && echo --resume_from $(GPU_ARCHIVE))

clean:
	rm -rf $(VENV) runs build site *.egg-info
