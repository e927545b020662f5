#!/usr/bin/env bash
# Makes sure Ray is importable (the package's `ray` extra, from PyPI) in the python3 on PATH,
# the virtual environment scripts/test.sh is in: trials on a Ray cluster and the ray tests
# need it. Safe to run again: it does nothing when Ray imports already.
set -euo pipefail
cd "$(dirname "$0")/.."

if python3 -c "import ray" >/dev/null 2>&1; then
  exit 0
fi
echo "installing the ray extra into $(python3 -c 'import sys; print(sys.prefix)')"
python3 -m pip install --quiet --disable-pip-version-check -e ".[ray]"
python3 -c "import ray; print('ray', ray.__version__)"
