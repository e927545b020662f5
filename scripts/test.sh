#!/usr/bin/env bash
# The test suite, against the real Docker engine.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
ruff check .
ruff format --check .
mypy
exec python3 -m pytest "$@"
