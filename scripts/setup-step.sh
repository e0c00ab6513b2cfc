# shellcheck shell=bash
# Sourced by scripts/setup: `step "what it does" command...` runs the command with its
# output appended to $LOG and prints one line on stderr ("setup: what it does ... ok").
# On failure it prints the log's path and its last 20 lines, then exits with the
# command's status.
step() {
  local what="$1"
  shift
  printf 'setup: %s ... ' "$what" >&2
  echo "=== $(date -u +%FT%TZ) $what: $*" >>"$LOG"
  local rc=0
  "$@" >>"$LOG" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    echo "ok" >&2
    return 0
  fi
  echo "failed (exit $rc)" >&2
  echo "setup: the last lines of $LOG:" >&2
  tail -n 20 "$LOG" | sed 's/^/  /' >&2
  exit "$rc"
}
