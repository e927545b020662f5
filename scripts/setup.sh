#!/usr/bin/env bash
# Everything both README commands need: the package with its dev extras, a Docker engine that
# answers, and the offline base image. Each step does nothing when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e ".[dev]"
bash scripts/ensure-docker.sh
bash scripts/build-base-image.sh
bash scripts/ensure-browser.sh
bash scripts/ensure-ray.sh
bash scripts/ensure-registry.sh
