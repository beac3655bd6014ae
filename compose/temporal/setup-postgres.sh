#!/bin/sh
# Creates Temporal's two databases on PostgreSQL if missing and brings their schemas to the
# version of this admin-tools image, as samples-server's compose/scripts/setup-postgres.sh does.
# Every step is idempotent: run on each `docker compose up`, it upgrades the schemas after the
# image tags are raised, and changes nothing otherwise.
set -eu

: "${POSTGRES_SEEDS:?POSTGRES_SEEDS names the PostgreSQL host}"
: "${POSTGRES_USER:?POSTGRES_USER is required}"
: "${SQL_PASSWORD:?SQL_PASSWORD is required}"
port=${DB_PORT:-5432}

nc -z -w 10 "$POSTGRES_SEEDS" "$port"

setup() { # database schema-directory
  sql="temporal-sql-tool --plugin postgres12 --ep $POSTGRES_SEEDS -p $port -u $POSTGRES_USER --db $1"
  $sql create
  $sql setup-schema -v 0.0
  $sql update-schema -d "/etc/temporal/schema/postgresql/v12/$2/versioned"
}
setup temporal temporal
setup temporal_visibility visibility
echo "Temporal's schemas on $POSTGRES_SEEDS are current"
