#!/usr/bin/env bash
# The whole pveflow stack on this machine, for `make run`, `make run-stalled` and `make cluster`:
#   1. the codec server on 127.0.0.1:8081, decrypting payloads for the Web UI with the key file
#      .run/codec.key (made on first run),
#   2. the embedded Temporal server with its Web UI (state in .run/temporal.db), pointed at
#      the codec server; `cluster`: instead a private PostgreSQL on 127.0.0.1:5433 (data in
#      .run/postgres, internal/demo/postgres.sh), Temporal's schemas set up or upgraded on it by
#      Temporal's SQL tool (`pveflow-temporal sql-tool`), and two Temporal server processes on
#      it as one cluster: frontends on 127.0.0.1:7233 (with the Web UI) and 127.0.0.1:7243,
#   3. the Proxmox simulator's REST API on 127.0.0.1:8006, its cluster kept in
#      .run/pvesim/cluster.json across restarts, as Temporal keeps its workflows,
#   4. the worker, talking to the simulator through the same HTTP client a real cluster gets,
#   5. `demo` and `cluster`: a proxy created and deleted with live progress; `stalled`: a create
#      whose clone never finishes, to look at in the UI (docs/operations.md).
# The worker and the CLI encrypt payloads with .run/codec.key (PVEFLOW_CODEC_KEY_FILE): the
# history holds ciphertext, and the UI shows it decrypted through the codec server. The worker
# refuses plain input, so a CLI in another shell needs the same PVEFLOW_CODEC_KEY_FILE: the
# stack says so once it is up.
# Each runs as its own process, so the worker can be killed and started again mid-clone
# (PVEFLOW_CODEC_KEY_FILE=.run/codec.key bin/worker --config .run/config.yaml) and the workflow
# goes on. It stays up until Ctrl-C. Logs are in .run/.
# `run.sh check` only checks that no stack runs (below), as make does before it builds.
set -euo pipefail
mode=${1:-demo}
cd "$(dirname "$0")/../.."
bin=bin
run=.run
ui=http://127.0.0.1:8233
codec=http://127.0.0.1:8081

# What each mode listens on: a port taken means another stack (or another program) is there.
# Not PostgreSQL's 5433: a cluster stack that crashed leaves this checkout's running, which
# postgres.sh takes up again.
ports=("127.0.0.1:8081 the codec server" "127.0.0.1:7233 Temporal's frontend" "127.0.0.1:8233 the Web UI"
  "127.0.0.1:8006 the Proxmox simulator")
case $mode in
check | demo | stalled) ;;
cluster)
  ports+=("127.0.0.1:7243 the second Temporal frontend")
  for p in $(seq 7300 7307) $(seq 7310 7317); do
    ports+=("127.0.0.1:$p Temporal's services")
  done
  ;;
*)
  echo "usage: $0 [demo|stalled|cluster|check]" >&2
  exit 2
  ;;
esac

# A second stack would fail on the first port the running one holds, having overwritten its
# logs on the way. So before anything is written: a live run.sh named by .run/stack.pid, or
# any port of the stack taken, and this stops, touching nothing.
stack_pid=$run/stack.pid
if [ -r "$stack_pid" ]; then
  read -r pid running <"$stack_pid" || true
  # The pid must still be a run.sh: a pid file a crash left behind may name a pid reused since.
  if [ -n "${pid:-}" ] && grep -qa run.sh "/proc/$pid/cmdline" 2>/dev/null; then
    case ${running:-} in
    stalled) target="make run-stalled" ;;
    cluster) target="make cluster" ;;
    *) target="make run" ;;
    esac
    echo "A pveflow stack already runs from this checkout: $target (internal/demo/run.sh, pid $pid, logs in $run/)." >&2
    echo "Stop it first: Ctrl-C in its shell, or kill $pid." >&2
    exit 1
  fi
fi
taken=()
for p in "${ports[@]}"; do
  addr=${p%% *}
  if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then
    taken+=("$addr (${p#* })")
  fi
