#!/usr/bin/env bash
# Builds the offline, Python-capable base image from Debian's packages when it is missing.
#
# Why: machines without a container registry cannot pull `python:3.11-slim-bookworm`.
# Example Dockerfiles keep their real FROM lines; `--base-image` maps them onto this image.
# The local image is never tagged with an official image's name.
#
# What the official Python images carry: python and python3, pip and pip3 (Debian's
# python3-pip, with setuptools and wheel), a `pip install` that works as root (Debian's
# EXTERNALLY-MANAGED marker is removed, as the official images have none), CA certificates.
# Not their compilers: python3-pip's recommends (build-essential, python3-dev) stay out.
#
# TRIALBOX_BASE_IMAGE names another tag (to try a change without replacing the image others
# use). The image carries the label trialbox.base-version; an image of an older version (or
# none, e.g. one without pip) is rebuilt under the same tag.
set -euo pipefail

IMAGE="${TRIALBOX_BASE_IMAGE:-trialbox-base/python3:bookworm}"
SUITE="${TRIALBOX_BASE_SUITE:-bookworm}"
# Raise when what goes into the image changes, so machines with an older one rebuild it.
VERSION=2

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  have=$(docker image inspect -f '{{index .Config.Labels "trialbox.base-version"}}' "$IMAGE" 2>/dev/null || true)
  if [ "$have" = "$VERSION" ]; then
    echo "base image $IMAGE is present"
    exit 0
  fi
  echo "base image $IMAGE is of version ${have:-1, without pip}; this script builds version $VERSION: rebuilding it"
fi

if ! command -v debootstrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing debootstrap from Debian's packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  else
    echo "error: debootstrap is missing; install it (apt-get install debootstrap) and rerun $0" >&2
    exit 1
  fi
fi

# The machine's own configured Debian mirror, if it has one; otherwise debootstrap's default.
mirror=""
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] || continue
  case "$f" in
    *.sources) mirror=$(awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i !~ /security/) {print $i; exit}}' "$f") ;;
    *) mirror=$(awk '$1 == "deb" && $0 ~ / main/ && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' "$f") ;;
  esac
  [ -n "$mirror" ] && break
done

rootfs=$(mktemp -d /tmp/trialbox-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT

echo "debootstrapping $SUITE (minbase, python3 also as python, pip) into $rootfs${mirror:+ from the configured mirror}"
debootstrap --variant=minbase \
  --include=python3,python3-venv,python-is-python3,python3-pip,ca-certificates \
  "$SUITE" "$rootfs" ${mirror:+"$mirror"} >"$rootfs.log" 2>&1 || {
  echo "error: debootstrap failed; the last lines of its log ($rootfs.log):" >&2
  tail -n 30 "$rootfs.log" >&2
  exit 1
}

# Trim what a sandbox never needs: apt caches and lists, docs, man pages, locales.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
  "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* \
  "$rootfs"/usr/share/info/* "$rootfs"/var/log/*.log
find "$rootfs"/usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} +

# pip as the official images have it: `pip install` as root works (no PEP 668 marker), and
# `pip` and `pip3` are both commands.
rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
for name in pip pip3; do
  [ -e "$rootfs/usr/bin/$name" ] || ln -s pip3 "$rootfs/usr/bin/$name"
done
[ -x "$rootfs/usr/bin/pip3" ] || { echo "error: python3-pip left no /usr/bin/pip3 in $rootfs" >&2; exit 1; }

echo "importing $rootfs as $IMAGE"
tar -C "$rootfs" --numeric-owner -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  --change "LABEL trialbox.base-version=$VERSION" \
  - "$IMAGE" >/dev/null
rm -f "$rootfs.log"
echo "base image $IMAGE is built ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
