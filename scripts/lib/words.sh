# shellcheck shell=bash
# The failure vocabulary (scripts/failures.py, its one definition), as printf formats by name.

declare -gA _NODE_WORDS=()

# Loaded once, when node.sh is sourced: a node whose python3 cannot even print these fails at once.
_node_load_words() {
  local out name format rc=0
  out=$("${PYTHON:-python3}" "$_NODE_LIB/../failures.py" printf-formats 2>&1) || rc=$?
  if ((rc != 0)); then
    printf 'node.sh: cannot read the failure words (%s/../failures.py, code %s): %s\n' "$_NODE_LIB" "$rc" \
      "$out" >&2
    return 1
  fi
  while IFS=$'\t' read -r name format; do
    _NODE_WORDS[$name]=$format
  done <<< "$out"
}

# _node_word NAME VALUE... — one line of the vocabulary, values in the order of its placeholders.
_node_word() {
  local format=${_NODE_WORDS[$1]:-}
  if [[ -z $format ]]; then
    printf 'node.sh: no failure word %s (scripts/failures.py)\n' "$1" >&2
    return 1
  fi
  # shellcheck disable=SC2059  # the format is failures.py's, with %s for each value
  printf "$format\\n" "${@:2}"
}
