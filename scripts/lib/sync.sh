# shellcheck shell=bash
# Bash side of scripts/sync.py: readiness waits and barriers that fail the step with a clear line.

# wait_http NAME URL TIMEOUT [--expect KEY=VALUE ...] — fails at once if NAME's process exits.
wait_http() {
  (($# >= 3)) || fail "usage: wait_http NAME URL TIMEOUT [--expect KEY=VALUE ...]"
  local name=$1 url=$2 timeout=$3 pid rc=0
  shift 3
  local err_file="$STATE_DIR/$name$STATE_WAIT_ERR_SUFFIX"
  pid=$(service_pid "$name")
  _node_check_watcher
  _node_fg "$err_file" "${PYTHON:-python3}" "$SCRIPTS_DIR/sync.py" wait-http --url "$url" \
    --timeout "$timeout" --pid "$pid" --name "$name" --log "$LOG_DIR/$name.log" \
    --stall "${STALL_GRACE_S:?the node script sets STALL_GRACE_S}" "$@" || rc=$?
  if ((rc == 0)); then
    _node_mark "ready $name"
    return 0
  fi
  _node_failing
  case $rc in
    3) _node_service_gone "$name" ;;
    4)
      _node_report "$name" "$(_node_last_line "$err_file" 'wait-http: ')" >&2
      _node_exit "$rc"
      ;;
    14)  # no progress while starting: a hang found before the readiness timeout (the node exits 4)
      _node_report "$name" "$(_node_last_line "$err_file" 'wait-http: ')" stalled >&2
      _node_exit 4
      ;;
    *)
      _node_say "wait_http $name: $(_node_last_line "$err_file" '') (sync.py wait-http exited with code $rc)"
      _node_exit "$rc"
      ;;
  esac
}

# barrier NAME RANK SIZE HOST:PORT TIMEOUT --secret-file FILE [--nodes A,B,..] [--publish JSON] [--out FILE]
#   [--bind ADDR] — sync.py barrier's options (the secret file is the job's: every line is sealed with it)
barrier() {
  (($# >= 5)) || fail "usage: barrier NAME RANK SIZE HOST:PORT TIMEOUT [sync.py barrier options]"
  [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || fail "barrier: bad barrier name '$1' (letters, digits, _ . -)"
  local err_file="$STATE_DIR/$STATE_BARRIER_ERR_PREFIX$1.err" rc=0
  _node_check_watcher
  _node_fg "$err_file" "${PYTHON:-python3}" "$SCRIPTS_DIR/sync.py" barrier --name "$1" --rank "$2" \
    --size "$3" --leader "$4" --timeout "$5" --node "$NODE_NAME" "${@:6}" || rc=$?
  if ((rc == 0)); then
    _node_mark "released $1"
    cat -- "$err_file" >&2  # progress notes such as "waiting for leader"
    return 0
  fi
  _node_failing
  _node_say "$(_node_last_line "$err_file" '') (code $rc)"
  _node_exit "$rc"
}

# _node_last_line FILE PREFIX — the last line of FILE without PREFIX; earlier lines go to stderr.
_node_last_line() {
  local -a lines=()
  if [[ -s $1 ]]; then
    mapfile -t lines < "$1"
  fi
  if ((${#lines[@]} > 1)); then
    printf '%s\n' "${lines[@]:0:${#lines[@]}-1}" >&2
  fi
  local last=${lines[*]: -1}
  printf '%s\n' "${last#"$2"}"
}

# A service exited while we waited for it: report it and fail with its exit code.
_node_service_gone() {
  _node_exited "$1" || _NODE_CODE=unknown
  local code=$_NODE_CODE
  _node_report "$1" "$(_node_word service-exit "$1" "$code")" "$code" >&2
  _NODE_FAILED_AT=${_NODE_CODE_AT:-$EPOCHREALTIME}  # the failure is the exit, not its discovery
  _NODE_FAILED_KIND=failure
  _NODE_FAILED_STEP=$_NODE_STEP
  _node_exit "$(_node_failure_code "$code")"
}
