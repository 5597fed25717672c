# Shortcuts for the commands the README gives (make is optional: each target
# is one line you can run by hand).
.PHONY: demo test thorough chaos soak soak-sentinel bench

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

# Every property test with its full count of examples (as CI runs them).
thorough:
	HYPOTHESIS_PROFILE=thorough bash scripts/test.sh

chaos:
	CHAOS_PROFILE=full PYTEST_WORKERS=0 bash scripts/test.sh tests/chaos -s

soak:
	.venv/bin/python -m tests.chaos.soak --minutes 30

soak-sentinel:
	.venv/bin/python -m tests.chaos.soak_sentinel --minutes 15

bench:
	bash benchmarks/run.sh
