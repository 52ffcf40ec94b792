//! `reference-server`: see the library docs and the workspace README.

use std::process::ExitCode;

use clap::Parser;
use reference_server::{Config, ServeError, init_tracing, serve, shutdown_signal};

#[tokio::main]
async fn main() -> ExitCode {
    let config = Config::parse(); // bad flags: clap prints usage and exits with 2
    init_tracing(config.log_format);
    match serve(config, shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(ServeError::Start(e)) => {
            eprintln!("reference-server: configuration error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("reference-server: {e}");
            ExitCode::FAILURE
        }
    }
}
