#!/usr/bin/env bash
# Makes sure a Docker engine answers. On Debian, as root, installs docker.io and starts dockerd
# when none runs; elsewhere it says what to do. Safe to run again: it does nothing when the
# engine already answers.
set -euo pipefail

answers() { timeout 20 docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && answers; then
  exit 0
fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "error: no Docker engine answers, and this is not Debian as root; start Docker and rerun" >&2
  exit 1
fi

if ! command -v dockerd >/dev/null 2>&1; then
  echo "installing docker.io from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi

if ! answers; then
  echo "starting dockerd"
  if command -v systemctl >/dev/null 2>&1 && systemctl start docker 2>/dev/null; then
    :
  elif command -v service >/dev/null 2>&1 && service docker start >/dev/null 2>&1; then
    :
  else
    nohup dockerd >/var/log/trialbox-dockerd.log 2>&1 &
  fi
  for _ in $(seq 60); do
    answers && break
    sleep 1
  done
fi

if ! answers; then
  echo "error: dockerd did not answer within 60 s; see /var/log/trialbox-dockerd.log" >&2
  exit 1
fi
echo "Docker engine answers ($(docker version --format '{{.Server.Version}}'))"
