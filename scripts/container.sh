#!/usr/bin/env bash
# The node's container, on the host side (container-runtime: docker): srun runs this on every node.
#
#   container.sh run DOCKER_RUN_ARGS...   one container per job and node, stopped and removed by name
#   container.sh sweep                    remove every container of this repository left on this node
#
# A container is not its `docker` client: a client that slurmstepd SIGKILLs (its KillWait ran out) leaves the
# container running and holding the node's GPUs for the next job (docs/upstream-facts.md#containers). So every
# container is named disagg-<job>-<node> and labelled; `run` removes what earlier jobs left on this node
# before it starts one, and stops its own by name when the step is signalled; job.sbatch sweeps every node
# after the step, for what a SIGKILL left. Nothing here is quiet: each removal is printed.
set -Eeuo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/outcome.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib/outcome.sh"

LABEL=disagg-recipes.node  # every container of ours carries its node (sim/containers.py NODE_LABEL)
DOCKER=${DOCKER:-docker}

: "${SLURM_JOB_ID:?container.sh runs in a SLURM job step}"
: "${SLURMD_NODENAME:?container.sh runs in a SLURM job step}"
NAME="disagg-${SLURM_JOB_ID}-${SLURMD_NODENAME}"

say() {
  printf 'container on %s: %s\n' "$SLURMD_NODENAME" "$*" >&2
}

# ours_on_node — names of this repository's containers for this node, running or not, one per line.
ours_on_node() {
  "$DOCKER" ps --all --filter "label=$LABEL=$SLURMD_NODENAME" --format '{{.Names}}'
}

# remove NAME WHY — docker rm -f of a listed container, said; one that cannot be removed is a failure.
remove() {
  local out
  if ! out=$("$DOCKER" rm --force "$1" 2>&1); then
    say "cannot remove $1 ($2): $out"
    return 1
  fi
  say "removed $1 ($2)"
}

# sweep [KEEP] — remove every container of ours on this node except KEEP.
sweep() {
  local names name failed=0 job
  names=$(ours_on_node) || {
    say "cannot list containers with $DOCKER ps (exit code $?)"
    return 1
  }
  while IFS= read -r name; do
    [[ -n $name && $name != "${1:-}" ]] || continue
    job=${name#disagg-}
    remove "$name" "left by job ${job%-"$SLURMD_NODENAME"}" || failed=1
  done <<< "$names"
  return "$failed"
}

# The outcome file of a node whose script never ran (the image is missing, docker refused a flag): the
# job's verdict (outcome.py) names this node and its code instead of "no outcome".
# write_outcome CODE CAUSE DETAIL — CAUSE a cause id of scripts/causes.json (no Python on this side).
write_outcome() {
  local dir="${RUN_DIR:?}/$STATE_FOLDER/$SLURMD_NODENAME"
  [[ ! -s $dir/$STATE_OUTCOME ]] || return 0
  mkdir -p -- "$dir"
  write_outcome_file "$dir" "$1" failure "$EPOCHREALTIME" container "$2" "$3"
}

# record_image — the identity of the job's image (CONTAINER_IMAGE, exported by job.sbatch) on this node: its
# id and repository digests, to state/<node>/image as key=value lines. A tag names whatever was pushed last:
# make report puts these in the run's provenance and says when the nodes of one job ran different images.
record_image() {
  [[ -n ${CONTAINER_IMAGE:-} ]] || return 0
  local dir="${RUN_DIR:?}/$STATE_FOLDER/$SLURMD_NODENAME" out
  mkdir -p -- "$dir"
  if out=$("$DOCKER" image inspect --format '{{.Id}} {{join .RepoDigests ","}}' "$CONTAINER_IMAGE" 2>&1); then
    printf 'image=%s\nid=%s\ndigests=%s\n' "$CONTAINER_IMAGE" "${out%% *}" "${out#* }" > "$dir/$STATE_IMAGE.tmp"
    mv -f -- "$dir/$STATE_IMAGE.tmp" "$dir/$STATE_IMAGE"
  else
    say "cannot inspect $CONTAINER_IMAGE before the run: ${out//$'\n'/ } (docker run pulls it, or says why not)"
  fi
}

CLIENT=
stop_signal=

on_signal() {
  local out
  stop_signal=$1
  trap '' TERM INT HUP  # one stop is enough
  say "received SIG$1: stopping $NAME (up to $CONTAINER_STOP_S s for the node's own teardown)"
  if ! out=$("$DOCKER" stop --time "$CONTAINER_STOP_S" "$NAME" 2>&1) && [[ $out != *"o such container"* ]]; then
    say "docker stop $NAME: $out"
  fi
}

run() {
  # The node's own teardown runs inside meanwhile (the runner's teardown.container-stop, set by job.sbatch).
  : "${CONTAINER_STOP_S:?set by job.sbatch}"
  if ! sweep "$NAME"; then
    write_outcome 1 container-leftover "a container of an earlier job on $SLURMD_NODENAME cannot be removed"
    exit 1
  fi
  record_image
  trap 'on_signal TERM' TERM
  trap 'on_signal INT' INT
  trap 'on_signal HUP' HUP
  "$DOCKER" run --rm --name "$NAME" --label "$LABEL=$SLURMD_NODENAME" "$@" &
  CLIENT=$!
  local rc=0
  # `wait` returns early (>128) when a trapped signal arrives: wait again until the client has ended.
  while :; do
    rc=0
    wait "$CLIENT" || rc=$?
    kill -0 "$CLIENT" 2> /dev/null || break
  done
  # --rm removes the container when the client sees it exit; a client that died first did not. (grep
  # reads all: with -q, an early exit could fail the pipe under pipefail and skip the removal.)
  if ours_on_node | grep -xF -- "$NAME" > /dev/null && ! remove "$NAME" "outlived its client (code $rc)"; then
    ((rc != 0)) || rc=1
  fi
  if [[ -n $stop_signal ]]; then
    stop_signal=$(kill -l "$stop_signal")  # its number: $(...) inside $((...)) is parsed when reached
    exit $((128 + stop_signal))
  fi
  if ((rc != 0)); then
    write_outcome "$rc" container-failed "docker run exited $rc before the node script reported"
  fi
  exit "$rc"
}

case ${1:-} in
  run) run "${@:2}" ;;
  sweep) sweep ;;
  *)
    echo "usage: container.sh run DOCKER_RUN_ARGS... | container.sh sweep" >&2
    exit 2
    ;;
esac
