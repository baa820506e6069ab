# Shared helpers for the provisioning scripts. Sourced, not executed.
# shellcheck shell=bash
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${TASK_OBSERVER_CACHE_DIR:-$REPO_ROOT/.cache}"
RUN_DIR="$CACHE_DIR/run"
BIN_DIR="$CACHE_DIR/bin"
VENV_DIR="${TASK_OBSERVER_VENV:-$REPO_ROOT/.venv}"
CENTRIFUGO_VERSION="6.9.1"
# promtool (the alert rules' unit tests), from the Prometheus Go module of this version.
PROMETHEUS_VERSION="0.316.0"
mkdir -p "$RUN_DIR" "$BIN_DIR"

log() { printf '[%s] %s\n' "$(basename "$0")" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Pick a Python >= 3.11 for the virtualenv.
find_python() {
  local candidate
  for candidate in "${TASK_OBSERVER_PYTHON:-}" python3.11 python3.12 python3.13 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      command -v "$candidate"; return 0
    fi
  done
  return 1
}

# Wait until "$@" succeeds, at most $WAIT_SECONDS (default 60) seconds.
wait_for() {
  local what="$1"; shift
  local deadline=$(( $(date +%s) + ${WAIT_SECONDS:-60} ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "$what did not become ready in ${WAIT_SECONDS:-60}s"
    sleep 0.2
  done
}

# Dev secrets are generated once per checkout and kept in the ignored cache;
# nothing secret is ever committed. Production sets its own values.
ensure_dev_secrets() {
  local file="$CACHE_DIR/dev-secrets.env"
  if [ ! -s "$file" ]; then
    umask 077
    {
      echo "TASK_OBSERVER_CENTRIFUGO_API_KEY=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
      echo "TASK_OBSERVER_CENTRIFUGO_TOKEN_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
      echo "TASK_OBSERVER_SERVICE_TOKEN_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
      echo "TASK_OBSERVER_EXECUTION_TOKEN_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
      echo "TASK_OBSERVER_USER_TOKEN_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
    } > "$file"
  fi
  set -a; . "$file"; set +a
}
