#!/usr/bin/env bash
# The node's container, on the host side (container-runtime: docker): srun runs this on every node.
#
#   container.sh run [HOST_OPTIONS...] -- DOCKER_RUN_ARGS...
#                         one container per job and node, stopped and removed by name
#   container.sh sweep    remove every container of this repository left on this node
#
# HOST_OPTIONS are what only the node's host knows, decided here before `docker run` (a missing one fails the
# node, named, before its container starts):
#   --as-submitter        the container runs as the submitting user: their uid, gid and groups, and the
#                         groups owning the node's GPU and RDMA device files, by number (the image's group
#                         names need not match the host's); HOME a folder of the run, USER and LOGNAME set
#                         (an uid the image's passwd lacks has no name: Python's getpass would fail)
#   --as-root             the runner's declared fallback: root inside, RUN_OWNER=uid:gid so the node hands
#                         its files back when it ends
#   --rdma-device NAME    the verbs device of that RDMA NIC (its uverbsN, read from sysfs) and rdma_cm
#   --rdma-sysfs DIR      where the RDMA devices are listed (default /sys/class/infiniband)
#   --host-file HOST=AT   a host file or folder (HOST may hold *; every match) mounted read-only at AT
#                         (empty: the same path; ending in /: that folder, the match's own name)
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
    say "cannot inspect $CONTAINER_IMAGE before the run: ${out//$'\n'/ } (the host check should have found it: docker run says why)"
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

HOST_ARGS=()
GROUPS_ADDED=" "

# add_group GID — one --group-add, once.
add_group() {
  [[ $GROUPS_ADDED == *" $1 "* ]] && return 0
  GROUPS_ADDED+="$1 "
  HOST_ARGS+=(--group-add "$1")
}

# as_submitter — the container's processes are the submitting user's (see the header).
as_submitter() {
  local uid gid name dev mode g home
  uid=$(id -u)
  gid=$(id -g)
  name=$(id -un 2> /dev/null) || name="uid$uid"  # a name only for USER and LOGNAME
  HOST_ARGS+=(--user "$uid:$gid")
  for g in $(id -G); do
    [[ $g == "$gid" ]] || add_group "$g"
  done
  # A device file whose group the user needs (not world read-write): its owning group, by number.
  for dev in /dev/kfd /dev/dri/renderD* /dev/dri/card* /dev/infiniband/*; do
    [[ -e $dev ]] || continue
    mode=$(stat -c %a -- "$dev")
    (((8#$mode & 8#006) == 8#006)) || add_group "$(stat -c %g -- "$dev")"
  done
  home=$RUN_DIR/home/$SLURMD_NODENAME
  mkdir -p -- "$home"
  HOST_ARGS+=(-e "HOME=$home" -e "USER=$name" -e "LOGNAME=$name")
}

# rdma_device SYSFS NAME — the verbs device file of RDMA device NAME.
rdma_device() {
  local dir=$1/$2/device/infiniband_verbs verbs
  for verbs in "$dir"/uverbs*; do
    if [[ -e $verbs ]]; then
      HOST_ARGS+=(--device "/dev/infiniband/${verbs##*/}")
      return 0
    fi
  done
  write_outcome 1 nic-not-ready "RDMA device $2 of the runner's nic-devices has no verbs device under $dir"
  say "RDMA device $2 (the runner's nic-devices) has no verbs device under $dir"
  exit 1
}

# host_file HOST=AT — every match of HOST mounted read-only (see the header); none is a failure.
host_file() {
  local host=${1%%=*} at=${1#*=} matches=() match real
  # shellcheck disable=SC2206  # HOST is the runner's, a path whose * is meant to match here
  matches=($host)
  if [[ ! -e ${matches[0]} ]]; then
    write_outcome 1 rdma-userspace-missing "$host (the runner's container.rdma-userspace) is not on $SLURMD_NODENAME"
    say "$host (the runner's container.rdma-userspace) is not on this host"
    exit 1
  fi
  if ((${#matches[@]} > 1)) && [[ -n $at && $at != */ ]]; then
    write_outcome 1 rdma-userspace-missing "$host matches ${#matches[@]} files on $SLURMD_NODENAME; it mounts at one path, $at"
    say "$host matches ${#matches[@]} files; it mounts at one path, $at"
    exit 1
  fi
  for match in "${matches[@]}"; do
    real=$(readlink -f -- "$match")
    case $at in
      '') HOST_ARGS+=(-v "$real:$match:ro") ;;
      */) HOST_ARGS+=(-v "$real:$at${match##*/}:ro") ;;
      *) HOST_ARGS+=(-v "$real:$at:ro") ;;
    esac
  done
}

# host_options HOST_OPTIONS... -- — HOST_ARGS from them; the count of words read, in OPTIONS_READ.
host_options() {
  local sysfs=/sys/class/infiniband rdma=0
  OPTIONS_READ=0
  while (($# > 0)); do
    case $1 in
      --) OPTIONS_READ=$((OPTIONS_READ + 1)); return 0 ;;
      --as-submitter) as_submitter ;;
      --as-root) HOST_ARGS+=(-e "RUN_OWNER=$(id -u):$(id -g)") ;;
      --rdma-sysfs) sysfs=$2; shift; OPTIONS_READ=$((OPTIONS_READ + 1)) ;;
      --rdma-device)
        ((rdma == 1)) || HOST_ARGS+=(--device /dev/infiniband/rdma_cm)
        rdma=1
        rdma_device "$sysfs" "$2"
        shift
        OPTIONS_READ=$((OPTIONS_READ + 1))
        ;;
      --host-file) host_file "$2"; shift; OPTIONS_READ=$((OPTIONS_READ + 1)) ;;
      *) say "unknown option $1 (before --)"; exit 2 ;;
    esac
    shift
    OPTIONS_READ=$((OPTIONS_READ + 1))
  done
  say "no -- after the host options"
  exit 2
}

run() {
  # The node's own teardown runs inside meanwhile (the runner's teardown.container-stop, set by job.sbatch).
  : "${CONTAINER_STOP_S:?set by job.sbatch}"
  host_options "$@"
  shift "$OPTIONS_READ"
  if ! sweep "$NAME"; then
    write_outcome 1 container-leftover "a container of an earlier job on $SLURMD_NODENAME cannot be removed"
    exit 1
  fi
  record_image
  trap 'on_signal TERM' TERM
  trap 'on_signal INT' INT
  trap 'on_signal HUP' HUP
  "$DOCKER" run --rm --name "$NAME" --label "$LABEL=$SLURMD_NODENAME" "${HOST_ARGS[@]}" "$@" &
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
    echo "usage: container.sh run [HOST_OPTIONS...] -- DOCKER_RUN_ARGS... | container.sh sweep" >&2
    exit 2
    ;;
esac
