VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean

$(STAMP): pyproject.toml
	@command -v dot >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq graphviz >/dev/null) || echo "warning: graphviz 'dot' not installed; SVG output disabled"
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	TRITON_INTERPRET=1 $(PY) -m morphcache.demo

test: $(STAMP)
	TRITON_INTERPRET=1 $(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build *.egg-info
