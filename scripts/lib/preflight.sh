# shellcheck shell=bash
# Preflight: what a role runs must be on the node, in the pinned build, before anything starts.

# require_commands CMD... — every program a role starts is on PATH, named all at once.
require_commands() {
  local cmd missing=()
  for cmd in "$@"; do
    command -v -- "$cmd" > /dev/null || missing+=("$cmd")
  done
  ((${#missing[@]} == 0)) || fail "$(_node_word not-on-path "${missing[*]}" "$PATH")"
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

# require_free_ports SERVICE=ADDR:PORT... — nothing listens where this node's services will: a leftover
# of an earlier job is named now, not when its service starts after the engines have loaded.
require_free_ports() {
  local out rc=0
  out=$("${PYTHON:-python3}" "$SCRIPTS_DIR/sync.py" ports-free "$@" 2>&1) || rc=$?
  if ((rc != 0)); then
    _node_failing
    _node_say "$out"
    _node_exit "$rc"
  fi
  _node_info "$out"
}
