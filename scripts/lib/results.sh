# shellcheck shell=bash
# Results: what a step produced must exist, and be a measurement, before the job calls it done.

# collect_result SRC DST MAX_ERROR_RATE MIN_DURATION [GATE ARGS...] — DST gets SRC (atomically) once
# scripts/results.py finds it a valid measurement (and, with --scenario, one of the client's scenario lock
# with the verdict the plan expects); otherwise the step fails saying why. Results already collected stay.
collect_result() {
  (($# >= 4)) || fail "usage: collect_result SRC DST MAX_ERROR_RATE MIN_DURATION [GATE ARGS...]"
  [[ -s $1 ]] || fail "$(_node_word result-missing "$1")"
  local out rc=0
  out=$("${PYTHON:-python3}" "$SCRIPTS_DIR/results.py" check "$1" --max-error-rate "$3" \
    --min-duration "$4" "${@:5}" 2>&1) || rc=$?
  if ((rc != 0)); then
    _node_failing
    _node_say "$out"
    _node_router_warnings
    _node_exit 1
  fi
  cp -- "$1" "$2.tmp"
  mv -f -- "$2.tmp" "$2"
  _node_info "$out -> $2"
}

# _node_router_warnings — the router's last warnings on this node, after a failed result: which engine
# answered what (AIPerf's error summary has the status and body, never the engine).
_node_router_warnings() {
  local log="$LOG_DIR/router.log" found
  [[ -s $log ]] || return 0
  found=$(tail -n 2000 -- "$log" | grep -E 'WARNING|ERROR' | tail -n "${ROUTER_WARNING_LINES:?the node script sets it}") || return 0
  printf -- "--- the router's last warnings (%s) ---\n%s\n--- end of router warnings ---\n" "$log" \
    "$found" >&2
}

# A resumed run (make submit RESUME=<run>) skips the benchmarks whose results an earlier run of the same
# lock collected; the node script is the same either way, so the list is read at run time.
declare -gA RESUMED_FROM=()

# load_resumed FILE — the benchmarks FILE (the run folder's resume.json; absent: none) lists as done, each
# with the run that measured it. Called at preflight: a bad file fails the job before the engines load.
load_resumed() {
  (($# == 1)) || fail "usage: load_resumed FILE"
  local listed name run
  listed=$("${PYTHON:-python3}" "$SCRIPTS_DIR/resume.py" reused --file "$1")
  while read -r name run; do
    if [[ -n $name ]]; then
      RESUMED_FROM[$name]=$run
    fi
  done <<<"$listed"
}

# benchmark_resumed NAME — whether NAME's result was reused rather than measured here (load_resumed);
# says so in the job's output, since its step is never entered.
benchmark_resumed() {
  (($# == 1)) || fail "usage: benchmark_resumed NAME"
  [[ -n ${RESUMED_FROM[$1]:-} ]] || return 1
  _node_info "benchmark $1: resumed, its result was measured by run ${RESUMED_FROM[$1]}"
}
