#!/usr/bin/env bash
# A private PostgreSQL for `make cluster`, from Debian's postgresql package, without touching the
# system's own clusters: its data in DIR (default .run/postgres), listening on 127.0.0.1:PORT
# (default 5433) only, no Unix socket, superuser `temporal` with trust authentication (no
# password: any local user can connect, as to the rest of the dev stack).
#
#   internal/demo/postgres.sh start [DIR [PORT]]   initdb on first use, then start; a no-op when running
#   internal/demo/postgres.sh stop [DIR]           a fast shutdown; a no-op when stopped
#   internal/demo/postgres.sh status [DIR]
#
# PostgreSQL refuses to run as root: run as root, it runs as the `postgres` user (runuser), who
# then owns DIR and must be able to reach it. Its log is DIR/postgres.log. PG_BIN names the
# directory of initdb, pg_ctl and postgres; by default the newest /usr/lib/postgresql/*/bin, or
# that of the PATH's initdb.
set -euo pipefail
cmd=${1:-}
dir=${2:-.run/postgres}
port=${3:-5433}
mkdir -p "$(dirname "$dir")"
dir=$(cd "$(dirname "$dir")" && pwd)/$(basename "$dir")
log=$dir/postgres.log

if [ -z "${PG_BIN:-}" ]; then
  PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$PG_BIN" ]; then
    PG_BIN=$(dirname "$(readlink -f "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")")
  fi
fi
if [ ! -x "$PG_BIN/pg_ctl" ]; then
  echo "postgres.sh: no PostgreSQL binaries found (apt-get install -y postgresql, or set PG_BIN)" >&2
  exit 1
fi

# as_pg runs a command as the user PostgreSQL runs as: postgres when we are root, else us.
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

running() { as_pg "$PG_BIN/pg_ctl" -D "$dir" status >/dev/null 2>&1; }

case $cmd in
start)
  if [ -e "$dir/PG_VERSION" ] && running; then
    echo "PostgreSQL: already running on data $dir (log $log)"
    exit 0
  fi
  if [ ! -e "$dir/PG_VERSION" ]; then
    mkdir -p "$dir"
    chmod 700 "$dir"
    if [ "$(id -u)" = 0 ]; then
      chown postgres: "$dir"
      if ! runuser -u postgres -- test -w "$dir"; then
        echo "postgres.sh: the postgres user cannot write $dir: a directory above it is closed to it" >&2
        exit 1
      fi
    fi
    as_pg "$PG_BIN/initdb" -D "$dir" -U temporal --auth=trust --encoding=UTF8 --no-locale >"$dir.initdb.log" 2>&1 || {
      echo "postgres.sh: initdb failed; its output:" >&2
      cat "$dir.initdb.log" >&2
      exit 1
    }
    rm -f "$dir.initdb.log"
  fi
  # -h: TCP on loopback only; -k '': no Unix socket, so nothing is shared with the system's
  # PostgreSQL in /var/run/postgresql.
  if ! as_pg "$PG_BIN/pg_ctl" -D "$dir" -l "$log" -w -t 60 -o "-p $port -h 127.0.0.1 -k ''" start >/dev/null; then
    echo "postgres.sh: PostgreSQL did not start; its log ($log) ends:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  echo "PostgreSQL: 127.0.0.1:$port, user temporal (trust, no password), data $dir, log $log"
  ;;
stop)
  if [ -e "$dir/PG_VERSION" ] && running; then
    as_pg "$PG_BIN/pg_ctl" -D "$dir" -m fast -w stop >/dev/null
    echo "PostgreSQL on $dir stopped"
  else
    echo "PostgreSQL on $dir is not running"
  fi
  ;;
status)
  if [ -e "$dir/PG_VERSION" ] && running; then
    echo "PostgreSQL on $dir is running (log $log)"
  else
    echo "PostgreSQL on $dir is not running"
    exit 3
  fi
  ;;
*)
  echo "usage: $0 start [DIR [PORT]] | stop [DIR] | status [DIR]" >&2
  exit 2
  ;;
esac
