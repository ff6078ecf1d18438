# shellcheck shell=bash
# Failure report of one service: headline, tail of its log and a cause classified from the log.

# _node_report NAME HEADLINE [CODE] — prints the report to stdout; CODE is empty while it still runs.
_node_report() {
  local name=$1 headline=$2 code=${3-} log="$LOG_DIR/$1.log" lines=${LOG_TAIL_LINES:-20}
  printf 'FAILED %s on %s: %s\n' "$(_node_step_now)" "$NODE_NAME" "$headline"
  printf -- '--- last %s lines of %s ---\n' "$lines" "$log"
  _node_tail "$log" "$lines"
  printf -- '--- end of %s log ---\n' "$name"
  printf 'cause: %s\n' "$(_node_cause "$log" "$code")"
}

# The watcher runs in its own process, so the current step comes from the file step() writes.
_node_step_now() {
  local now=''
  if [[ -s $STATE_DIR/step ]]; then
    read -r now < "$STATE_DIR/step"
  fi
  printf '%s\n' "${now:-$_NODE_STEP}"
}

_node_tail() {
  local text
  if [[ ! -r $1 ]]; then
    printf '(no log file)\n'
    return 0
  fi
  text=$(tail -n "$2" -- "$1")
  printf '%s\n' "${text:-(empty log)}"
}

# _node_cause LOG CODE — first match wins, in the order of the runbook.
_node_cause() {
  local log=$1 code=$2 text='' lower
  if [[ -r $log ]]; then
    text=$(tail -n 200 -- "$log")  # wider than the tail shown: the root cause is often further up
  fi
  lower=${text,,}
  if [[ $text =~ KNOWN\ ISSUE\ ([a-z0-9-]+): ]]; then
    # scripts/logwatch.py saw an engine bug of configs/known-issues.yaml; its report says what to do.
    echo "known issue ${BASH_REMATCH[1]} (configs/known-issues.yaml)"
  elif [[ $lower == *"address already in use"* ]]; then
    echo "port already in use"
  elif [[ $lower == *"out of memory"* || $lower == *outofmemory* ]]; then
    echo "out of memory"
  elif [[ $lower == *"connection refused"* || $lower == *connectionerror* ]]; then
    echo "a peer is unreachable"
  elif [[ $text =~ No\ module\ named\ ([A-Za-z0-9_.\']+) ]]; then
    echo "python module ${BASH_REMATCH[1]} is not installed in the image"
  elif [[ $text == *"Traceback (most recent call last)"* ]]; then
    echo "python exception: $(_node_exception_line "$text")"
  else
    _node_cause_from_code "$code"
  fi
}

_node_cause_from_code() {
  local code=$1 signal
  if [[ -z $code ]]; then
    echo "not ready in time (the process is still running)"
  elif [[ $code == 0 ]]; then
    echo "exited cleanly while it should keep serving"
  elif [[ $code == 127 ]]; then
    echo "command not found"
  elif [[ $code =~ ^[0-9]+$ ]] && ((code > 128)) && signal=$(kill -l "$((code - 128))" 2> /dev/null); then
    echo "killed by signal SIG$signal"
  else
    echo "unknown (see log)"
  fi
}

# The exception line of the last traceback: the first unindented line after its header. Loggers
# (vLLM workers, `ERROR ... [file.py:N]`) put the same prefix on every line, so it is removed first.
_node_exception_line() {
  local -a lines
  local i start=0 prefix line last=''
  mapfile -t lines <<< "$1"
  for i in "${!lines[@]}"; do
    if [[ ${lines[i]} == *"Traceback (most recent call last)"* ]]; then
      start=$i
    fi
  done
  prefix=${lines[start]%%Traceback*}
  for ((i = start + 1; i < ${#lines[@]}; i++)); do
    line=${lines[i]#"$prefix"}
    line=${line%$'\r'}
    if [[ -n $line && $line != [[:space:]]* ]]; then
      printf '%s\n' "$line"
      return 0
    fi
    if [[ -n ${line//[[:space:]]/} ]]; then
      last=${line#"${line%%[![:space:]]*}"}
    fi
  done
  printf '%s\n' "${last:-traceback cut off}"  # the tail ended inside the traceback
}
