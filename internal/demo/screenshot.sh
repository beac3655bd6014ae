#!/usr/bin/env bash
# Screenshots the Temporal Web UI of a running `make run` / `make run-stalled` in a real browser,
# Debian's headless Chromium driven by Node over the DevTools protocol (internal/demo/screenshot.mjs;
# apt-get install chromium nodejs jq). Only the UI on 127.0.0.1:8233 and its codec server are called.
#   internal/demo/screenshot.sh stalled [DIR]
#       under `make run-stalled`: the stalled create's Pending Activities as DIR/stalled-clone.png,
#       its timeline as DIR/stalled-timeline.png and its proxy's entity's current details as
#       DIR/stalled-entity.png (DIR defaults to docs: the screenshots docs/operations.md shows).
#       Wait a minute or two after the stack is up, so that the wait has attempts to show.
#   internal/demo/screenshot.sh page UI-PATH OUT.png [TEXT...]
#       any page, e.g. namespaces/default/workflows, once it shows every TEXT.
set -euo pipefail
cd "$(dirname "$0")/../.."
ui=http://127.0.0.1:8233
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ] || ! command -v node >/dev/null || ! command -v jq >/dev/null; then
  echo "Chromium, Node or jq is not installed: apt-get install chromium nodejs jq" >&2
  exit 1
fi

# shot PATH OUT TEXT...: the UI's PATH as OUT, once it shows every TEXT.
shot() {
  local path=$1 out=$2
  shift 2
  NODE_NO_WARNINGS=1 node --experimental-websocket internal/demo/screenshot.mjs "$chromium" "$ui/$path" "$out" "$@"
}

# api PATH: the UI server's JSON answer for PATH.
api() {
  curl -fsS "$ui/api/v1/namespaces/default/$1"
}

case ${1:-} in
stalled)
  dir=${2:-docs}
  query=$(printf %s 'WorkflowType="CreateProxy" AND ExecutionStatus="Running"' | jq -sRr @uri)
  create=$(api "workflows?query=$query" | jq -r '.executions[0].execution.workflowId // empty')
  if [ -z "$create" ]; then
    echo "no create runs: start make run-stalled first" >&2
    exit 1
  fi
  entity=${create%/create}
  # uri ID: the workflow ID as one segment of the UI's paths; run ID: its running run.
  uri() { jq -rn --arg id "$1" '$id | @uri'; }
  run() { api "workflows/$(uri "$1")" | jq -r .workflowExecutionInfo.execution.runId; }
  shot "namespaces/default/workflows/$(uri "$create")/$(run "$create")/pending-activities" \
    "$dir/stalled-clone.png" "still running on node" "TaskStatus"
  shot "namespaces/default/workflows/$(uri "$create")" "$dir/stalled-timeline.png" "wait for clone"
  # The current details are Markdown, which the UI renders in a frame of its own.
  shot "namespaces/default/workflows/$(uri "$entity")/$(run "$entity")/user-metadata" \
    "$dir/stalled-entity.png" "Current Details"
  ;;
page)
  [ $# -ge 3 ] || { echo "usage: $0 page UI-PATH OUT.png [TEXT...]" >&2; exit 2; }
  shift
  shot "$@"
  ;;
*)
  echo "usage: $0 stalled [DIR] | page UI-PATH OUT.png [TEXT...]" >&2
  exit 2
  ;;
esac
