//! A request's Web Bot Auth headers (`Signature-Input`, `Signature`, `Signature-Agent`), as any client may
//! send them: split from the input at its first two newlines. Never a panic, never a fetch (no agent is
//! allowed, so no key directory is asked).
#![no_main]

use std::sync::LazyLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use reference_server::licensing::bot_auth::{BotAuthConfig, BotVerifier};

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
});

static VERIFIER: LazyLock<BotVerifier> = LazyLock::new(|| {
    let config = BotAuthConfig {
        agents: Vec::new(),
        directory_timeout: Duration::from_millis(1),
        directory_ttl: Duration::from_secs(60),
        require: Vec::new(),
    };
    RUNTIME.block_on(async { BotVerifier::new(config, "https://shop.example") })
});

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |b| *b == b'\n');
    let mut headers = http::HeaderMap::new();
    for name in ["signature-input", "signature", "signature-agent"] {
        if let Some(Ok(v)) = parts.next().map(http::HeaderValue::from_bytes) {
            headers.insert(name, v);
        }
    }
    let uri: http::Uri = "https://shop.example/x402Article?articleId=a"
        .parse()
        .expect("uri");
    let _ = RUNTIME.block_on(VERIFIER.verify(&http::Method::GET, &uri, &headers, 1_800_000_000));
});
