#!/usr/bin/env bash
# The main job: a real trial of an example task in a real container, with its result printed.
# Needs only what scripts/setup.sh installs (the package in a virtual environment, a Docker
# engine, the offline base image).
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/setup.sh
exec trialbox run examples/hello-oracle --agent oracle \
  --base-image "python:3.11-slim-bookworm=${TRIALBOX_BASE_IMAGE:-trialbox-base/python3:bookworm}" \
  "$@"
