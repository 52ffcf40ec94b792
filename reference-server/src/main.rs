//! `reference-server`: see the library docs and the workspace README.

use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: see the reason and the measurements beside the dependency in
/// `Cargo.toml`.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    reference_server::server::cli::main().await
}
