#!/usr/bin/env bash
# Runs one service (argv after NAME RC_FILE) and records its exit code, and when it exited, for the node
# watcher: the job's verdict orders failures by when they happened, not by when a watcher noticed.
# NAME is only there so that `ps` shows which service this wrapper runs.
# No `set -e` here: the command's exit code, whatever it is, is what must be recorded.
rc_file=$2
shift 2
"$@"
rc=$?
# Written atomically: the watcher reads this file while we write it.
printf '%s %s\n' "$rc" "$EPOCHREALTIME" > "$rc_file.tmp" && mv -f -- "$rc_file.tmp" "$rc_file"
exit "$rc"
