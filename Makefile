# Two commands do all set-up: `make demo` runs netviz on a bundled example, `make test`
# runs the whole suite.  Both install what they need first (scripts/setup.sh).
VENV := .venv
PY := $(VENV)/bin/python
DEMO ?= examples/mlp/predict_net.pb

.PHONY: setup demo test bench oracle proto examples screenshots fuzz conformance conformance-quick conformance-expected

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/netviz $(DEMO)

test: setup
	$(PY) -m pytest -q

# Results go to benchmarks/results.local.json (untracked); BENCH_OUT=benchmarks/results.json make bench
# updates the tracked figures on purpose.
bench: setup
	$(PY) -m benchmarks

# One line per golden script and a summary; Caffe2's own output goes to oracle.log (ORACLE_LOG=...).
oracle:
	bash scripts/oracle.sh

proto: setup
	$(PY) scripts/gen_proto.py

examples: setup
	$(PY) -m examples.build

screenshots: setup
	$(PY) scripts/screenshots.py

# A longer fixed-seed fuzz of the loaders than CI's 10,000 inputs (override FUZZ_N=...).
FUZZ_N ?= 200000
fuzz: setup
	NETVIZ_FUZZ_N=$(FUZZ_N) NETVIZ_FUZZ_KEYS=full $(PY) -m pytest -q tests/test_fuzz_loaders.py tests/netviz/test_abuse.py \
		tests/netviz/test_app_robustness.py::test_thousand_random_keys_and_resizes
	NETVIZ_ORACLE=full $(PY) -m pytest -q tests/netviz/test_screen_oracle.py

# Caffe2 1.10.2's own unit tests against netviz (needs .venv-caffe2: scripts/oracle.sh builds it);
# writes docs/conformance.md + .json.  The quick subset is what CI runs.
conformance: setup
	$(PY) scripts/conformance/harness.py

conformance-quick: setup
	$(PY) scripts/conformance/harness.py --quick --check

conformance-expected: setup
	$(PY) scripts/conformance/harness.py --quick --write-expected
