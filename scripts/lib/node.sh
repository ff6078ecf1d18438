# shellcheck shell=bash
# shellcheck source-path=SCRIPTDIR
# Fail-fast node runtime (source me): traps, steps, services, supervision and teardown.
#
# The node script runs under `set -Eeuo pipefail`, sets NODE_NAME, LOG_DIR, STATE_DIR, SCRIPTS_DIR and
# the runner's values (POLL_INTERVAL, STOPPED_GRACE_S, STALL_GRACE_S, GRACE_S, FAIL_GRACE_S,
# LOG_TAIL_LINES, ROUTER_WARNING_LINES: rendered from the plan, no default here; optional PYTHON=python3),
# sources this file and calls node_init. Then:
#   step NAME                              names what follows in every message
#   start_service NAME CMD [ARGS...]       own session; log $LOG_DIR/NAME.log; pid $STATE_DIR/NAME.pid
#   service_pid NAME
#   wait_http NAME URL TIMEOUT [--expect K=V ...]        fails at once if NAME exits meanwhile
#   barrier NAME RANK SIZE HOST:PORT TIMEOUT [--nodes A,B] [--publish JSON] [--out FILE] [--bind ADDR]
#   run_cmd CMD [ARGS...]                  a program in the foreground, interruptible by the watcher
#   supervise                              from now on ANY exit of a service is fatal
#   require_commands CMD...                preflight: all of them on PATH
#   require_version CMD DIST VERSION       preflight: CMD's package is exactly VERSION
#   collect_result SRC DST MAX_ERR MIN_S   a valid result (scripts/results.py) copied to DST atomically
#   fail MESSAGE
# What it prints on a failure comes from scripts/failures.py, the job's one failure vocabulary.
# Exit code: the first failure's — a failed command's status, a service's exit code (1 if it exited
# 0), 4 for a readiness timeout, sync.py's code for a barrier, 128+N on signal N; 0 for a clean run.
# The EXIT trap always tears down every service (TERM, grace, KILL) and the foreground command.

_NODE_LIB=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)

source "$_NODE_LIB/words.sh"
source "$_NODE_LIB/outcome.sh"
source "$_NODE_LIB/report.sh"
source "$_NODE_LIB/service.sh"
source "$_NODE_LIB/sync.sh"
source "$_NODE_LIB/supervise.sh"
source "$_NODE_LIB/teardown.sh"
source "$_NODE_LIB/preflight.sh"
source "$_NODE_LIB/results.sh"

_NODE_STEP=init
_NODE_RC=
_NODE_MAIN_PID=
_NODE_WATCHER_PID=
_NODE_FG_PID=
_NODE_RETURNED=
_NODE_FAILED_AT=
_NODE_FAILED_KIND=
_NODE_FAILED_STEP=

node_init() {
  _NODE_MAIN_PID=$BASHPID
  trap '_node_on_err "$?" "$LINENO" "$BASH_COMMAND"' ERR
  trap '_node_on_signal TERM' TERM
  trap '_node_on_signal INT' INT
  trap '_node_on_exit "$?"' EXIT
  _node_check_config
  mkdir -p -- "$LOG_DIR" "$STATE_DIR"
  # State of an earlier run in the same directory must not look like ours.
  rm -f -- "$STATE_DIR/$STATE_SERVICES" "$STATE_DIR/$STATE_FAILURE" "$STATE_DIR/$STATE_FAILURE_CODE" \
    "$STATE_DIR/$STATE_FAILURE_AT" "$STATE_DIR/$STATE_OUTCOME" "$STATE_DIR/$STATE_SAID" "$STATE_DIR/$STATE_CAUSE" \
    "$STATE_DIR/$STATE_MARKS"
  printf '%s\n' "$_NODE_STEP" > "$STATE_DIR/$STATE_STEP"
  _node_mark "$_NODE_STEP"
}

# _node_mark WHAT — when WHAT happened, to the microsecond (job.out's step lines have whole seconds), and
# the CPU this script has used so far (itself and the commands it waited for, in clock ticks: /proc's
# utime+stime+cutime+cstime): what `make bench-scale` times the job's own phases and costs from. A lost
# mark costs a measurement, never the job.
_node_mark() {
  local stat='' fields=()
  read -r stat 2> /dev/null < "/proc/$BASHPID/stat" || :
  read -r -a fields <<< "${stat##*) }"
  printf '%s %s %s\n' "$EPOCHREALTIME" \
    "$((${fields[11]:-0} + ${fields[12]:-0} + ${fields[13]:-0} + ${fields[14]:-0}))" "$1" \
    >> "$STATE_DIR/$STATE_MARKS" || :
}

step() {
  _NODE_STEP=$1
  # The watcher is a separate process: it reads the current step from this file.
  printf '%s\n' "$1" > "$STATE_DIR/$STATE_STEP.tmp"
  mv -f -- "$STATE_DIR/$STATE_STEP.tmp" "$STATE_DIR/$STATE_STEP"
  _node_mark "step $1"
  _node_info "step: $1"
  _node_check_watcher
}

