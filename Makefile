VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean bench-env bench-vs-vllm

$(STAMP): pyproject.toml
	@command -v dot >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq graphviz >/dev/null) || echo "warning: graphviz 'dot' not installed; SVG output disabled"
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	TRITON_INTERPRET=1 $(PY) -m morphcache.demo

test: $(STAMP)
	TRITON_INTERPRET=1 $(PY) -m pytest -n 2 --dist loadfile

# mypy checks the packages as they are installed (morphcache.runtime is runtime/, morphcache.spec is spec/,
# ...), through a tree of links, so that every import across them is checked rather than taken as Any.
MYPY_TREE := .mypy-tree

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	@rm -rf $(MYPY_TREE) && mkdir -p $(MYPY_TREE)/morphcache
	@for entry in morphcache/*; do ln -s ../../$$entry $(MYPY_TREE)/morphcache/; done
	@for pkg in spec proofs runtime kernels; do ln -s ../../$$pkg $(MYPY_TREE)/morphcache/$$pkg; done
	cd $(MYPY_TREE) && ../$(VENV)/bin/mypy --config-file ../pyproject.toml -p morphcache

# A separate environment for benchmarks/bench_vs_vllm.py: vLLM's KV cache manager beside morphcache in one
# process.  vLLM is installed without its dependencies (only what its kv_cache_manager imports, listed in
# benchmarks/vllm-requirements.txt); it never becomes a dependency of the project or its tests.
BENCH_VENV ?= .bench-venv
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.installed
VLLM_VERSION ?= 0.33.0

$(BENCH_STAMP): pyproject.toml benchmarks/vllm-requirements.txt
	@test -x $(BENCH_PY) || python3 -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install -q torch==2.13.0
	$(BENCH_PY) -m pip install -q --no-deps vllm==$(VLLM_VERSION)
	$(BENCH_PY) -m pip install -q -r benchmarks/vllm-requirements.txt
	$(BENCH_PY) -m pip install -q -e . torch==2.13.0
	$(BENCH_PY) -c "import vllm.v1.core.kv_cache_manager, morphcache.runtime"
	@touch $(BENCH_STAMP)

bench-env: $(BENCH_STAMP)

bench-vs-vllm: $(BENCH_STAMP)
	$(BENCH_PY) benchmarks/bench_vs_vllm.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) build *.egg-info
