#!/usr/bin/env bash
# Starts, on 127.0.0.1, the servers the test suites need, and waits until each answers.
#
#   bash scripts/services.sh [start] [svc...]   install what is missing, start what does not answer, wait
#   bash scripts/services.sh status [svc...]    exit 1 if any is down
#   bash scripts/services.sh stop [svc...]      stop what this script started (by its recorded pid)
#   svc = postgres | mariadb | redis            (default: all the test suites need)
#
# Idempotent: a server that already answers is left alone (CI machines start PostgreSQL, MariaDB and Redis before
# the run), and the apt-get step runs only when a binary is missing, so this costs well under a second when all is up.
set -euo pipefail

DLOCK_SVC_DIR="${DLOCK_SVC_DIR:-/tmp/dlock-services}"
SVC_WAIT_S="${SVC_WAIT_S:-60}"
DEFAULT_SERVICES=(postgres mariadb redis)
mkdir -p "$DLOCK_SVC_DIR"

log() { printf '[services] %s\n' "$*" >&2; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_updated=0
apt_install() { # packages...
  log "installing from Debian's packages: $*"
  if [ "$apt_updated" = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  # policy-rc.d usually blocks the packages' own autostart in containers; this script starts them itself.
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

wait_until() { # name check-fn
  local name=$1 fn=$2 deadline=$(( $(date +%s) + SVC_WAIT_S ))
  until "$fn"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then log "$name: not answering after ${SVC_WAIT_S}s"; return 1; fi
    sleep 0.2
  done
  log "$name: up"
}

# ---------------------------------------------------------------- PostgreSQL (trust auth on 127.0.0.1:5432)
postgres_ok() { psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -tAc 'select 1' >/dev/null 2>&1; }
postgres_start() {
  command -v psql >/dev/null && ls /etc/postgresql/*/main >/dev/null 2>&1 || apt_install postgresql postgresql-client
  if ! port_open 5432; then
    local version; version=$(ls /etc/postgresql | sort -V | tail -n 1)
    as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start
  fi
  if ! postgres_ok; then # a fresh Debian cluster asks for passwords on TCP: the tests use trust on loopback only
    local hba; hba=$(ls /etc/postgresql/*/main/pg_hba.conf | sort -V | tail -n 1)
    if ! grep -q '^host all postgres 127.0.0.1/32 trust' "$hba"; then
      as_root sed -i '1i host all postgres 127.0.0.1/32 trust' "$hba"
      as_root pg_ctlcluster --skip-systemctl-redirect "$(basename "$(dirname "$(dirname "$hba")")")" main reload
    fi
  fi
  wait_until postgres postgres_ok
  psql -h 127.0.0.1 -U postgres -d postgres -tAc "select 1 from pg_database where datname='test'" | grep -q 1 ||
    psql -h 127.0.0.1 -U postgres -d postgres -qc 'create database test'
}
postgres_stop() { log "postgres: managed by the machine, left running"; }

# ---------------------------------------------------------------- MariaDB (root, empty password, database test)
mariadb_ok() { mariadb -h 127.0.0.1 -P 3306 -uroot -e 'select 1' >/dev/null 2>&1; }
mariadb_start() {
  command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || apt_install mariadb-server mariadb-client
  if ! port_open 3306; then
    as_root mkdir -p /run/mysqld && as_root chown mysql:mysql /run/mysqld 2>/dev/null || true
    as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  fi
  local deadline=$(( $(date +%s) + SVC_WAIT_S ))
  until port_open 3306 || [ "$(date +%s)" -ge "$deadline" ]; do sleep 0.2; done
  if ! mariadb_ok; then # fresh Debian install: root authenticates by unix socket only
    as_root mariadb -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('')" || true
  fi
  wait_until mariadb mariadb_ok
  mariadb -h 127.0.0.1 -uroot -e 'CREATE DATABASE IF NOT EXISTS test'
}
mariadb_stop() { log "mariadb: managed by the machine, left running"; }

# ---------------------------------------------------------------- Redis (no persistence)
redis_ok() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = PONG ]; }
redis_start() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null || apt_install redis-server redis-tools
  if ! port_open 6379; then
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no \
      --dir "$DLOCK_SVC_DIR" --pidfile "$DLOCK_SVC_DIR/redis.pid" --logfile "$DLOCK_SVC_DIR/redis.log"
  fi
  wait_until redis redis_ok
}
redis_stop() {
  if [ -s "$DLOCK_SVC_DIR/redis.pid" ]; then kill "$(cat "$DLOCK_SVC_DIR/redis.pid")" 2>/dev/null || true
    rm -f "$DLOCK_SVC_DIR/redis.pid"; log "redis: stopped"
  else log "redis: not started by this script, left running"; fi
}

cmd="${1:-start}"; [ $# -gt 0 ] && shift
services=("$@"); [ ${#services[@]} -gt 0 ] || services=("${DEFAULT_SERVICES[@]}")
case "$cmd" in
  start) for s in "${services[@]}"; do "${s}_start"; done ;;
  stop) for s in "${services[@]}"; do "${s}_stop"; done ;;
  status) rc=0; for s in "${services[@]}"; do if "${s}_ok"; then log "$s: up"; else log "$s: DOWN"; rc=1; fi; done; exit $rc ;;
  *) echo "usage: $0 start|stop|status [postgres|mariadb|redis...]" >&2; exit 2 ;;
esac
