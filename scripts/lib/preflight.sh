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

# require_version COMMAND DIST VERSION [MODULE...] — the package behind COMMAND is exactly the pinned version
# (an image may lack a component, or carry another build of it), and its Python imports each MODULE (a
# compiled part that does not load fails here, not when the engine loads it after its weights).
require_version() {
  (($# >= 3)) || fail "usage: require_version COMMAND DIST VERSION [MODULE...]"
  local rc=0 imports=() module
  for module in "${@:4}"; do
    imports+=(--import "$module")
  done
  _node_capture dist-version "${PYTHON:-python3}" "$SCRIPTS_DIR/sync.py" dist-version --command "$1" \
    --dist "$2" --expect "$3" "${imports[@]}" || rc=$?
  ((rc == 0)) || fail "$_NODE_OUT"
  _node_info "$_NODE_OUT"
}

# require_drained_gpus MAX WAIT — every AMD GPU free before anything loads: at most MAX of its VRAM in use and
# no process holding a GPU device, re-checked for up to WAIT seconds (an earlier job's VRAM may still be
# draining); the node's driver, ROCm and NIC firmware go to $STATE_DIR/node-facts.json.
require_drained_gpus() {
  local rc=0
  _node_capture gpu-drain "${PYTHON:-python3}" "$SCRIPTS_DIR/sync.py" gpu-drain --max-used "$1" --wait "$2" \
    --facts-out "$STATE_DIR/$STATE_NODE_FACTS" || rc=$?
  ((rc == 0)) || fail "$_NODE_OUT"
  _node_info "$_NODE_OUT"
}

# require_rdma_registration ARGS... — Mooncake registers this node's GPU memory over the runner's RDMA devices
# the way the runner says (scripts/rdmaprobe.py), before any engine loads its weights.
require_rdma_registration() {
  local rc=0
  _node_capture rdma-register "${PYTHON:-python3}" "$SCRIPTS_DIR/sync.py" rdma-register "$@" || rc=$?
  ((rc == 0)) || fail "$_NODE_OUT"
  _node_info "$_NODE_OUT"
}

# require_free_ports SERVICE=ADDR:PORT... — nothing listens where this node's services will: a leftover
# of an earlier job is named now, not when its service starts after the engines have loaded.
require_free_ports() {
  local rc=0
  _node_capture ports-free "${PYTHON:-python3}" "$SCRIPTS_DIR/sync.py" ports-free "$@" || rc=$?
  if ((rc != 0)); then
    _node_failing
    _node_say "$_NODE_OUT"
    _node_exit "$rc"
  fi
  _node_info "$_NODE_OUT"
}

# install_set NAME PYTHON ROOT env|layer COMMAND... — the pinned set NAME (recipe/setup/NAME.txt, every wheel
# with its SHA-256) from the run's wheelhouse, kept under ROOT by its hash (no network, nothing of the image
# replaced): env, a tool in an environment of this node's python3; layer, a library the engines import, put
# first on PYTHONPATH. Its COMMANDs go first on PATH.
install_set() {
  (($# >= 5)) || fail "usage: install_set NAME PYTHON ROOT env|layer COMMAND..."
  local name=$1 python=$2 root=$3 mode=$4 rc=0 cmd
  shift 4
  local options=()
  for cmd in "$@"; do options+=(--command "$cmd"); done
  [[ $mode == layer ]] && options+=(--layer-link "$STATE_DIR/$STATE_SITE_PREFIX$name")
  _node_capture "setup-$name" "${PYTHON:-python3}" "$SCRIPTS_DIR/sync.py" setup-env \
    --lock "$RECIPE_DIR/setup/$name.txt" --wheelhouse "$RECIPE_DIR/wheelhouse" --root "$root" \
    --python "$python" --bin-dir "$STATE_DIR/$STATE_BIN" "${options[@]}" || rc=$?
  ((rc == 0)) || fail "$_NODE_OUT"
  _node_info "$_NODE_OUT"
  PATH=$STATE_DIR/$STATE_BIN:$PATH
  if [[ $mode == layer ]]; then
    export PYTHONPATH="$STATE_DIR/$STATE_SITE_PREFIX$name${PYTHONPATH:+:$PYTHONPATH}"
  fi
}
