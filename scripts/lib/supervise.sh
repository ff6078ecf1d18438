# shellcheck shell=bash
# The watcher: a background loop that treats ANY exit of a registered service as fatal. It writes
# the failure report to $STATE_DIR/failure and sends TERM to the node script, whose trap prints it.

supervise() {
  if [[ -n $_NODE_WATCHER_PID ]] && kill -0 "$_NODE_WATCHER_PID" 2> /dev/null; then
    return 0
  fi
  _node_watch &
  _NODE_WATCHER_PID=$!
  _node_info "supervising services (watcher pid $_NODE_WATCHER_PID, every ${POLL_INTERVAL:?} s)"
}

# A dead watcher would leave services unwatched: every step checks that it still runs.
_node_check_watcher() {
  if [[ -n $_NODE_WATCHER_PID ]] && ! kill -0 "$_NODE_WATCHER_PID" 2> /dev/null; then
    fail "the service watcher (pid $_NODE_WATCHER_PID) is gone"
  fi
}

_node_watch() {
  trap - ERR
  trap '_node_watch_exit "$?"' EXIT
  trap '_node_watch_stop' TERM
  _NODE_NAP_PID=
  # The services file is read on every round, so services started later are watched too.
  declare -A _NODE_STOPPED_SINCE=()
  # Worked out once, by plain assignment: a $(...) inside ((...)) is parsed only when reached, and a TERM
  # arriving during that parse (teardown stops the watcher at any point of its round) broke it ("unexpected
  # EOF while looking for matching )"), the watcher exiting 2 and failing a clean node.
  _NODE_STOPPED_GRACE_US=$(_node_us "${STOPPED_GRACE_S:?the node script sets STOPPED_GRACE_S}")
  while kill -0 "$_NODE_MAIN_PID" 2> /dev/null; do
    if _node_find_exited; then
      trap '' TERM  # the report is written whole: the node script's trap waits for this watcher to end
      _node_write_failure "$_NODE_FOUND" "$_NODE_CODE" "$_NODE_CODE_AT"
      kill -TERM "$_NODE_MAIN_PID"
      exit 0
    fi
    if _node_find_stopped; then
      trap '' TERM
      _node_write_failure "$_NODE_FOUND" stopped "$_NODE_CODE_AT" \
        "$(_node_word service-stopped "$_NODE_FOUND" "$_NODE_STOPPED_PID" "$STOPPED_GRACE_S")"
      kill -TERM "$_NODE_MAIN_PID"
      exit 0
    fi
    sleep "${POLL_INTERVAL:?the node script sets POLL_INTERVAL}" &
    _NODE_NAP_PID=$!
    wait "$_NODE_NAP_PID"
  done
}

_node_find_exited() {
  local name
  _node_services
  for name in "${_NODE_NAMES[@]}"; do
    if _node_exited "$name"; then
      _NODE_FOUND=$name
      return 0
    fi
  done
  return 1
}

# _node_find_died_before T — the service that died first, before T (epoch seconds: when the stop signal
# came), of something else than that signal: srun and scancel signal every process of the step at once, so
# a service that dies of it (TERM, INT, HUP) may be recorded before the node's trap runs -- and, started
# first (a log watcher), found before the engine that had crashed seconds earlier. Sets what
# _node_find_exited sets; status 1 when no service died before T.
_node_find_died_before() {
  local name found='' code='' at=''
  _node_services
  for name in "${_NODE_NAMES[@]}"; do
    _node_exited "$name" && [[ $_NODE_CODE =~ ^[0-9]+$ ]] || continue  # "unknown": no time recorded
    case $_NODE_CODE in 129 | 130 | 143) continue ;; esac
    _node_earlier "$_NODE_CODE_AT" "$1" || continue
    if [[ -z $found ]] || _node_earlier "$_NODE_CODE_AT" "$at"; then
      found=$name code=$_NODE_CODE at=$_NODE_CODE_AT
    fi
  done
  [[ -n $found ]] || return 1
  _NODE_FOUND=$found _NODE_CODE=$code _NODE_CODE_AT=$at
}

# _node_earlier A B — status 0 when epoch time A (seconds, with a fraction) is before B.
_node_earlier() {
  local a b
  a=$(_node_us "$1")
  b=$(_node_us "$2")
  ((a < b))
}

