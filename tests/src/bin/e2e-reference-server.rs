//! The reference server's command line, built into this package so that the end-to-end tests can run it
//! as a child process they kill (`CARGO_BIN_EXE_e2e-reference-server` is always this build's code; cargo
//! sets it only for binaries of the test's own package).

#[tokio::main]
async fn main() -> std::process::ExitCode {
    reference_server::server::cli::main().await
}