done
if [ ${#taken[@]} -gt 0 ]; then
  echo "Ports of the stack are taken, by a stack of another checkout or another program:" >&2
  printf '  %s\n' "${taken[@]}" >&2
  echo "Stop what listens there (ss -ltnp shows it) and run again." >&2
  exit 1
fi
if [ "$mode" = check ]; then
  exit 0
fi
mkdir -p "$run"
echo "$$ $mode" >"$stack_pid"

pids=()
postgres_started=
stop() {
  trap - EXIT
  rm -f "$stack_pid"
  if [ ${#pids[@]} -gt 0 ]; then
    echo "Stopping the worker, the simulator, Temporal and the codec server..."
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
  if [ -n "$postgres_started" ]; then
    internal/demo/postgres.sh stop "$run/postgres"
  fi
}
trap stop EXIT
trap 'exit 130' INT TERM

# waitfor LOG TEXT PID: waits until LOG contains TEXT, failing if PID dies first.
waitfor() {
  for _ in $(seq 1 240); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    if ! kill -0 "$3" 2>/dev/null; then
      echo "failed to start; its log ($1):" >&2
      cat "$1" >&2
      exit 1
    fi
    sleep 0.25
  done
  echo "timed out waiting for '$2' in $1" >&2
  exit 1
}

# One key encrypts the payloads of every run: the histories in .run/temporal.db need it.
if [ ! -e "$run/codec.key" ]; then
  "$bin/pveflow" codec-keygen --out "$run/codec.key"
fi
export PVEFLOW_CODEC_KEY_FILE=$PWD/$run/codec.key
"$bin/pveflow" codec-server --listen "${codec#http://}" --ui-origin "$ui" >"$run/codec-server.log" 2>&1 &
pids+=($!)
waitfor "$run/codec-server.log" "codec server listening" "${pids[-1]}"
echo "Codec server: $codec, key file $run/codec.key (log $run/codec-server.log)"

if [ "$mode" != cluster ]; then
  "$bin/pveflow-temporal" -db "$run/temporal.db" -port 7233 -ui-port 8233 -ui-codec-endpoint "$codec" >"$run/temporal.log" 2>&1 &
  pids+=($!)
  waitfor "$run/temporal.log" "Temporal UI" "${pids[-1]}"
  echo "Temporal server: 127.0.0.1:7233, Web UI: $ui (payloads decrypted through $codec)"
else
  internal/demo/postgres.sh start "$run/postgres" 5433
  postgres_started=1
  # Temporal's own SQL tool creates the databases when missing, and sets up or upgrades their
  # schemas to this server's version: every step is a no-op when already done.
  for db in temporal:temporal temporal_visibility:visibility; do
    sql=("$bin/pveflow-temporal" sql-tool --plugin postgres12 --ep 127.0.0.1 -p 5433 -u temporal --db "${db%%:*}")
    { "${sql[@]}" create-database &&
      "${sql[@]}" setup-schema -v 0.0 &&
      "${sql[@]}" update-schema --schema-name "postgresql/v12/${db##*:}"; } >>"$run/temporal-schema.log" 2>&1 || {
      echo "setting up the schema of ${db%%:*} failed; its log ($run/temporal-schema.log) ends:" >&2
      tail -n 20 "$run/temporal-schema.log" >&2
      exit 1
    }
  done
  echo "Temporal's schemas: databases temporal and temporal_visibility are current (log $run/temporal-schema.log)"
  # Two processes, each with every service, on one database are one cluster: ringpop finds the
  # other's services through the database and they share the history shards. Each has its own
  # ports; both name the first frontend as the cluster's address. The first starts alone: it
  # records the cluster in the database.
  server=("$bin/pveflow-temporal" -postgres -pg-port 5433 -cluster-address 127.0.0.1:7233)
  "${server[@]}" -port 7233 -service-ports 7300 -ui-port 8233 -ui-codec-endpoint "$codec" >"$run/temporal-1.log" 2>&1 &
  pids+=($!)
  waitfor "$run/temporal-1.log" "Temporal UI" "${pids[-1]}"
  echo "Temporal server 1: 127.0.0.1:7233, other services on 7300-7307, Web UI: $ui (payloads decrypted through $codec), log $run/temporal-1.log"
  "${server[@]}" -port 7243 -service-ports 7310 -ui-port -1 >"$run/temporal-2.log" 2>&1 &
  pids+=($!)
  waitfor "$run/temporal-2.log" "namespace:" "${pids[-1]}"
  server2=${pids[-1]}
  echo "Temporal server 2: 127.0.0.1:7243, other services on 7310-7317, log $run/temporal-2.log (pid $server2)"
fi

sim_flags=(-listen 127.0.0.1:8006 -dir "$run/pvesim" -state-file "$run/pvesim/cluster.json" -task-scale 1.5)
if [ "$mode" = stalled ]; then
  sim_flags+=(-stall-clones)
fi
"$bin/pvesim" "${sim_flags[@]}" >"$run/pvesim.log" 2>&1 &
pids+=($!)
waitfor "$run/pvesim.log" "serves the Proxmox VE API" "${pids[-1]}"
# The simulator's configuration, pointed at the simulator's address, CA and token.
sed -e "s|^  url: .*|  url: https://127.0.0.1:8006|" \
    -e "s|^  tokenFile: .*|  tokenFile: $PWD/$run/pvesim/token\n  caFile: $PWD/$run/pvesim/ca.pem|" \
    testdata/config/simulator.yaml >"$run/config.yaml"
echo "Proxmox simulator: https://127.0.0.1:8006 (CA $run/pvesim/ca.pem, token $run/pvesim/token)"

# The worker and the CLI reach every frontend: either server may be killed.
frontends=127.0.0.1:7233
if [ "$mode" = cluster ]; then
  frontends=127.0.0.1:7233,127.0.0.1:7243
fi
TEMPORAL_ADDRESS=$frontends "$bin/worker" --config "$run/config.yaml" >"$run/worker.log" 2>&1 &
pids+=($!)
echo "Worker: bin/worker --config $run/config.yaml, log $run/worker.log, payloads encrypted with $run/codec.key"

export TEMPORAL_ADDRESS=$frontends
case $mode in
demo | cluster)
  "$bin/pveflow" demo
  ;;
stalled)
  uid=stalled-$(date +%s)
  "$bin/pveflow" create --uid "$uid" --image debian13 --machine-type small
  echo "Its clone never finishes. Open $ui/namespaces/default/workflows?query=ProxyUID%3D%22$uid%22"
  echo "and look at the workflow's Pending Activities; docs/operations.md says what to do."
  ;;
esac
echo "The stack stays up: Temporal UI at $ui. Ctrl-C stops it."
if [ "$mode" = cluster ]; then
  echo "The worker and the CLI reach both frontends (TEMPORAL_ADDRESS=$frontends)."
  echo "Kill server 2 (kill -9 $server2) and server 1 takes over its history shards and task queues."
fi
echo "For bin/pveflow in another shell (its worker refuses a create without the key):"
echo "  export PVEFLOW_CODEC_KEY_FILE=$PVEFLOW_CODEC_KEY_FILE"
if [ "$mode" = cluster ]; then
  echo "  export TEMPORAL_ADDRESS=$frontends"
fi
wait "${pids[@]}"
