#!/bin/sh
# Creates the namespace pveflow runs in and registers pveflow's search attributes on it
# (core.SearchAttributes in workflows/core; compose/compose_test.go keeps the list below equal to it).
# Idempotent: what exists is left as it is.
set -eu

ns=${TEMPORAL_NAMESPACE:-default}
retention=${RETENTION:-72h}

tries=0
until temporal operator cluster health >/dev/null 2>&1; do
  tries=$((tries + 1))
  if [ "$tries" -ge 60 ]; then
    echo "Temporal at $TEMPORAL_ADDRESS is not serving after $tries tries" >&2
    exit 1
  fi
  sleep 2
done

if ! temporal operator namespace describe --namespace "$ns" >/dev/null 2>&1; then
  temporal operator namespace create --namespace "$ns" --retention "$retention"
fi

existing=$(temporal operator search-attribute list --namespace "$ns")
register() { # name type
  if ! printf '%s\n' "$existing" | grep -qw "$1"; then
    temporal operator search-attribute create --namespace "$ns" --name "$1" --type "$2"
  fi
}
register ProxyUID Keyword
register ProxyName Keyword
register ProxyPhase Keyword
register PveNode Keyword
register PveVMID Int
echo "namespace $ns has pveflow's search attributes"
