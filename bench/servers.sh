#!/usr/bin/env bash
# servers.sh: the app under each HTTP server it could run on, in interleaved rounds of
# one run: gunicorn with uvicorn workers (the Procfile's `web:`, what production runs)
# and Granian (ASGI), one worker each, on one Redis and one Postgres, with the seed's
# wrk scripts (../shared/peers/wrk). Loopback only; it stops what it starts.
#
#   bash bench/servers.sh          (from the project root; needs .venv with
#                                   requirements-bench.txt, wrk, redis-server, Postgres)
#
# Knobs: N_USERS=100000 N_POLL=10000 ROUNDS=3 DURATION=10s WARMUP=2s CONNS=64
# PEERS=../shared/peers. Prints the medians (req/s, p99) of each endpoint per server,
# and the Redis commands per 1,000 joins on the production server.
set -euo pipefail
PROJ=$PWD
PEERS=${PEERS:-$PROJ/../shared/peers}
WORK=${BENCH_WORK:-/tmp/servers-bench}
N_USERS=${N_USERS:-100000}; N_POLL=${N_POLL:-10000}
ROUNDS=${ROUNDS:-3}; DURATION=${DURATION:-10s}; WARMUP=${WARMUP:-2s}; CONNS=${CONNS:-64}
EV=srv; H=127.0.0.1; RP=6391
PIDS=()
log() { printf '[servers %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
cleanup() { for p in "${PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
            sleep 1; for p in "${PIDS[@]}"; do kill -KILL -- "-$p" 2>/dev/null || true; done
            redis-cli -p $RP shutdown nosave >/dev/null 2>&1 || true; }
trap cleanup EXIT
for t in wrk redis-server redis-cli psql curl; do command -v $t >/dev/null || { log "missing $t"; exit 1; }; done
[ -x .venv/bin/granian ] || { log "granian is missing: .venv/bin/pip install -r requirements-bench.txt"; exit 1; }
WEB=$(sed -n 's/^web:[[:space:]]*//p' Procfile)
mkdir -p "$WORK"; : > "$WORK/results.txt"
redis-server --port $RP --bind $H --save "" --appendonly no --daemonize yes --dir "$WORK" --logfile "$WORK/redis.log"
for _ in $(seq 50); do redis-cli -p $RP ping >/dev/null 2>&1 && break; sleep 0.1; done
psql -h $H -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='servers_bench'" | grep -q 1 \
  || psql -h $H -U postgres -qc "CREATE DATABASE servers_bench"
export PATH="$PROJ/.venv/bin:$PATH" EVENT_ID=$EV REDIS_URL=redis://$H:$RP/1 \
       DATABASE_URL=postgres://postgres@$H:5432/servers_bench \
       RATE_LIMIT_JOIN=1000000000 RATE_LIMIT_LEAVE=1000000000 DEBUG=false WEB_CONCURRENCY=1
export DRAW_SIGNING_KEY=${DRAW_SIGNING_KEY:-$(python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())')}
python manage.py migrate -v0
python manage.py init_event $EV --seats 100 --batch 0 --ttl 600 >/dev/null
PORT=8111 HOST=$H setsid bash -c "exec $WEB" > "$WORK/gunicorn.log" 2>&1 &
PIDS+=($!)
# Granian forks its worker: stopped by its process group, as the rest.
setsid granian --interface asgi --host $H --port 8112 --workers 1 --loop uvloop --no-ws \
  ticketing.asgi:application > "$WORK/granian.log" 2>&1 &
PIDS+=($!)
for port in 8111 8112; do
  for _ in $(seq 600); do curl -fs -o /dev/null http://$H:$port/health && break; sleep 0.1; done
done
log "$N_USERS waiting (joined over HTTP)"
python3 "$PEERS/fill.py" http://$H:8111 "$N_USERS" "$N_POLL" "$WORK/poll.txt"

run() { # label url script args...
  local label=$1 url=$2 script=$3; shift 3
  wrk -t2 -c"$CONNS" -d"$WARMUP" -s "$script" "$url" -- "$@" >/dev/null 2>&1 || true
  wrk -t2 -c"$CONNS" -d"$DURATION" -s "$script" "$url" -- "$@" > "$WORK/wrk-$label.txt" 2>&1
  echo "$label $(grep '^RESULT' "$WORK/wrk-$label.txt")" | tee -a "$WORK/results.txt" >&2
}
for r in $(seq "$ROUNDS"); do
  for server in gunicorn:8111 granian:8112; do
    run "r$r-${server%%:*}-poll" "http://$H:${server##*:}" "$PEERS/wrk/poll.lua" "$WORK/poll.txt" "/api/status/poll?token="
    run "r$r-${server%%:*}-join" "http://$H:${server##*:}/api/queue/join" "$PEERS/wrk/join.lua"
  done
done
# Redis commands per 1,000 joins on the production server (sent by the process, and
# run by its scripts), as for polls (docs/benchmarks.md): INFO commandstats around
# one more join run (no warm-up: its joins would be counted in Redis, not by wrk).
redis-cli -p $RP config resetstat >/dev/null
wrk -t2 -c"$CONNS" -d"$DURATION" -s "$PEERS/wrk/join.lua" "http://$H:8111/api/queue/join" \
  > "$WORK/wrk-commands-gunicorn-join.txt" 2>&1
redis-cli -p $RP info commandstats > "$WORK/commandstats.txt"
python3 - "$WORK/commandstats.txt" "$WORK/wrk-commands-gunicorn-join.txt" <<'PY'
import re, sys
calls = {m[0]: int(m[1]) for m in re.findall(r"cmdstat_([\w|]+):calls=(\d+)", open(sys.argv[1]).read())}
joins = int(re.search(r"requests=(\d+)", open(sys.argv[2]).read())[1])
sent = {k: v for k, v in calls.items() if k not in ("info", "config|resetstat")}
print(f"joins: {joins}; Redis commands per 1,000 joins: {1000 * sum(sent.values()) / joins:.1f} "
      f"({', '.join(f'{k} {1000 * v / joins:.1f}' for k, v in sorted(sent.items(), key=lambda kv: -kv[1]))})")
PY
python3 - "$WORK/results.txt" <<'PY'
import collections, re, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, rest = line.split(" ", 1)
    m = dict(re.findall(r"(\w+)=([\d.]+)", rest))
    runs[label.split("-", 1)[1]].append((float(m["rps"]), float(m["p99_ms"]), int(m["non2xx"])))
print(f"{'':14s} {'median req/s':>12s}  runs / p99 ms / non-2xx")
for k, v in sorted(runs.items()):
    print(f"{k:14s} {statistics.median(r[0] for r in v):12.0f}  "
          f"{[round(r[0]) for r in v]} / {[r[1] for r in v]} / {sum(r[2] for r in v)}")
for ep in ("poll", "join"):
    g, u = (statistics.median(r[0] for r in runs[f"{s}-{ep}"]) for s in ("granian", "gunicorn"))
    print(f"{ep}: granian / gunicorn with uvicorn = {g / u:.2f}x")
PY
