#!/usr/bin/env bash
# The whole pveflow stack on this machine, for `make run` and `make run-stalled`:
#   1. the embedded Temporal server with its Web UI (state in .run/temporal.db),
#   2. the Proxmox simulator's REST API on 127.0.0.1:8006,
#   3. the worker, talking to the simulator through the same HTTP client a real cluster gets,
#   4. `demo`: a proxy created and deleted with live progress; `stalled`: a create whose clone
#      never finishes, to look at in the UI (docs/operations.md).
# Each runs as its own process, so the worker can be killed and started again mid-clone
# (bin/worker -config .run/config.yaml) and the workflow goes on. It stays up until Ctrl-C.
# Logs are in .run/.
set -euo pipefail
mode=${1:-demo}
cd "$(dirname "$0")/../.."
bin=bin
run=.run
ui=http://127.0.0.1:8233
mkdir -p "$run"

pids=()
stop() {
  trap - EXIT
  if [ ${#pids[@]} -gt 0 ]; then
    echo "Stopping the worker and the Temporal server..."
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
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

"$bin/pveflow-temporal" -db "$run/temporal.db" -port 7233 -ui-port 8233 >"$run/temporal.log" 2>&1 &
pids+=($!)
waitfor "$run/temporal.log" "Temporal UI" "${pids[-1]}"
echo "Temporal server: 127.0.0.1:7233, Web UI: $ui"

sim_flags=(-listen 127.0.0.1:8006 -dir "$run/pvesim" -task-scale 1.5)
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

TEMPORAL_ADDRESS=127.0.0.1:7233 "$bin/worker" -config "$run/config.yaml" >"$run/worker.log" 2>&1 &
pids+=($!)
echo "Worker: bin/worker -config $run/config.yaml, log $run/worker.log"

export TEMPORAL_ADDRESS=127.0.0.1:7233
case $mode in
demo)
  "$bin/pveflow" demo
  ;;
stalled)
  uid=stalled-$(date +%s)
  "$bin/pveflow" create --uid "$uid" --image debian13 --machine-type small
  echo "Its clone never finishes. Open $ui/namespaces/default/workflows?query=ProxyUID%3D%22$uid%22"
  echo "and look at the workflow's Pending Activities; docs/operations.md says what to do."
  ;;
*)
  echo "usage: $0 [demo|stalled]" >&2
  exit 2
  ;;
esac
echo "The stack stays up: Temporal UI at $ui. Ctrl-C stops it."
wait "${pids[@]}"
