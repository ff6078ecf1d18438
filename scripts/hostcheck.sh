#!/usr/bin/env bash
# The node's host before any container or engine starts: srun runs this on every node (job.sbatch).
#
#   hostcheck.sh [--sweep-containers] [--image REF --image-staging archive|preloaded --image-load-timeout S]
#                [NIC_CHECK_ARGS...]
#
# 1. --sweep-containers (docker runners): `container.sh sweep` removes what earlier jobs left (by name);
# 2. `sync.py leftovers` (scripts/leftovers.py): no process of an earlier job of this repository runs here;
# 3. --image (docker runners): `sync.py image-ready` (scripts/images.py): the runtime holds the image lock.json
#    names, loaded from the runner's archive when absent; the containers then run with --pull never;
# 4. with arguments, `sync.py nic-check` (scripts/nics.py): the runner's data-plane NICs, what they showed
#    to state/<node>/nic-facts.json (the run's provenance).
# A node that fails says `FAILED host preflight on <node>: <message>` and writes its outcome, so the job's
# verdict names it and its cause; srun --kill-on-bad-exit=1 ends the others, and no container, GPU or
# engine time is spent.
set -Eeuo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/outcome.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib/outcome.sh"

: "${RUN_DIR:?hostcheck.sh runs in a job of make submit}"
: "${SLURMD_NODENAME:?hostcheck.sh runs in a SLURM job step}"
: "${SLURM_JOB_ID:?hostcheck.sh runs in a SLURM job step}"
NODE=$SLURMD_NODENAME
STATE=$RUN_DIR/$STATE_FOLDER/$NODE
SYNC=$(dirname -- "${BASH_SOURCE[0]}")/sync.py
STEP="host preflight"
DETAIL_MAX=1000  # the outcome file is read with a 4 KiB bound (scripts/outcome.py)
mkdir -p -- "$STATE"

# fail RC CAUSE MESSAGE — the node's FAILED line and its outcome (CAUSE a scripts/causes.json id, or none).
fail() {
  printf 'FAILED %s on %s: %s\n' "$STEP" "$NODE" "$3" >&2
  write_outcome_file "$STATE" "$1" failure "$EPOCHREALTIME" "$STEP" "$2" "${3:0:DETAIL_MAX}"
  exit "$1"
}

# check CAUSE COMMAND... — one check; its failure (exit 1, else a usage error: no cause) ends the node.
check() {
  local cause=$1 out rc=0
  shift
  out=$(python3 "$SYNC" "$@" 2>&1) || rc=$?
  ((rc != 0)) || { printf '%s on %s: %s\n' "$STEP" "$NODE" "$out"; return 0; }
  ((rc == 1)) || cause=
  fail "$rc" "$cause" "$out"
}

if [[ ${1:-} == --sweep-containers ]]; then
  shift
  # its own lines name each container it removed, or could not remove
  bash "$(dirname -- "${BASH_SOURCE[0]}")/container.sh" sweep ||
    fail 1 container-leftover "a container of an earlier job on $NODE cannot be removed (the lines above say which)"
fi
check leftover-process leftovers --job "$SLURM_JOB_ID"
if [[ ${1:-} == --image ]]; then
  check image-not-staged image-ready --image "$2" --lock "$RUN_DIR/lock.json" "--$4" --load-timeout "$6"
  shift 6
fi
if (($# > 0)); then
  check nic-not-ready nic-check --facts-out "$STATE/$STATE_NIC_FACTS" "$@"
fi
