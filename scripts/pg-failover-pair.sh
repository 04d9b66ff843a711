#!/usr/bin/env bash
# A PostgreSQL primary with a synchronous streaming-replication standby, for the database
# failover test (tests/db_failover.rs). Run as root (it drives pg_createcluster,
# pg_basebackup and pg_ctlcluster as the postgres user).
#
#   scripts/pg-failover-pair.sh reset   drop both clusters if they exist, make them again
#                                       from scratch, start them, wait for the standby to be
#                                       synchronous; prints the ports
#   scripts/pg-failover-pair.sh ensure  reset, unless the pair is already as reset leaves it
#                                       (after a failover test it is not: the primary is down
#                                       and the standby promoted)
#   scripts/pg-failover-pair.sh drop    stop and drop both clusters
#
# The primary listens on 127.0.0.1:5433, the standby on 127.0.0.1:5434 (trust auth, database
# `test`). The primary commits only once the standby has flushed the commit's WAL
# (`synchronous_standby_names = '*'`, `synchronous_commit = on`), so a standby promoted after
# the primary died has every commit the primary acknowledged. The standby's own configuration
# names no synchronous standby: promoted, it commits alone.
set -euo pipefail

# shellcheck source=scripts/pg-lib.sh
source "$(dirname "$0")/pg-lib.sh"
PRIMARY=sbx_primary
STANDBY=sbx_standby
PRIMARY_PORT=5433
STANDBY_PORT=5434
BIN="/usr/lib/postgresql/$VERSION/bin"

drop_pair() {
  for cluster in "$STANDBY" "$PRIMARY"; do
    if [ -d "/etc/postgresql/$VERSION/$cluster" ]; then
      pg_dropcluster --stop "$VERSION" "$cluster"
    fi
  done
}

sql() {
  psql -h 127.0.0.1 -p "$1" -U postgres -d "${3:-postgres}" -v ON_ERROR_STOP=1 -Atc "$2"
}

reset_pair() {
  drop_pair
  # Small: three clusters share a 2-core CI machine.
  pg_createcluster "$VERSION" "$PRIMARY" -p "$PRIMARY_PORT" \
    -o listen_addresses=localhost -o shared_buffers=16MB -o max_connections=60 \
    -o wal_level=replica -o max_wal_senders=4 -o wal_keep_size=64MB \
    -o "synchronous_standby_names=*" -o synchronous_commit=on \
    -- --auth=trust >/dev/null
  pg_ctlcluster --skip-systemctl-redirect "$VERSION" "$PRIMARY" start
  wait_ready "$PRIMARY_PORT"
  # No standby is attached yet: a commit would wait for one. Make the database without it.
  sql "$PRIMARY_PORT" "ALTER SYSTEM SET synchronous_standby_names = ''" >/dev/null
  sql "$PRIMARY_PORT" "SELECT pg_reload_conf()" >/dev/null
  sql "$PRIMARY_PORT" "CREATE DATABASE test" >/dev/null
  sql "$PRIMARY_PORT" "ALTER SYSTEM RESET synchronous_standby_names" >/dev/null
  sql "$PRIMARY_PORT" "SELECT pg_reload_conf()" >/dev/null

  pg_createcluster "$VERSION" "$STANDBY" -p "$STANDBY_PORT" \
    -o listen_addresses=localhost -o shared_buffers=16MB -o max_connections=60 \
    -o hot_standby=on \
    -- --auth=trust >/dev/null
  local data="/var/lib/postgresql/$VERSION/$STANDBY"
  rm -rf "$data"
  install -d -o postgres -g postgres -m 700 "$data"
  # -R writes standby.signal and primary_conninfo; the name lets the primary's
  # pg_stat_replication show which standby is synchronous.
  su postgres -c "$BIN/pg_basebackup -h 127.0.0.1 -p $PRIMARY_PORT -U postgres -D $data -R -X stream -c fast" 
  su postgres -c "echo \"primary_conninfo = 'host=127.0.0.1 port=$PRIMARY_PORT user=postgres application_name=$STANDBY'\" >> $data/postgresql.auto.conf"
  pg_ctlcluster --skip-systemctl-redirect "$VERSION" "$STANDBY" start
  wait_ready "$STANDBY_PORT"
  for _ in $(seq 1 60); do
    state="$(sql "$PRIMARY_PORT" "SELECT sync_state FROM pg_stat_replication WHERE application_name = '$STANDBY'")"
    if [ "$state" = sync ]; then
      echo "version=$VERSION primary=$PRIMARY:$PRIMARY_PORT standby=$STANDBY:$STANDBY_PORT"
      return 0
    fi
    sleep 0.5
  done
  echo "the standby did not become synchronous (sync_state '$state')" >&2
  return 1
}

# Whether the primary accepts writes and the standby replays its WAL synchronously.
pair_ready() {
  [ "$(sql "$PRIMARY_PORT" "SELECT pg_is_in_recovery()" 2>/dev/null)" = f ] &&
    [ "$(sql "$STANDBY_PORT" "SELECT pg_is_in_recovery()" 2>/dev/null)" = t ] &&
    [ "$(sql "$PRIMARY_PORT" "SELECT sync_state FROM pg_stat_replication WHERE application_name = '$STANDBY'" 2>/dev/null)" = sync ]
}

case "${1:-}" in
  reset) reset_pair ;;
  ensure)
    if pair_ready; then
      echo "version=$VERSION primary=$PRIMARY:$PRIMARY_PORT standby=$STANDBY:$STANDBY_PORT (kept)"
    else
      reset_pair
    fi
    ;;
  drop) drop_pair ;;
  *)
    echo "usage: $0 reset|ensure|drop" >&2
    exit 2
    ;;
esac
