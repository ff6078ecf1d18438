# shellcheck shell=bash
# The names of a node's state files (scripts/statefiles.py, their one declaration) as STATE_<NAME>
# variables, e.g. "$STATE_DIR/$STATE_FAILURE": loaded from Python, never spelled here, so a renamed file is
# renamed on both sides and a dropped one is an unset variable that `set -u` refuses.

# _state_load_names — status 1, said, when python3 cannot print them.
_state_load_names() {
  local out name value rc=0
  out=$("${PYTHON:-python3}" "$(dirname -- "${BASH_SOURCE[0]}")/../statefiles.py" 2>&1) || rc=$?
  if ((rc != 0)); then
    printf 'state.sh: cannot read the state file names (scripts/statefiles.py, code %s): %s\n' "$rc" \
      "$out" >&2
    return 1
  fi
  while IFS=$'\t' read -r name value; do
    declare -g "STATE_$name=$value"
  done <<< "$out"
}
