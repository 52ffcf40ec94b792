#!/usr/bin/env bash
# Checks deploy/: the systemd unit passes `systemd-analyze verify` (pointed at the built binary); the
# environment file as shipped refuses to start (its pay-to address is a placeholder to replace); with an address
# its settings start the server (paths moved to a temporary directory, a free loopback port): /readyz answers
# 200, then the server is stopped by PID. Run by scripts/test.sh after the build.
#
#     scripts/check-deploy.sh [path/to/reference-server]     (default: target/debug/reference-server)
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$(realpath "${1:-target/debug/reference-server}")"
[ -x "$bin" ] || { echo "error: $bin is not built (cargo build -p reference-server)" >&2; exit 1; }
if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "==> apt-get install systemd (for systemd-analyze)"
    apt-get install -y -q systemd >/dev/null || { echo "error: systemd-analyze is needed to check deploy/" >&2; exit 1; }
fi

work="$(mktemp -d)"
pid=""
cleanup() {
    if [ -n "$pid" ]; then
        # The server (its PID written before exec), then the job that started it.
        [ -s "$work/pid" ] && kill "$(cat "$work/pid")" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

sed -e "s#^ExecStart=.*#ExecStart=$bin#" -e "s#^EnvironmentFile=.*#EnvironmentFile=$PWD/deploy/reference-server.env#" \
    deploy/reference-server.service >"$work/reference-server.service"
systemd-analyze verify "$work/reference-server.service"
echo "ok: systemd-analyze verify deploy/reference-server.service"

start() {
    (
        set -a
        # shellcheck source=deploy/reference-server.env
        source deploy/reference-server.env
        set +a
        export REFERENCE_SERVER_LISTEN="127.0.0.1:$port" REFERENCE_SERVER_PUBLIC_URL="http://127.0.0.1:$port" \
            REFERENCE_SERVER_DATABASE="sqlite:$work/db.sqlite3" REFERENCE_SERVER_MEDIA_DIR="$work/media" \
            REFERENCE_SERVER_SEED_ASSETS=10 "$@"
        echo "$BASHPID" >"$work/pid"
        exec "$bin"
    ) >"$work/server.log" 2>&1
}

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
if start; then
    echo "error: the unedited environment file started the server (its pay-to placeholder must be refused)" >&2
    exit 1
fi
grep -q -- "--pay-to" "$work/server.log" || { cat "$work/server.log" >&2; exit 1; }
echo "ok: the environment file as shipped refuses to start until its pay-to address is set"
start REFERENCE_SERVER_PAY_TO=0x209693Bc6afc0C5328bA36FaF03C514EF312287C &
pid=$!
for _ in $(seq 1 100); do
    if curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then
        echo "ok: the server starts with deploy/reference-server.env and is ready"
        exit 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
done
echo "error: the server did not become ready with deploy/reference-server.env:" >&2
cat "$work/server.log" >&2
exit 1
