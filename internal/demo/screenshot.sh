#!/usr/bin/env bash
# Screenshots the Temporal Web UI of a running `make run` / `make run-stalled` with Debian's
# headless Chromium (apt-get install chromium), to show a person (or a review) the proxies'
# workflows: ./internal/demo/screenshot.sh [UI-path] [out.png]
#   UI-path defaults to the workflow list; e.g. "namespaces/default/workflows/proxy%2F<uid>%2Fcreate"
#   shows one workflow.
set -euo pipefail
path=${1:-namespaces/default/workflows}
out=${2:-.run/ui.png}
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
  echo "Chromium is not installed: apt-get install chromium" >&2
  exit 1
fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# The background-networking flags keep Chromium from calling out of this machine.
"$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --window-size=1600,1000 --virtual-time-budget=8000 \
  --screenshot="$(realpath -m "$out")" "http://127.0.0.1:8233/$path" >/dev/null 2>&1
echo "$out"
