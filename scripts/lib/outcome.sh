# shellcheck shell=bash
# The outcome file of a node (state/<node>/outcome), read by scripts/outcome.py for the job's verdict; its
# one writer, for the node script (node.sh) and for the container wrapper of a node whose script never ran.
# Sourcing it loads the state files' names (names.sh) for every script that writes one.

# shellcheck source-path=SCRIPTDIR source=names.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/names.sh"

# write_outcome_file DIR RC KIND AT STEP [CAUSE DETAIL] — DIR/outcome, replaced whole (a reader never sees
# half of it); CAUSE is a cause id of scripts/causes.json, DETAIL one line (newlines would split it).
write_outcome_file() {
  printf 'rc=%s\nkind=%s\nat=%s\nstep=%s\ncause=%s\ndetail=%s\n' "$2" "$3" "$4" "$5" "${6:-}" \
    "${7//$'\n'/ }" > "$1/$STATE_OUTCOME.tmp"
  mv -f -- "$1/$STATE_OUTCOME.tmp" "$1/$STATE_OUTCOME"
}
