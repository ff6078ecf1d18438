#!/usr/bin/env bash
# The node's host before any container or engine starts: srun runs this on every node (job.sbatch).
#
#   hostcheck.sh NIC_CHECK_ARGS...   `sync.py nic-check` (scripts/nics.py): the runner's data-plane NICs
#
# What the node showed goes to state/<node>/nic-facts.json (the run's provenance). A node that fails says
# `FAILED host preflight on <node>: <message>` and writes its outcome, so the job's verdict names it and
# its cause; srun --kill-on-bad-exit=1 ends the others, and no container, GPU or engine time is spent.
set -Eeuo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/outcome.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib/outcome.sh"

: "${RUN_DIR:?hostcheck.sh runs in a job of make submit}"
: "${SLURMD_NODENAME:?hostcheck.sh runs in a SLURM job step}"
NODE=$SLURMD_NODENAME
STATE=$RUN_DIR/state/$NODE
STEP="host preflight"
DETAIL_MAX=1000  # the outcome file is read with a 4 KiB bound (scripts/outcome.py)
mkdir -p -- "$STATE"

rc=0
out=$(python3 "$(dirname -- "${BASH_SOURCE[0]}")/sync.py" nic-check --facts-out "$STATE/nic-facts.json" "$@" 2>&1) ||
  rc=$?
if ((rc == 0)); then
  printf '%s on %s: %s\n' "$STEP" "$NODE" "$out"
  exit 0
fi
printf 'FAILED %s on %s: %s\n' "$STEP" "$NODE" "$out" >&2
cause=
((rc != 1)) || cause=nic-not-ready  # 1: a NIC is not ready (scripts/nics.py); else a usage error, said above
write_outcome_file "$STATE" "$rc" failure "$EPOCHREALTIME" "$STEP" "$cause" "${out:0:DETAIL_MAX}"
exit "$rc"
