# shellcheck shell=bash
# Results: what a step produced must exist, and be a measurement, before the job calls it done.

# collect_result SRC DST MAX_ERROR_RATE MIN_DURATION — DST gets SRC (atomically) once scripts/results.py
# finds it a valid measurement; otherwise the step fails saying why. Results already collected stay.
collect_result() {
  (($# == 4)) || fail "usage: collect_result SRC DST MAX_ERROR_RATE MIN_DURATION"
  [[ -s $1 ]] || fail "$(_node_word result-missing "$1")"
  local out rc=0
  out=$("${PYTHON:-python3}" "$SCRIPTS_DIR/results.py" check "$1" --max-error-rate "$3" \
    --min-duration "$4" 2>&1) || rc=$?
  ((rc == 0)) || fail "$out"
  cp -- "$1" "$2.tmp"
  mv -f -- "$2.tmp" "$2"
  _node_info "$out -> $2"
}
