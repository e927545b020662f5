#!/usr/bin/env bash
# Makes sure a headless Chromium is there for the tests marked `browser` (they open the job
# report in it). On Debian, as root, installs `chromium` from Debian's packages when it is
# missing; elsewhere it says what to do. Safe to run again: it does nothing when one is found.
set -euo pipefail

found() {
  for name in ${TRIALBOX_CHROMIUM:-} chromium chromium-browser; do
    if command -v "$name" >/dev/null 2>&1; then
      echo "$name"
      return 0
    fi
  done
  return 1
}

if found >/dev/null; then
  exit 0
fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "error: no chromium found, and this is not Debian as root; install chromium (or set" \
    "TRIALBOX_CHROMIUM to a Chromium binary) and rerun" >&2
  exit 1
fi

echo "installing chromium from Debian's packages"
apt-get update -qq
# No recommends: a headless browser needs no desktop daemons; fonts-liberation gives the
# report's screenshots readable text.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  chromium fonts-liberation >/dev/null

if ! browser=$(found); then
  echo "error: chromium was installed but is not on PATH" >&2
  exit 1
fi
echo "chromium ready ($("$browser" --version 2>/dev/null || echo "$browser"))"
