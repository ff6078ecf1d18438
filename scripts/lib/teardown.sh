# shellcheck shell=bash
# Teardown, run once from the EXIT trap: stop the watcher, TERM every process group we started,
# SIGKILL what outlives the grace period, and report anything that survives even that.

_NODE_KILL_WAIT_S=2  # after SIGKILL only the kernel is left to wait for

_node_teardown() {
  _node_stop_watcher
  _node_late_failure
  _node_collect_groups
  if ((${#_NODE_GROUPS[@]} > 0)); then
    _node_stop_groups
  fi
  _node_info "teardown: done (exit code $_NODE_RC)"
}

_node_stop_groups() {
  local grace=${GRACE_S:?the node script sets GRACE_S}
  if [[ $_NODE_RC != 0 ]]; then
    grace=${FAIL_GRACE_S:?the node script sets FAIL_GRACE_S}  # failing: a graceful exit buys nothing
  fi
  _node_info "teardown: stopping ${_NODE_LABELS[*]} (grace ${grace} s)"
  _node_signal_groups TERM
  local live
  if ! _node_await_groups "$grace" && live=$(_node_live_labels) && [[ -n $live ]]; then
    printf 'teardown on %s: still running after %s s, sending SIGKILL: %s\n' "${NODE_NAME:-?}" "$grace" "$live" >&2
    _node_signal_groups KILL
    _node_await_groups "$_NODE_KILL_WAIT_S" || _node_report_survivors
  fi
}

# A failure the watcher flagged just as the script ended still counts (its TERM was ignored).
_node_late_failure() {
  if [[ $_NODE_RC == 0 && -s ${STATE_DIR:-}/$STATE_FAILURE ]]; then
    cat -- "$STATE_DIR/$STATE_FAILURE" >&2
    _NODE_RC=$(< "$STATE_DIR/$STATE_FAILURE_CODE")
  fi
}

_node_stop_watcher() {
  local pid=$_NODE_WATCHER_PID deadline
  [[ -n $pid ]] || return 0
  _NODE_WATCHER_PID=
  kill -TERM "$pid" 2> /dev/null || :  # it exits by itself after reporting a failure
  # Polled, not `wait`ed: in a trap that interrupted `wait`, bash can block in it for good.
  deadline=$(_node_us "$_NODE_KILL_WAIT_S")
  _node_clock
  deadline=$((_NODE_NOW + deadline))
  while _node_alive "$pid"; do
    _node_clock
    if ((_NODE_NOW >= deadline)); then
      kill -s KILL "$pid" 2> /dev/null || :  # exited meanwhile: nothing to kill
      return 0
    fi
    sleep 0.05
  done
}

# Process groups to stop: the foreground command first, then services in reverse start order.
_node_collect_groups() {
  local i name pid
  _NODE_GROUPS=()
  _NODE_LABELS=()
  if [[ -n $_NODE_FG_PID ]]; then
    _NODE_GROUPS+=("$_NODE_FG_PID")
    _NODE_LABELS+=("command(pid $_NODE_FG_PID)")
  fi
  [[ -n ${STATE_DIR:-} ]] || return 0  # node_init failed before the state directory was known
  _node_services
  for ((i = ${#_NODE_NAMES[@]} - 1; i >= 0; i--)); do
    name=${_NODE_NAMES[i]}
    if read -r pid < "$STATE_DIR/$name$STATE_PID_SUFFIX" && _node_group_alive "$pid"; then
      _NODE_GROUPS+=("$pid")
      _NODE_LABELS+=("$name")
    fi
  done
}

_node_signal_groups() {
  local i sid pid
  for i in "${!_NODE_GROUPS[@]}"; do
    sid=${_NODE_GROUPS[i]}
    # No group yet (setsid not reached) or none any more: signal the leader itself.
    if ! kill -s "$1" -- "-$sid" 2> /dev/null; then
      kill -s "$1" "$sid" 2> /dev/null || :  # gone already: _node_await_groups is the check
    fi
    if [[ $1 == KILL ]] && _node_session_pids "$sid"; then
      for pid in "${_NODE_PIDS[@]}"; do  # members that moved to a group of their own
        kill -s KILL "$pid" 2> /dev/null || :
      done
    fi
  done
}

# _node_await_groups SECONDS — status 0 once every group is gone, 1 at the deadline.
_node_await_groups() {
  local deadline
  deadline=$(_node_us "$1")
  _node_clock
  deadline=$((_NODE_NOW + deadline))
  while _node_any_group_alive; do
    _node_clock
    ((_NODE_NOW < deadline)) || return 1
    sleep 0.1
  done
}

# Status 0 while any group lives. A live leader says so without a fork; only once every leader is gone
# are the sessions listed, all in one pgrep: a listing reads every process of the host, and when a job
# fails every node tears down at once (on one host of 32 simulated nodes, one listing per group and poll
# on each node kept the CPUs busy for seconds).
_node_any_group_alive() {
  local sid
  for sid in "${_NODE_GROUPS[@]}"; do
    ! _node_alive "$sid" || return 0
  done
  _node_session_pids "$(IFS=,; printf '%s' "${_NODE_GROUPS[*]}")"
}

_node_live_labels() {
  local i live=()
  for i in "${!_NODE_GROUPS[@]}"; do
    if _node_group_alive "${_NODE_GROUPS[i]}"; then
      live+=("${_NODE_LABELS[i]}")
    fi
  done
  printf '%s\n' "${live[*]}"
}

_node_group_alive() {
  _node_alive "$1" || _node_session_pids "$1"
}

# _node_session_pids SID[,SID...] — status 0 when those sessions have live (non-zombie) processes, in
# _NODE_PIDS.
_node_session_pids() {
  local pid listed
  _NODE_PIDS=()
  listed=$(pgrep -s "$1") || return 1
  for pid in $listed; do
    if _node_alive "$pid"; then
      _NODE_PIDS+=("$pid")
    fi
  done
  ((${#_NODE_PIDS[@]} > 0))
}

_node_report_survivors() {
  local i sid
  for i in "${!_NODE_GROUPS[@]}"; do
    sid=${_NODE_GROUPS[i]}
    if _node_session_pids "$sid"; then
      printf 'teardown on %s: %s left processes behind after SIGKILL:\n' "${NODE_NAME:-?}" "${_NODE_LABELS[i]}" >&2
      ps -o pid=,stat=,args= -p "$(IFS=,; echo "${_NODE_PIDS[*]}")" >&2
    fi
  done
  if [[ $_NODE_RC == 0 ]]; then
    _NODE_RC=1  # processes left behind are a failure even of an otherwise clean run
  fi
}

# _node_clock — _NODE_NOW: the time in microseconds, without a subshell. Loops that poll use it: a $(...)
# inside ((...)) is parsed only when reached, and a signal's trap running during that parse breaks it
# (bash 5.2: "unexpected EOF while looking for matching )", exit 2), which a teardown or a watcher must
# never meet.
_node_clock() {
  _NODE_NOW=${EPOCHREALTIME//[!0-9]/}
}

# _node_us SECONDS — "1.5" → 1500000 (bash has no floating point).
_node_us() {
  local whole=${1%%.*} frac=''
  if [[ $1 == *.* ]]; then
    frac=${1#*.}
  fi
  frac="${frac}000000"
  echo $((10#0$whole * 1000000 + 10#${frac:0:6}))  # 0 before: "" is 0
}