fail() {
  _node_failing
  _node_say "$*"
  _node_exit 1
}

_node_check_config() {
  local var
  for var in NODE_NAME LOG_DIR STATE_DIR SCRIPTS_DIR; do
    [[ -n ${!var:-} ]] || fail "node_init: $var is not set"
  done
  [[ -f $SCRIPTS_DIR/sync.py ]] || fail "node_init: $SCRIPTS_DIR/sync.py not found"
  # The runner's values (schemas/launch.py): each set by the node script, none defaulted here.
  for var in POLL_INTERVAL STOPPED_GRACE_S STALL_GRACE_S GRACE_S FAIL_GRACE_S; do
    if [[ ! ${!var:-} =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
      fail "node_init: $var must be a number of seconds (got '${!var:-}', unset: the node script sets it)"
    fi
  done
  for var in LOG_TAIL_LINES ROUTER_WARNING_LINES; do
    if [[ ! ${!var:-} =~ ^[1-9][0-9]*$ ]]; then
      fail "node_init: $var must be a positive integer (got '${!var:-}', unset: the node script sets it)"
    fi
  done
}

_node_info() {
  printf '[%(%H:%M:%S)T] %s %s\n' -1 "${NODE_NAME:-?}" "$1"
}

# What the node says of a failure is also kept (STATE_DIR/said): its outcome's cause is classified from it.
_node_say() {
  local said
  said=$(_node_word headline "$_NODE_STEP" "${NODE_NAME:-?}" "$1")
  printf '%s\n' "$said" >&2
  if [[ -d ${STATE_DIR:-} ]]; then
    printf '%s\n' "$said" >> "$STATE_DIR/$STATE_SAID" || :  # the line is out already; the cause says unknown
  fi
}

# One failure report is enough: once failing, a late TERM from the watcher is ignored.
_node_failing() {
  trap '' TERM INT
}

# _node_exit CODE [KIND] — KIND "signal" marks a node ended by others (srun, a TERM), not a root cause.
_node_exit() {
  : "${_NODE_RC:=$1}"
  if (($1 != 0)) && [[ -z $_NODE_FAILED_AT ]]; then
    _NODE_FAILED_AT=$EPOCHREALTIME
    _NODE_FAILED_KIND=${2:-failure}
    _NODE_FAILED_STEP=$_NODE_STEP
  fi
  exit "$1"
}

# $STATE_DIR/outcome: how this node ended, for job.sbatch to name the job's first failure.
# A node that failed (not one ended by others) names the cause class of its failure (scripts/causes.json).
_node_write_outcome() {
  local step=${_NODE_FAILED_STEP:-$_NODE_STEP} kind=${_NODE_FAILED_KIND:-failure} cause='' detail='' out
  if [[ $_NODE_RC != 0 && -z $_NODE_FAILED_AT ]]; then
    _NODE_FAILED_AT=$EPOCHREALTIME
  fi
  if [[ $_NODE_RC != 0 && $kind == failure ]]; then
    local reported=''  # a service report has printed its cause line already
    [[ ! -s $STATE_DIR/$STATE_CAUSE ]] || reported=1
    if out=$("${PYTHON:-python3}" "$_NODE_LIB/../failures.py" node-cause --state-dir "$STATE_DIR" \
      --step "$step" --code "$_NODE_RC" 2>&1) && [[ $out == *$'\t'* ]]; then
      cause=${out%%$'\t'*}
      detail=${out#*$'\t'}
    else
      cause=unknown
      detail="the cause could not be classified: $out"
    fi
    [[ -n $reported ]] || _node_word cause "$cause ($detail)" >&2
  fi
  write_outcome_file "$STATE_DIR" "$_NODE_RC" "$kind" "${_NODE_FAILED_AT:-}" "$step" "$cause" "$detail"
}

_node_on_err() {
  local code=$1 line=$2 command=$3
  if [[ $BASHPID != "$_NODE_MAIN_PID" ]]; then
    exit "$code"  # a subshell: its parent sees the status and reports it
  fi
  _node_failing
  if [[ $command == "return \"\$run_cmd_rc\"" ]]; then  # run_cmd's own return: see run_cmd
    command=$_NODE_RETURNED
  fi
  _node_say "$(_node_word command-exit "$command" "$code" "$line")"
  _node_exit "$code"
}

# A node that fails (not one ended by others) tells the job's other nodes before its own teardown, so
# that every node tears down at once: srun --kill-on-bad-exit alone ends them only after this node's
# teardown has finished (its grace period, e.g. LMCache's, then theirs: the waits add up). The signal
# goes to the whole job step (our own processes too: the failing script ignores TERM by now). Without
# SLURM's client commands (a container image without them) srun's way is the only one, as before.
# scancel runs in the background while this node tears down (slurmctld answers in a second or more when
# the cluster is busy); _node_told_others waits for its answer before the node's outcome is written.
_NODE_TELL_PID=''
_NODE_TELL_DEADLINE=0
_node_tell_others() {
  [[ $_NODE_RC != 0 && ${_NODE_FAILED_KIND:-failure} != signal ]] || return 0
  [[ -n ${SLURM_JOB_ID:-} && -n ${SLURM_STEP_ID:-} ]] || return 0
  [[ -d ${STATE_DIR:-} ]] && command -v scancel > /dev/null 2>&1 || return 0
  local out="$STATE_DIR/$STATE_SCANCEL_OUT"
  rm -f -- "$out.rc"
  # Polled, not waited for: the TERM it brings reaches this very step, and a `timeout` wrapper would die
  # of it (this shell and its children ignore TERM by now); bounded, if slurmctld is slow.
  { scancel --signal=TERM "$SLURM_JOB_ID.$SLURM_STEP_ID" > "$out" 2>&1; echo "$?" > "$out.rc"; } &
  _NODE_TELL_PID=$!
  _node_clock
  _NODE_TELL_DEADLINE=$((_NODE_NOW + 5000000))
}

# The answer of _node_tell_others' scancel (at most 5 s after it started), said on the node's output.
_node_told_others() {
  local pid=$_NODE_TELL_PID out="$STATE_DIR/$STATE_SCANCEL_OUT"
  [[ -n $pid ]] || return 0
  _NODE_TELL_PID=
  while _node_alive "$pid"; do
    _node_clock
    if ((_NODE_NOW >= _NODE_TELL_DEADLINE)); then
      pkill -KILL -P "$pid" 2> /dev/null || :  # scancel itself
      kill -s KILL "$pid" 2> /dev/null || :
      printf 'teardown on %s: scancel did not answer within 5 s; srun will stop the other nodes\n' \
        "${NODE_NAME:-?}" >&2
      return 0
    fi
    sleep 0.02
  done
  if [[ $(cat -- "$out.rc" 2> /dev/null) != 0 ]]; then
    printf 'teardown on %s: could not signal the other nodes (%s); srun will\n' "${NODE_NAME:-?}" \
      "$(tr '\n' ' ' < "$out" 2> /dev/null)" >&2
    return 0
  fi
  _node_info "told the other nodes to stop (scancel --signal=TERM $SLURM_JOB_ID.$SLURM_STEP_ID)"
}

_node_on_signal() {
  local term_at=$EPOCHREALTIME  # before anything else: what died earlier died of something else
  _node_failing
  _node_stop_watcher  # one writer of the failure report from here on: this trap
  local report="${STATE_DIR:-}/$STATE_FAILURE"
  # A service that died before the stop signal came is this node's failure, even when another node's
  # failure (caused by it, say: a peer's request to it) stopped the job before the watcher's next round.
  if [[ ! -s $report && -d ${STATE_DIR:-} ]] && _node_find_died_before "$term_at"; then
    _node_write_failure "$_NODE_FOUND" "$_NODE_CODE" "$_NODE_CODE_AT"
  fi
  if [[ -s $report ]]; then
    cat -- "$report" >&2
    _NODE_FAILED_AT=$(< "${STATE_DIR:-}/$STATE_FAILURE_AT") || _NODE_FAILED_AT=$EPOCHREALTIME
    _NODE_FAILED_KIND=failure
    _NODE_FAILED_STEP=$_NODE_STEP
    _node_exit "$(< "${STATE_DIR:-}/$STATE_FAILURE_CODE")"
  fi
  _node_say "$(_node_word signal "$1")"
  local number
  number=$(kill -l "$1")
  _node_exit $((128 + number)) signal
}

_node_on_exit() {
  _node_failing
  trap - ERR
  set +e  # teardown checks every status itself and must run to the end
  : "${_NODE_RC:=$1}"
  _node_tell_others
  _node_teardown
  _node_told_others
  if [[ -d ${STATE_DIR:-} ]]; then
    _node_write_outcome
  fi
  _node_hand_back
  exit "$_NODE_RC"
}

# _node_hand_back — a container that ran as root (a runner's declared fallback, RUN_OWNER=uid:gid set by
# scripts/container.sh) hands what this node wrote in the run folder back to the submitting user, who could
# not delete root's files otherwise. Said when it cannot.
_node_hand_back() {
  [[ -n ${RUN_OWNER:-} && $EUID == 0 ]] || return 0
  local folders=() folder
  for folder in "${LOG_DIR:-}" "${STATE_DIR:-}" "${RESULTS_DIR:-}"; do
    [[ -n $folder && -e $folder ]] && folders+=("$folder")
  done
  ((${#folders[@]} > 0)) || return 0
  chown -R -- "$RUN_OWNER" "${folders[@]}" ||
    printf 'teardown on %s: could not hand %s back to %s (the lines above say why): remove them as root\n' \
      "${NODE_NAME:-?}" "${folders[*]}" "$RUN_OWNER" >&2
}
