//! What the benchmark tools (`examples/load.rs`, `examples/instructions.rs`) share: the server binary they
//! start, the arguments it gets, the URL its banner prints, the article they buy and their HTTP client.

use std::ffi::OsString;
use std::path::Path;

/// The article every benchmark request asks for.
pub const ARTICLE: &str = "/x402Article?articleId=c2pa-explained";

/// The server to start: `LOAD_SERVER_BIN` (any binary taking the reference server's flags and printing its
/// URL first: the x402-axum harness, the floor), or the workspace's release `reference-server`.
pub fn server_bin() -> String {
    std::env::var("LOAD_SERVER_BIN").unwrap_or_else(|_| {
        format!(
            "{}/../target/release/reference-server",
            env!("CARGO_MANIFEST_DIR")
        )
    })
}

/// The flags every benchmarked server starts with (a mode adds its own after them): loopback on a free
/// port, a small registry, media under `media_dir`.
pub fn server_args(media_dir: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "--listen",
        "127.0.0.1:0",
        "--seed-assets",
        "10",
        "--media-dir",
    ]
    .map(OsString::from)
    .to_vec();
    args.push(media_dir.into());
    args
}

/// The server's `RUST_LOG`: the caller's, or `warn` (an access line per request would be measured too).
pub fn server_log() -> String {
    std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into())
}

/// The URL a server's banner (its first line) names: its first `http://` word, without a trailing `/`.
///
/// ```
/// use workspace_tests::bench::banner_url;
///
/// assert_eq!(
///     banner_url("reference-server listening on http://127.0.0.1:4321/ (SQLite)"),
///     Some("http://127.0.0.1:4321")
/// );
/// assert_eq!(banner_url("no address"), None);
/// ```
pub fn banner_url(banner: &str) -> Option<&str> {
    banner
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .map(|w| w.trim_end_matches('/'))
}

/// The HTTP client of the benchmark tools (reqwest, ring for TLS; up to 1,024 idle connections kept per host).
pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .build()
        .expect("client")
}
