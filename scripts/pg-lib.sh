# What the scripts that make extra PostgreSQL clusters share (pg-failover-pair.sh,
# pg-databases.sh); sourced, not run.

# The PostgreSQL version whose clusters they make: SHARDBOX_PG_VERSION, or the newest installed.
VERSION="${SHARDBOX_PG_VERSION:-$(ls /etc/postgresql | sort -n | tail -n 1)}"

# Waits up to 30 s for the server on 127.0.0.1:$1 to accept connections.
wait_ready() {
  for _ in $(seq 1 60); do
    pg_isready -h 127.0.0.1 -p "$1" -q && return 0
    sleep 0.5
  done
  echo "PostgreSQL on port $1 did not become ready" >&2
  return 1
}