# _node_find_stopped — a service one of whose processes has been stopped (state T: SIGSTOP, a debugger)
# for STOPPED_GRACE_S: it answers nothing, and would hold the job until a readiness timeout (an hour on a
# real cluster) or, once serving, forever. Sets _NODE_FOUND, _NODE_STOPPED_PID and _NODE_CODE_AT (when
# it was first seen stopped).
_node_find_stopped() {
  local name pid sid stat state since now
  _node_services
  _node_clock
  now=$_NODE_NOW
  for name in "${_NODE_NAMES[@]}"; do
    read -r sid 2> /dev/null < "$STATE_DIR/$name$STATE_PID_SUFFIX" || continue
    _node_service_pids "$sid"
    pid=''
    for pid in "${_NODE_PIDS[@]}"; do
      read -r stat 2> /dev/null < "/proc/$pid/stat" || continue
      state=${stat##*) }
      [[ ${state%% *} == [Tt] ]] && break
      pid=''
    done
    if [[ -z $pid ]]; then
      unset '_NODE_STOPPED_SINCE[$name]'
      continue
    fi
    since=${_NODE_STOPPED_SINCE[$name]:-$now}
    _NODE_STOPPED_SINCE[$name]=$since
    if ((now - since >= _NODE_STOPPED_GRACE_US)); then
      _NODE_FOUND=$name
      _NODE_STOPPED_PID=$pid
      _NODE_CODE_AT=$((since / 1000000)).$(printf '%06d' $((since % 1000000)))
      return 0
    fi
  done
  return 1
}

# _node_service_pids PID — the processes of the service PID leads, in _NODE_PIDS: PID and its descendants,
# from /proc/<pid>/task/<tid>/children (reads of the service's own processes only, no fork). Listing its
# session instead (pgrep -s) reads every process of the host: once a second on every node, that was the
# largest CPU cost of a job whose nodes share a host, growing with their number. A kernel without those
# files (no CONFIG_PROC_CHILDREN) gets the session listed.
_node_service_pids() {
  local i=0 file kids=()
  if [[ ! -e /proc/$BASHPID/task/$BASHPID/children ]]; then
    _node_session_pids "$1" || _NODE_PIDS=("$1")
    return 0
  fi
  _NODE_PIDS=("$1")
  # Bounded: pids reused while the tree is read could, in theory, make it look like a loop.
  while ((i < ${#_NODE_PIDS[@]} && i < 4096)); do
    for file in "/proc/${_NODE_PIDS[i]}/task/"*/children; do
      kids=()
      # The file ends without a newline (read's status 1, the words read); a process gone meanwhile has none.
      read -r -a kids 2> /dev/null < "$file" || :
      _NODE_PIDS+=("${kids[@]}")
    done
    i=$((i + 1))
  done
}

# _node_write_failure NAME CODE AT [HEADLINE] — the report of a service that exited (or stopped: CODE
# "stopped"), for the node script to print.
_node_write_failure() {
  local report="$STATE_DIR/$STATE_FAILURE"
  _node_report "$1" "${4:-$(_node_word service-exit "$1" "$2")}" "$2" > "$report.tmp"
  _node_failure_code "$2" > "$STATE_DIR/$STATE_FAILURE_CODE"
  printf '%s\n' "$3" > "$STATE_DIR/$STATE_FAILURE_AT"
  mv -f -- "$report.tmp" "$report"  # complete before the node script reads it
}

_node_watch_stop() {
  if [[ -n $_NODE_NAP_PID ]]; then
    kill "$_NODE_NAP_PID" 2> /dev/null || :  # the nap may have ended on its own: nothing to stop
  fi
  exit 0
}

# The watcher died of an error of its own: that is a failure too, never a silent loss of watch.
_node_watch_exit() {
  if (($1 > 128)); then
    # A signal for the whole node (srun ending the step) reached one of the watcher's own children
    # first: the node is being stopped, the node script says so; no failure of the watcher's.
    kill -TERM "$_NODE_MAIN_PID" 2> /dev/null || :  # the node script may have exited already
  elif (($1 != 0)); then
    echo 1 > "$STATE_DIR/$STATE_FAILURE_CODE"
    _node_word headline "$(_node_step_now)" "$NODE_NAME" "$(_node_word watcher-stopped "$1")" \
      > "$STATE_DIR/$STATE_FAILURE"
    kill -TERM "$_NODE_MAIN_PID"
  fi
}
