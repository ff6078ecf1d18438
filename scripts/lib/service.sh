# shellcheck shell=bash
# Services and foreground commands: each runs in its own session, so that teardown can kill the
# whole process tree by group, and is waited for with `wait` so that a TERM is handled at once.

# start_service NAME CMD [ARGS...] — argv is passed through untouched (no eval, no re-splitting).
start_service() {
  (($# >= 2)) || fail "usage: start_service NAME CMD [ARGS...]"
  local name=$1 pid
  shift
  _node_check_new_service "$name"
  local log="$LOG_DIR/$name.log" rc_file="$STATE_DIR/$name$STATE_RC_SUFFIX"
  rm -f -- "$rc_file"
  # No job control here, so the background child is no group leader and setsid(1) execs in place:
  # $! is the wrapper, the session leader and the process group id.
  setsid bash "$_NODE_LIB/run-service.sh" "$name" "$rc_file" "$@" > "$log" 2>&1 < /dev/null &
  pid=$!
  printf '%s\n' "$pid" > "$STATE_DIR/$name$STATE_PID_SUFFIX"
  printf '%s\n' "$name" >> "$STATE_DIR/$STATE_SERVICES"  # after the pid file: the watcher reads both
  _node_info "started $name (pid $pid, log $log)"
}

service_pid() {
  local name
  _node_services
  for name in "${_NODE_NAMES[@]}"; do
    if [[ $name == "${1:-}" ]]; then
      printf '%s\n' "$(< "$STATE_DIR/$name$STATE_PID_SUFFIX")"
      return 0
    fi
  done
  printf 'service_pid: no service %s was started\n' "${1:-''}" >&2  # a stale pid file is not enough
  return 1
}

# run_cmd CMD [ARGS...] — in the background and waited for, so a TERM interrupts it at once.
run_cmd() {
  (($# >= 1)) || fail "usage: run_cmd CMD [ARGS...]"
  # A function cannot run in a session of its own, which is what makes it killable as a tree.
  if declare -F -- "$1" > /dev/null; then
    fail "run_cmd: '$1' is a shell function; run_cmd runs programs"
  fi
  _node_check_watcher
  local run_cmd_rc=0
  _node_fg '' "$@" || run_cmd_rc=$?
  # The ERR trap fires after this returns and sees only the return statement: keep the command.
  if ((run_cmd_rc != 0)); then
    _NODE_RETURNED=$(_node_quote "$@")
  fi
  return "$run_cmd_rc"
}

# _node_fg ERR_FILE CMD [ARGS...] — CMD in a session of its own, waited for; stderr to ERR_FILE unless
# empty (+FILE: stdout and stderr to FILE). Only the child's output is redirected: a trap that runs
# meanwhile must still reach ours.
_node_fg() {
  local err_file=$1 rc=0
  shift
  if [[ $err_file == +* ]]; then
    setsid "$@" > "${err_file#+}" 2>&1 &
  elif [[ -n $err_file ]]; then
    setsid "$@" 2> "$err_file" &
  else
    setsid "$@" &
  fi
  _NODE_FG_PID=$!
  # Which process is the foreground command (the benchmark client, a proof): for operators and the
  # failure bench, whatever the program renames its processes to.
  [[ -z ${STATE_DIR:-} ]] || printf '%s\n' "$_NODE_FG_PID" > "$STATE_DIR/$STATE_FOREGROUND_PID"
  wait "$_NODE_FG_PID" || rc=$?
  [[ -z ${STATE_DIR:-} ]] || rm -f -- "$STATE_DIR/$STATE_FOREGROUND_PID"
  _node_reap_session "$_NODE_FG_PID" "$1"
  _NODE_FG_PID=
  case $rc in
    129 | 130 | 143)
      # Ended by the signal that is stopping this node (srun or a failing node signals every process
      # of the job step): the node was stopped, the command did not fail -- whichever saw it first.
      _node_on_signal "$(kill -l "$((rc - 128))")"
      ;;
  esac
  return "$rc"
}

# _node_capture NAME CMD [ARGS...] — CMD's output (stdout and stderr, also kept in $STATE_DIR/NAME.out) in
# _NODE_OUT, its status returned. Not `out=$(CMD)`: bash runs a trap only once a command substitution has
# ended, so a node in a minutes-long pip install (node setup) or a hung probe would ignore the TERM of a
# scancel or of a failing peer until then, and outlive its step (a container past docker stop's grace).
_node_capture() {
  local file="$STATE_DIR/$1$STATE_OUT_SUFFIX" rc=0
  shift
  _node_fg "+$file" "$@" || rc=$?
  _NODE_OUT=$(< "$file")
  return "$rc"
}

# _node_reap_session SID CMD — what a foreground command left running in its session (children it did
# not wait for) is stopped now: nothing else would ever stop it once the command has returned.
_node_reap_session() {
  local deadline grace
  _node_session_pids "$1" || return 0
  printf '%s on %s: %s left process(es) %s behind; stopping them\n' "$(_node_step_now)" \
    "${NODE_NAME:-?}" "$2" "${_NODE_PIDS[*]}" >&2
  kill -s TERM "${_NODE_PIDS[@]}" 2> /dev/null || :  # some may have ended meanwhile
  grace=$(_node_us "${FAIL_GRACE_S:?the node script sets FAIL_GRACE_S}")
  _node_clock
  deadline=$((_NODE_NOW + grace))
  while _node_session_pids "$1"; do
    _node_clock
    if ((_NODE_NOW >= deadline)); then
      kill -s KILL "${_NODE_PIDS[@]}" 2> /dev/null || :
      return 0
    fi
    sleep 0.1
  done
}

# Shell-like rendering of an argv for messages: words that need it are quoted.
_node_quote() {
  local word out=()
  for word in "$@"; do
    if [[ $word =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
      out+=("$word")
    else
      out+=("${word@Q}")
    fi
  done
  printf '%s\n' "${out[*]}"
}

_node_services() {
  _NODE_NAMES=()
  if [[ -s $STATE_DIR/$STATE_SERVICES ]]; then
    mapfile -t _NODE_NAMES < "$STATE_DIR/$STATE_SERVICES"
  fi
}

_node_check_new_service() {
  local name
  [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || fail "start_service: bad service name '$1' (letters, digits, _ . -)"
  _node_services
  for name in "${_NODE_NAMES[@]}"; do
    [[ $name != "$1" ]] || fail "start_service: service '$1' is already started"
  done
}

# kill -0 also succeeds on a zombie (an exited child not reaped yet), so the state is checked too.
_node_alive() {
  local stat
  kill -0 "$1" 2> /dev/null || return 1
  [[ -d /proc/self ]] || return 0  # no procfs: kill -0 is all we have
  read -r stat 2> /dev/null < "/proc/$1/stat" || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

# _node_exited NAME — status 0 once NAME has exited; its code (or "unknown") is left in _NODE_CODE and
# when it exited (epoch seconds; now, if the wrapper could not say) in _NODE_CODE_AT.
_node_exited() {
  local rc_file="$STATE_DIR/$1$STATE_RC_SUFFIX" pid
  _NODE_CODE=
  _NODE_CODE_AT=
  if [[ ! -s $rc_file ]]; then
    read -r pid < "$STATE_DIR/$1$STATE_PID_SUFFIX"
    if _node_alive "$pid"; then
      return 1
    fi
  fi
  _NODE_CODE=unknown  # the wrapper itself was killed before it could record a code
  if [[ -s $rc_file ]]; then
    read -r _NODE_CODE _NODE_CODE_AT < "$rc_file"  # read again: the wrapper writes it just before it exits
  fi
  : "${_NODE_CODE_AT:=$EPOCHREALTIME}"
  return 0
}

# The script's exit code for a service that exited with CODE (non-zero even when CODE is 0).
_node_failure_code() {
  if [[ $1 =~ ^[0-9]+$ && $1 != 0 ]]; then
    echo "$1"
  else
    echo 1
  fi
}
