#!/usr/bin/env bash
# Starts, on 127.0.0.1, the servers the test suites need, and waits until each answers.
#
#   bash scripts/services.sh [start] [svc...]   install what is missing, start what does not answer, wait
#   bash scripts/services.sh status [svc...]    exit 1 if any is down
#   bash scripts/services.sh stop [svc...]      stop what this script started (by its recorded pid)
#   svc = postgres | mariadb | redis | etcd | zookeeper   (default: all the test suites need)
#
# Idempotent: a server that already answers is left alone (CI machines start PostgreSQL, MariaDB and Redis before
# the run), and the apt-get step runs only when a binary is missing, so this costs well under a second when all is up.
set -euo pipefail

DLOCK_SVC_DIR="${DLOCK_SVC_DIR:-/tmp/dlock-services}"
SVC_WAIT_S="${SVC_WAIT_S:-60}"
DEFAULT_SERVICES=(postgres mariadb redis etcd zookeeper)
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

# Starts a server in its own session, detached from this shell, and records the server's own pid: the small shell
# writes its pid and then execs the server in its place.
spawn() { # name cmd...
  local name=$1; shift
  setsid nohup bash -c 'echo $$ >"$0"; exec "$@"' "$DLOCK_SVC_DIR/$name.pid" "$@" \
    >>"$DLOCK_SVC_DIR/$name.log" 2>&1 </dev/null &
  local i; for i in $(seq 1 20); do [ -s "$DLOCK_SVC_DIR/$name.pid" ] && break; sleep 0.05; done
}
stop_spawned() { # name: stop by recorded pid only; a server somebody else started is left alone
  local file="$DLOCK_SVC_DIR/$1.pid" pid i
  if [ ! -s "$file" ]; then log "$1: not started by this script, left running"; return 0; fi
  pid=$(cat "$file"); kill "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  rm -f "$file"; log "$1: stopped"
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

# ---------------------------------------------------------------- etcd (single member, loopback, data under $DLOCK_SVC_DIR)
ETCD_PORT="${ETCD_PORT:-2379}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-2380}"
# The port check first: etcdctl against a closed port waits out its whole dial timeout.
etcd_ok() { port_open "$ETCD_PORT" && ETCDCTL_API=3 etcdctl --endpoints="http://127.0.0.1:$ETCD_PORT" \
  --dial-timeout=1s --command-timeout=2s endpoint health >/dev/null 2>&1; }
etcd_start() {
  command -v etcd >/dev/null && command -v etcdctl >/dev/null || apt_install etcd-server etcd-client
  if ! port_open "$ETCD_PORT"; then
    local dir="$DLOCK_SVC_DIR/etcd"; rm -rf "$dir"; mkdir -p "$dir"
    spawn etcd etcd --name dlock --data-dir "$dir/data" \
      --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
      --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
      --initial-cluster "dlock=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
      --logger zap --log-level warn --auto-compaction-mode revision --auto-compaction-retention 10000
  fi
  wait_until etcd etcd_ok
}
etcd_stop() { stop_spawned etcd; }

# ---------------------------------------------------------------- ZooKeeper (standalone, loopback)
ZK_PORT="${ZK_PORT:-2181}"
# Debian's zkServer.sh always reads /etc/zookeeper/conf/zoo.cfg (all interfaces), so the server's main class runs
# with a config of our own. `printf`, not `echo`: a trailing newline that arrives after the server has answered and
# closed makes the kernel reset the connection, which can discard the reply.
zookeeper_ok() { [ "$(printf ruok | nc -w 2 127.0.0.1 "$ZK_PORT" 2>/dev/null)" = imok ] &&
  printf srvr | nc -w 2 127.0.0.1 "$ZK_PORT" 2>/dev/null | grep -q '^Mode: standalone'; }
zookeeper_start() {
  [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null && command -v nc >/dev/null ||
    apt_install zookeeper netcat-openbsd
  if ! port_open "$ZK_PORT"; then
    local dir="$DLOCK_SVC_DIR/zookeeper"; rm -rf "$dir"; mkdir -p "$dir/data"
    cat >"$dir/zoo.cfg" <<CFG
tickTime=2000
dataDir=$dir/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,wchs
CFG
    local cp="$dir:/usr/share/java/zookeeper.jar"
    [ -f /usr/share/java/slf4j-simple.jar ] && cp="$cp:/usr/share/java/slf4j-simple.jar"
    spawn zookeeper java -Xms64m -Xmx512m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true \
      -Dzookeeper.jmx.log4j.disable=true -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
      -cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg"
  fi
  wait_until zookeeper zookeeper_ok
}
zookeeper_stop() { stop_spawned zookeeper; }

cmd="${1:-start}"; [ $# -gt 0 ] && shift
services=("$@"); [ ${#services[@]} -gt 0 ] || services=("${DEFAULT_SERVICES[@]}")
case "$cmd" in
  start) for s in "${services[@]}"; do "${s}_start"; done ;;
  stop) for s in "${services[@]}"; do "${s}_stop"; done ;;
  status) rc=0; for s in "${services[@]}"; do if "${s}_ok"; then log "$s: up"; else log "$s: DOWN"; rc=1; fi; done; exit $rc ;;
  *) echo "usage: $0 start|stop|status [postgres|mariadb|redis...]" >&2; exit 2 ;;
esac
