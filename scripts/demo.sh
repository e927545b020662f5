#!/usr/bin/env bash
# The main job: a real trial of an example task in a real container, with its result printed.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
exec trialbox run examples/hello-oracle --agent oracle \
  --base-image "python:3.11-slim-bookworm=${TRIALBOX_BASE_IMAGE:-trialbox-base/python3:bookworm}" \
  "$@"
