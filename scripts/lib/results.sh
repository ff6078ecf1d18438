# shellcheck shell=bash
# Results and preflight: what a step produced must exist before the job calls it done.

# collect_result SRC DST MAX_ERROR_RATE MIN_DURATION — DST gets SRC (atomically) once scripts/results.py
# finds it a valid measurement; otherwise the step fails saying why. Results already collected stay.
collect_result() {
  (($# == 4)) || fail "usage: collect_result SRC DST MAX_ERROR_RATE MIN_DURATION"
  [[ -s $1 ]] || fail "result $1 is missing or empty (the benchmark exited 0 without writing it)"
  local out rc=0
  out=$("${PYTHON:-python3}" "$SCRIPTS_DIR/results.py" check "$1" --max-error-rate "$3" \
    --min-duration "$4" 2>&1) || rc=$?
  ((rc == 0)) || fail "$out"
  cp -- "$1" "$2.tmp"
  mv -f -- "$2.tmp" "$2"
  _node_info "$out -> $2"
}

# require_commands CMD... — every program a role starts is on PATH, named all at once.
require_commands() {
  local cmd missing=()
  for cmd in "$@"; do
    command -v -- "$cmd" > /dev/null || missing+=("$cmd")
  done
  ((${#missing[@]} == 0)) || fail "not on PATH: ${missing[*]} (PATH=$PATH)"
}

# require_version COMMAND DIST VERSION — the package behind COMMAND is exactly the pinned version
# (an image may lack a component, or carry another build of it).
require_version() {
  (($# == 3)) || fail "usage: require_version COMMAND DIST VERSION"
  local out rc=0
  out=$("${PYTHON:-python3}" "$SCRIPTS_DIR/sync.py" dist-version --command "$1" --dist "$2" --expect "$3" 2>&1) || rc=$?
  ((rc == 0)) || fail "$out"
  _node_info "$out"
}
