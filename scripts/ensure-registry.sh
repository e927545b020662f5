#!/usr/bin/env bash
# Makes sure a local image registry answers on 127.0.0.1:5000 (Debian's docker-registry, the
# CNCF distribution registry): task images built on one node are pushed there and pulled by
# the others (the ray tests; a single-site cluster may use it too). Safe to run again: it does
# nothing when the registry already answers. TRIALBOX_REGISTRY=HOST:PORT picks another port.
set -euo pipefail

ADDR="${TRIALBOX_REGISTRY:-127.0.0.1:5000}"
ROOT=/var/lib/trialbox-registry
answers() { python3 -c "import urllib.request as u; u.urlopen('http://$ADDR/v2/', timeout=5)" 2>/dev/null; }

if answers; then
  exit 0
fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "error: no registry answers on $ADDR, and this is not Debian as root; start one (docker-registry serve CONFIG) and rerun" >&2
  exit 1
fi

if ! command -v docker-registry >/dev/null 2>&1; then
  echo "installing docker-registry from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-registry >/dev/null
fi

mkdir -p "$ROOT/data"
cat >"$ROOT/config.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $ROOT/data
  delete:
    enabled: true
http:
  addr: $ADDR
YAML
echo "starting docker-registry on $ADDR"
nohup docker-registry serve "$ROOT/config.yml" >/var/log/trialbox-registry.log 2>&1 &
for _ in $(seq 30); do
  answers && break
  sleep 1
done
if ! answers; then
  echo "error: the registry did not answer on $ADDR within 30 s; see /var/log/trialbox-registry.log" >&2
  exit 1
fi
echo "registry answers on $ADDR"
