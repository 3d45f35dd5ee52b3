# shellcheck shell=bash
# What the scripts share: building nudge and reaching their private PostgreSQL. Sourced, never run.
#
# Every script runs under `set -euo pipefail`, so a pipeline fails when any of its commands does,
# and a command killed by SIGPIPE (exit 141) fails it too. A reader that stops before its input
# ends (head, grep -m or -q, awk's exit, sed's q) kills its writer that way whenever the writer
# still has output to send, which depends on timing: the script then ends at random. So a pipeline
# here always reads its whole input; a first match is taken by a reader that reads to the end
# (awk's END, sed -n 1,3p), or from a file rather than a pipe.

# build_nudge CONFIG [ARGS…]: `swift build -c CONFIG ARGS…` without the compiler's progress lines;
# ends the script when the build fails.
build_nudge() {
  local config=$1; shift
  if ! swift build -c "$config" "$@" 2>&1 | { grep -v '^\[' || true; }; then
    echo "$(basename "$0"): the build failed" >&2
    exit 1
  fi
}

# start_pg NAME [--fast] [--tls]: starts the private server NAME (scripts/pg) and sets url (its
# DATABASE_URL), sock (its socket folder) and port.
start_pg() {
  url=$(scripts/pg start "$@")
  sock=${url#*host=}; sock=${sock%%&*}
  port=${url##*port=}
}

# unset_env PATTERN…: unsets every environment variable whose name matches one of the glob patterns.
unset_env() {
  local variable pattern
  for variable in $(compgen -e); do
    for pattern in "$@"; do
      # shellcheck disable=SC2053  # the pattern is a glob on purpose
      if [[ $variable == $pattern ]]; then unset "$variable"; break; fi
    done
  done
}

# url_of DB: the DATABASE_URL of database DB on the server start_pg started.
url_of() { echo "${url/\/nudge\?/\/$1?}"; }

# psql_on DB ARGS…: psql on database DB of that server, unaligned and quiet, stopping at an error.
psql_on() {
  local db=$1; shift
  PGOPTIONS="-c client_min_messages=warning" \
    /usr/lib/postgresql/15/bin/psql -X -h "$sock" -p "$port" -U nudge -d "$db" -Atq -v ON_ERROR_STOP=1 "$@"
}
