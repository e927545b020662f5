#!/usr/bin/env bash
# The test suite, against the real Docker engine: scripts/setup.sh, then what only the tests
# need (the dev extras, Ray, a local registry, Chromium), then ruff, mypy and pytest, all from
# the same virtual environment. Arguments go to pytest (e.g. a selection of test files).
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/setup.sh
trialbox_install ".[dev]"
bash scripts/ensure-browser.sh
bash scripts/ensure-ray.sh
bash scripts/ensure-registry.sh
python3 -m ruff check .
python3 -m ruff format --check .
python3 -m mypy
exec python3 -m pytest "$@"
