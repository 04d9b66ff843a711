#!/usr/bin/env bash
# Three small PostgreSQL clusters, one database `test` each, for the storage over several
# databases (tests/several_databases.rs, the benchmark's `--dbs`). Run as root (it drives
# pg_createcluster and pg_ctlcluster).
#
#   scripts/pg-databases.sh reset     drop the clusters if they exist, make them again, start
#                                     them; prints their URLs, space-separated
#   scripts/pg-databases.sh ensure    reset, unless all three accept connections
#   scripts/pg-databases.sh stop K    stop cluster K (0, 1 or 2) at once (`-m immediate`)
#   scripts/pg-databases.sh start K   start cluster K and wait until it accepts connections
#   scripts/pg-databases.sh urls      print the URLs
#   scripts/pg-databases.sh drop      stop and drop the clusters
#
# Cluster K listens on 127.0.0.1:543(5+K), trust auth; each has shared_buffers of 16 MB, as
# they share a 2-core CI machine with the main cluster and the failover pair.
set -euo pipefail

# shellcheck source=scripts/pg-lib.sh
source "$(dirname "$0")/pg-lib.sh"
COUNT=3
FIRST_PORT=5435

name() { echo "sbx_db$1"; }
port() { echo $((FIRST_PORT + $1)); }

urls() {
  local out=()
  for k in $(seq 0 $((COUNT - 1))); do
    out+=("postgres://postgres@127.0.0.1:$(port "$k")/test")
  done
  echo "${out[*]}"
}

drop_all() {
  for k in $(seq 0 $((COUNT - 1))); do
    if [ -d "/etc/postgresql/$VERSION/$(name "$k")" ]; then
      pg_dropcluster --stop "$VERSION" "$(name "$k")"
    fi
  done
}

reset_all() {
  drop_all
  for k in $(seq 0 $((COUNT - 1))); do
    pg_createcluster "$VERSION" "$(name "$k")" -p "$(port "$k")" \
      -o listen_addresses=localhost -o shared_buffers=16MB -o max_connections=80 \
      -- --auth=trust >/dev/null
    pg_ctlcluster --skip-systemctl-redirect "$VERSION" "$(name "$k")" start
    wait_ready "$(port "$k")"
    psql -h 127.0.0.1 -p "$(port "$k")" -U postgres -d postgres -v ON_ERROR_STOP=1 -qc \
      "CREATE DATABASE test" >/dev/null
  done
  urls
}

all_ready() {
  for k in $(seq 0 $((COUNT - 1))); do
    psql -h 127.0.0.1 -p "$(port "$k")" -U postgres -d test -Atc "SELECT 1" >/dev/null 2>&1 ||
      return 1
  done
}

case "${1:-}" in
  reset) reset_all ;;
  ensure)
    if all_ready; then urls; else reset_all; fi
    ;;
  stop) pg_ctlcluster --skip-systemctl-redirect "$VERSION" "$(name "${2:?cluster 0..2}")" stop -m immediate ;;
  start)
    pg_ctlcluster --skip-systemctl-redirect "$VERSION" "$(name "${2:?cluster 0..2}")" start
    wait_ready "$(port "$2")"
    ;;
  urls) urls ;;
  drop) drop_all ;;
  *)
    echo "usage: $0 reset|ensure|stop K|start K|urls|drop" >&2
    exit 2
    ;;
esac
