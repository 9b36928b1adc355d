#!/usr/bin/env bash
# The seed's own join load test (../shared/peers/load-test-join.mjs: 1,000 concurrent
# POST /api/queue/join {}, 10,000 in all) against the seed's Express server and this
# project, alternately, ROUNDS times, each on a fresh private Redis, so the first
# round meets an empty script cache as after a Redis restart.
#
#   bash bench/seed_join_client.sh            (from the project root, after one run of
#                                             ../shared/peers/side-by-side.sh, which
#                                             builds the seed's server)
# Knobs: WEB_CONCURRENCY=1 ROUNDS=3 DATABASE_URL (default: the ticketing_bench database)
set -euo pipefail
PEERS=${PEERS:-../shared/peers}; SEED=${SEED:-/tmp/side-by-side/seed}; ROUNDS=${ROUNDS:-3}
[ -f "$SEED/dist/server.js" ] || { echo "build the seed first: bash $PEERS/side-by-side.sh"; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
RP=$(free_port); SP=$(free_port); AP=$(free_port); DIR=$(mktemp -d)
redis-server --port "$RP" --save "" --appendonly no --dir "$DIR" --daemonize yes >/dev/null
(cd "$SEED" && PORT=$SP REDIS_HOST=127.0.0.1 REDIS_PORT=$RP EVENT_ID=seed-join NODE_ENV=production \
  RATE_LIMIT_PER_SEC=1000000000 exec setsid node dist/server.js) > "$DIR/seed.log" 2>&1 &
SEED_PID=$!
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/ticketing_bench}
export REDIS_URL=redis://127.0.0.1:$RP/1 EVENT_ID=seed-join DEBUG=false RATE_LIMIT_JOIN=0
export SECRET_KEY=${SECRET_KEY:-bench-only-secret-key-0123456789abcdefghijklmnopqrstuvwxyz}
.venv/bin/python manage.py migrate -v0
.venv/bin/python manage.py init_event seed-join --reset --seats 100 >/dev/null
HOST=127.0.0.1 PORT=$AP WEB_CONCURRENCY=${WEB_CONCURRENCY:-1} setsid \
  .venv/bin/gunicorn ticketing.asgi:application --config python:ticketing.gunicorn_conf > "$DIR/app.log" 2>&1 &
APP_PID=$!
trap 'kill -- -$APP_PID -$SEED_PID 2>/dev/null; redis-cli -p $RP shutdown nosave >/dev/null 2>&1; rm -rf "$DIR"' EXIT
for _ in $(seq 50); do curl -fs "http://127.0.0.1:$AP/health" >/dev/null && curl -fs -o /dev/null "http://127.0.0.1:$SP/health" && break; sleep 0.2; done
for r in $(seq "$ROUNDS"); do
  echo "round $r seed    $(node "$PEERS/load-test-join.mjs" "http://127.0.0.1:$SP")"
  echo "round $r project $(node "$PEERS/load-test-join.mjs" "http://127.0.0.1:$AP")"
done
