# shellcheck shell=bash
# The failure vocabulary (scripts/failures.py, its one definition), as printf formats by name: _NODE_WORDS,
# from names.sh (sourced with outcome.sh).

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
