#!/usr/bin/env bash
# Peers measured in one run, on loopback, the server pinned to core 1 and wrk to core 0 (BENCHMARKS.md):
#
# - a registry page of 200 full records (offset 0 and the deepest of 100,000 assets): the reference server
#   against the same listing written the usual Django REST Framework way (bench/drf, gunicorn, 2 workers);
# - a 402: the reference server's article against @x402/express 2.x's (tests/js/express-server.mjs, its
#   facilitator the reference server's /facilitator API).
#
#     cargo build --release -p reference-server && (cd tests/js && npm ci)
#     python3 -m venv /tmp/drf && /tmp/drf/bin/pip install django djangorestframework gunicorn
#     DRF_PYTHON=/tmp/drf/bin/python bench/peers/run.sh [SECONDS]
#
# Prints, per server and URL: requests/s and server CPU per request (user + system from /proc, every process
# of the server). Every run is bounded (wrk -d SECONDS, default 8); everything started is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER_RUN="${1:-8}"
BIN="${REFERENCE_SERVER_BIN:-target/release/reference-server}"
PY="${DRF_PYTHON:?set DRF_PYTHON to a Python with django, djangorestframework and gunicorn}"
WORK="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

ticks() { # total user+system clock ticks of a process and its children still alive
    local total=0 pid
    for pid in "$@" $(pgrep -P "$1" || true); do
        [ -r "/proc/$pid/stat" ] && total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
    done
    echo "$total"
}
wait_up() { for _ in $(seq 1 600); do curl -sf -o /dev/null "$1" && return 0; sleep 0.2; done; echo "error: $1 never answered" >&2; return 1; }
measure() { # name pid connections url [header]
    local name=$1 pid=$2 c=$3 url=$4 hz before after out reqs
    hz=$(getconf CLK_TCK)
    curl -s -o /dev/null ${5:+-H "$5"} "$url"
    before=$(ticks "$pid")
    out=$(taskset -c 0 wrk -t1 -c"$c" -d"${SECONDS_PER_RUN}s" ${5:+-H "$5"} "$url")
    after=$(ticks "$pid")
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    awk -v n="$name" -v r="$reqs" -v s="$SECONDS_PER_RUN" -v t=$((after - before)) -v hz="$hz" \
        'BEGIN { printf "%-58s %9.0f req/s %9.1f us CPU/request\n", n, r / s, t / hz / r * 1e6 }'
}

echo "== seeding 100,000 assets (reference server) and loading them into DRF's table"
taskset -c 1 "$BIN" --listen 127.0.0.1:18181 --database "$WORK/rs.sqlite3" --seed-assets 100000 \
    --facilitator-token peers >"$WORK/rs.log" 2>&1 &
PIDS+=($!); RS=$!
wait_up http://127.0.0.1:18181/healthz
curl -s -H 'Accept: application/json' 'http://127.0.0.1:18181/api/v3/assets/?limit=200' \
    | "$PY" -c 'import json, sys; json.dump(json.load(sys.stdin)["results"], open(sys.argv[1], "w"))' "$WORK/records.json"
DRF_DATABASE="$WORK/drf.sqlite3" "$PY" bench/drf/drf_registry.py load "$WORK/records.json" 100000
(cd bench/drf && DRF_DATABASE="$WORK/drf.sqlite3" exec taskset -c 1 "$(dirname "$PY")/gunicorn" \
    --workers 2 --bind 127.0.0.1:18182 drf_registry:application >"$WORK/drf.log" 2>&1) &
PIDS+=($!); DRF=$!
wait_up 'http://127.0.0.1:18182/api/v3/assets/?limit=1'
DRF=$(pgrep -f 'gunicorn --workers 2 --bind 127.0.0.1:18182' | head -1)

echo "== registry page, 200 full records, 4 connections"
for offset in 0 99800; do
    measure "reference server, offset $offset" "$RS" 4 "http://127.0.0.1:18181/api/v3/assets/?limit=200&offset=$offset" 'Accept: application/json'
    measure "DRF (gunicorn, 2 workers), offset $offset" "$DRF" 4 "http://127.0.0.1:18182/api/v3/assets/?limit=200&offset=$offset"
done

echo "== 402 answer, 32 connections"
read -r ASSET NAME VERSION PAYTO < <(curl -s 'http://127.0.0.1:18181/x402Article?articleId=c2pa-explained' -o /dev/null -D - \
    | sed -n 's/^payment-required: //Ip' | tr -d '\r' | base64 -d \
    | "$PY" -c 'import json, sys; a = json.load(sys.stdin)["accepts"][0]; print(a["asset"], a["extra"]["name"].replace(" ", "_"), a["extra"]["version"], a["payTo"])')
(cd tests/js && X402_FACILITATOR_TOKEN=peers exec taskset -c 1 node express-server.mjs http://127.0.0.1:18181/facilitator \
    eip155:84532 "$ASSET" "${NAME//_/ }" "$VERSION" "$PAYTO" 10000 >"$WORK/express.out" 2>&1) &
PIDS+=($!); EXPRESS=$!
for _ in $(seq 1 100); do grep -q '"url"' "$WORK/express.out" 2>/dev/null && break; sleep 0.2; done
EXPRESS_URL=$("$PY" -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["url"])' "$WORK/express.out")
EXPRESS=$(pgrep -f 'node express-server.mjs http://127.0.0.1:18181' | head -1)
measure "reference server, /x402Article (every extension)" "$RS" 32 'http://127.0.0.1:18181/x402Article?articleId=c2pa-explained'
measure "@x402/express 2.x, /weather" "$EXPRESS" 32 "$EXPRESS_URL"
