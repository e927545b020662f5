#!/usr/bin/env bash
# What the demo needs, and no more: a virtual environment (scripts/venv.sh: the active one, or
# .venv/ under the clone) holding the package, a Docker engine that answers, and the offline
# base image. scripts/test.sh adds what the tests need. Each step does nothing when already
# done. Sourced by demo.sh and test.sh, so that they run in the same environment.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

source scripts/venv.sh
trialbox_install "."
bash scripts/ensure-docker.sh
bash scripts/build-base-image.sh
