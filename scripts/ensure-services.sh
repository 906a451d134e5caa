#!/usr/bin/env bash
# Starts the local PostgreSQL, MariaDB and Redis used by integration tests when they are installed
# but not running. Does nothing where they already answer.
set -u
if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
fi
if command -v redis-cli >/dev/null 2>&1 && ! redis-cli -h 127.0.0.1 ping >/dev/null 2>&1; then
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
fi
if command -v mariadb-admin >/dev/null 2>&1 && ! mariadb-admin -uroot -h127.0.0.1 ping >/dev/null 2>&1; then
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
  for _ in $(seq 1 30); do mariadb-admin -uroot -h127.0.0.1 ping >/dev/null 2>&1 && break; sleep 1; done
fi
exit 0
