# shellcheck shell=bash
# Starts the throwaway servers the tests need, on loopback, and stops them by PID when the shell exits.
# Source it (scripts/test.sh does):
#
#     source scripts/test-services.sh
#
# - PostgreSQL: a new cluster in a temporary directory (initdb, trust auth on 127.0.0.1 only), started as an
#   unprivileged user when this runs as root (PostgreSQL refuses root). Exports
#   X402_TEST_POSTGRES_ADMIN=postgres://postgres@127.0.0.1:<port>/postgres.
# - Redis: redis-server without persistence. Exports X402_TEST_REDIS=redis://127.0.0.1:<port>.
#
# Missing servers are installed from Debian's packages (postgresql, redis-server); if that fails, this fails.
# With X402_SERVICES_INSTALL_ONLY=1 it only installs them (scripts/test.sh does that while clippy compiles).

_svc_die() {
    echo "error: $*" >&2
    return 1
}

_svc_as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi
}

_svc_install() { # package, what needs it
    echo "==> apt-get install $1 ($2)"
    _svc_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$1" >/dev/null \
        || { _svc_as_root apt-get update -q >/dev/null && _svc_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$1" >/dev/null; } \
        || _svc_die "cannot install $1: $2"
}

_svc_free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

_svc_pg_bin() {
    local d
    for d in /usr/lib/postgresql/*/bin; do
        [ -x "$d/initdb" ] && { echo "$d"; return 0; }
    done
    return 1
}

_svc_wait_port() { # port, name, pid
    local i
    for i in $(seq 1 100); do
        if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $1), 0.2)" 2>/dev/null; then
            return 0
        fi
        kill -0 "$3" 2>/dev/null || _svc_die "$2 exited during start" || return 1
        sleep 0.1
    done
    _svc_die "$2 did not listen on 127.0.0.1:$1 within 10 s"
}

_svc_stop() {
    # The postmaster's own PID (it may run under runuser): SIGINT is PostgreSQL's fast shutdown.
    if [ -n "${_SVC_PG_POSTMASTER:-}" ] && kill -0 "$_SVC_PG_POSTMASTER" 2>/dev/null; then
        kill -INT "$_SVC_PG_POSTMASTER" 2>/dev/null
        for _ in $(seq 1 100); do kill -0 "$_SVC_PG_POSTMASTER" 2>/dev/null || break; sleep 0.1; done
    fi
    if [ -n "${_SVC_PG_PID:-}" ]; then
        kill -0 "$_SVC_PG_PID" 2>/dev/null && kill -TERM "$_SVC_PG_PID" 2>/dev/null
        wait "$_SVC_PG_PID" 2>/dev/null || true
    fi
    if [ -n "${_SVC_REDIS_PID:-}" ] && kill -0 "$_SVC_REDIS_PID" 2>/dev/null; then
        kill -TERM "$_SVC_REDIS_PID" 2>/dev/null
        wait "$_SVC_REDIS_PID" 2>/dev/null || true
    fi
    [ -n "${_SVC_DIR:-}" ] && rm -rf "$_SVC_DIR"
    _SVC_PG_PID="" _SVC_PG_POSTMASTER="" _SVC_REDIS_PID="" _SVC_DIR=""
}

_svc_install_missing() {
    _svc_pg_bin >/dev/null || _svc_install postgresql "the reference server's PostgreSQL tests" || return 1
    _svc_pg_bin >/dev/null || _svc_die "PostgreSQL's initdb not found after installing postgresql" || return 1
    command -v redis-server >/dev/null || _svc_install redis-server "the Redis replay store's tests" || return 1
}

_svc_start() {
    local pg_bin port user run
    _svc_install_missing || return 1
    pg_bin="$(_svc_pg_bin)"

    _SVC_DIR="$(mktemp -d /tmp/x402-test-services.XXXXXX)"
    chmod 755 "$_SVC_DIR"
    mkdir -p "$_SVC_DIR/pg"
    run=()
    if [ "$(id -u)" = 0 ]; then
        user=nobody
        chown "$user" "$_SVC_DIR/pg"
        run=(runuser -u "$user" --)
    fi
    "${run[@]}" "$pg_bin/initdb" -D "$_SVC_DIR/pg/data" -U postgres --auth=trust -E UTF8 --no-sync >"$_SVC_DIR/initdb.log" 2>&1 \
        || { cat "$_SVC_DIR/initdb.log" >&2; _svc_die "initdb failed"; } || return 1
    port="$(_svc_free_port)"
    "${run[@]}" "$pg_bin/postgres" -D "$_SVC_DIR/pg/data" -p "$port" -k "$_SVC_DIR/pg" \
        -c listen_addresses=127.0.0.1 -c max_connections=400 -c shared_buffers=128MB \
        >"$_SVC_DIR/pg/server.log" 2>&1 &
    _SVC_PG_PID=$!
    _svc_wait_port "$port" postgres "$_SVC_PG_PID" || { cat "$_SVC_DIR/pg/server.log" >&2; return 1; }
    _SVC_PG_POSTMASTER="$(head -1 "$_SVC_DIR/pg/data/postmaster.pid")"
    export X402_TEST_POSTGRES_ADMIN="postgres://postgres@127.0.0.1:$port/postgres"
    echo "==> PostgreSQL (pid $_SVC_PG_POSTMASTER) on 127.0.0.1:$port"

    port="$(_svc_free_port)"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
        --dir "$_SVC_DIR" --logfile "$_SVC_DIR/redis.log" &
    _SVC_REDIS_PID=$!
    _svc_wait_port "$port" redis-server "$_SVC_REDIS_PID" || return 1
    export X402_TEST_REDIS="redis://127.0.0.1:$port"
    echo "==> Redis (pid $_SVC_REDIS_PID) on 127.0.0.1:$port"
}

if [ -n "${X402_SERVICES_INSTALL_ONLY:-}" ]; then
    _svc_install_missing
else
    trap _svc_stop EXIT
    _svc_start
fi
