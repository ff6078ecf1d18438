# shellcheck shell=bash
# Failure report of one service: headline, tail of its log and a classified cause (scripts/failures.py).

# _node_report NAME HEADLINE [CODE] — prints the report to stdout; CODE is empty while it still runs.
_node_report() {
  local out rc=0
  out=$("${PYTHON:-python3}" "$_NODE_LIB/../failures.py" report --step "$(_node_step_now)" \
    --node "$NODE_NAME" --service "$1" --headline "$2" --log "$LOG_DIR/$1.log" --code "${3-}" \
    --lines "${LOG_TAIL_LINES:?the node script sets LOG_TAIL_LINES}" --cause-file "$STATE_DIR/$STATE_CAUSE" 2>&1) || rc=$?
  if ((rc != 0)); then  # the headline at least, whatever happened to the report
    _node_word headline "$(_node_step_now)" "$NODE_NAME" "$2 (no report: $out)"
    return 0
  fi
  printf '%s\n' "$out"
}

# The watcher runs in its own process, so the current step comes from the file step() writes.
_node_step_now() {
  local now=''
  if [[ -s $STATE_DIR/$STATE_STEP ]]; then
    read -r now < "$STATE_DIR/$STATE_STEP"
  fi
  printf '%s\n' "${now:-$_NODE_STEP}"
}

# _node_cause LOG CODE [SERVICE] — the cause line's text alone: <id> (<detail>).
_node_cause() {
  "${PYTHON:-python3}" "$_NODE_LIB/../failures.py" cause --log "$1" --code "$2" --service "${3:-}"
}
