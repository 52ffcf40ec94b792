#!/usr/bin/env bash
# Fuzzes what clients send before anything is trusted (fuzz/fuzz_targets): the payment header through the
# whole layer, each scheme's payload, the facilitator door's bodies, the registry's query string, the Web Bot Auth headers.
#
#     scripts/fuzz.sh            # each target for FUZZ_SECONDS (default 10), as the test command runs it
#     FUZZ_SECONDS=3600 scripts/fuzz.sh payment_header    # a long run of one target
#
# Needs the nightly toolchain (libFuzzer's sanitizer flags) and cargo-fuzz (installed from crates.io here
# when missing). A crash fails the run and leaves its input in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup run nightly rustc --version >/dev/null 2>&1 \
    || { echo "error: the fuzz targets need the nightly toolchain (rustup toolchain list)" >&2; exit 1; }
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "==> cargo install cargo-fuzz"
    cargo install --quiet --locked cargo-fuzz
fi
seconds="${FUZZ_SECONDS:-10}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(payment_header scheme_payload facilitator_body registry_query bot_auth_signature)
# No sanitizer: the code fuzzed is Rust (a crash is a panic, an overflow check, a timeout or an allocation past
# the limit); building without AddressSanitizer halves the build and speeds every run. For the C the
# reference server links (SQLite, libsecp256k1), `FUZZ_SANITIZER=address scripts/fuzz.sh`.
sanitizer="${FUZZ_SANITIZER:-none}"
cargo +nightly fuzz build --release --sanitizer "$sanitizer"
for target in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$target"
    echo "    $target: ${seconds} s"
    # The seeds are read, new inputs go to the corpus (kept between runs on one machine).
    log="fuzz/corpus/$target.log"
    if ! cargo +nightly fuzz run --release --sanitizer "$sanitizer" "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
        -max_total_time="$seconds" -max_len=16384 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "error: fuzz target $target failed; its input is in fuzz/artifacts/$target/" >&2
        exit 1
    fi
    grep -E '^stat::(number_of_executed_units|new_units_added)' "$log" | sed 's/^/        /'
done
