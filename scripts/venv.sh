# Sourced by scripts/setup.sh: puts this shell in a Python virtual environment, so nothing is
# installed into whatever python3 happens to be active. The one already active is used as is;
# otherwise .venv/ under the clone (gitignored), made on first use. Says which, in one line.
# TRIALBOX_VENV=DIR picks another folder. On Debian as root, python3's venv package is
# installed from Debian's packages when `python3 -m venv` cannot make one.

_trialbox_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if python3 -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' 2>/dev/null; then
  echo "trialbox: installing into the active virtual environment $(python3 -c 'import sys; print(sys.prefix)')"
else
  _trialbox_venv="${TRIALBOX_VENV:-$_trialbox_root/.venv}"
  if [ ! -x "$_trialbox_venv/bin/python3" ]; then
    if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      echo "error: trialbox needs Python 3.11 or later; python3 is $(python3 --version 2>&1)" >&2
      exit 1
    fi
    if ! python3 -m venv "$_trialbox_venv" >/dev/null 2>&1; then
      rm -rf "$_trialbox_venv"
      _trialbox_pkg="python$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-venv"
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing $_trialbox_pkg from Debian's packages (python3 -m venv needs it)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$_trialbox_pkg" >/dev/null
        python3 -m venv "$_trialbox_venv"
      else
        echo "error: python3 -m venv cannot make $_trialbox_venv; install $_trialbox_pkg" \
          "(apt-get install $_trialbox_pkg) or activate a virtual environment, and rerun" >&2
        exit 1
      fi
    fi
    _trialbox_made=" (made now)"
  fi
  # shellcheck disable=SC1091
  source "$_trialbox_venv/bin/activate"
  echo "trialbox: installing into the virtual environment $_trialbox_venv${_trialbox_made:-}; activate it with: source $_trialbox_venv/bin/activate"
fi

# `pip install -e ".[EXTRAS]"` of the clone into it, skipped when pyproject.toml is unchanged
# since the last install of the same extras there.
trialbox_install() {
  local spec="$1" stamp
  stamp="$(python3 -c 'import sys; print(sys.prefix)')/.trialbox-installed-$(echo "$spec" | tr -c 'a-z0-9\n' '_')"
  local want
  want="$_trialbox_root $(sha256sum "$_trialbox_root/pyproject.toml" | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  echo "installing $spec (pip install -e)"
  (cd "$_trialbox_root" && python3 -m pip install --quiet --disable-pip-version-check -e "$spec")
  echo "$want" >"$stamp"
}
