//! The command line: what the `reference-server` binary does with its flags (serve, or a subcommand), so that
//! every program that runs it (the binary, the end-to-end tests' child processes) runs the same code.

use std::process::ExitCode;

use clap::Parser;

use super::{ServeError, init_tracing, serve, shutdown_signal};
use crate::config::{Command, Config};
use crate::store::{DatabaseUrl, migrate};

/// Parses the process's flags and runs: the server until SIGINT/SIGTERM, or the subcommand. Exit codes: 0,
/// 2 for a configuration error (clap's own for bad flags), 1 for a failure.
pub async fn main() -> ExitCode {
    let config = Config::parse(); // bad flags: clap prints usage and exits with 2
    let _log = init_tracing(config.log_format);
    match &config.command {
        Some(Command::MigrateSqliteToPostgres { from, to }) => {
            return migrate_command(from, to).await;
        }
        Some(Command::DeployLicenseToken) => return deploy_command(&config).await,
        None => {}
    }
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

async fn deploy_command(config: &Config) -> ExitCode {
    let settings = match config.validate() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("reference-server: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    let (Some(onchain), Some(public_url)) = (&settings.licensing.onchain, &settings.public_url)
    else {
        eprintln!(
            "reference-server: deploy-license-token needs --rpc-url, --settler-key and --public-url"
        );
        return ExitCode::from(2);
    };
    let settler = match onchain.settler() {
        Ok(settler) => settler,
        Err(e) => {
            eprintln!("reference-server: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    match crate::licensing::minter::deploy(&settler, public_url).await {
        Ok(address) => {
            println!("{address}");
            eprintln!(
                "license-token contract deployed at {address}, owned by {}; start the server with \
                 --license-token {address}",
                onchain.relayer
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("reference-server: deployment failed: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn migrate_command(from: &str, to: &str) -> ExitCode {
    let source = match from.parse::<DatabaseUrl>() {
        Ok(DatabaseUrl::SqliteFile(path)) => path,
        _ => {
            eprintln!("reference-server: --from must name a SQLite file, not {from:?}");
            return ExitCode::from(2);
        }
    };
    let target = match to.parse::<DatabaseUrl>() {
        Ok(DatabaseUrl::Postgres(url)) => url,
        _ => {
            eprintln!(
                "reference-server: --to must be a postgres:// URL, not {:?}",
                crate::store::postgres::redact(to)
            );
            return ExitCode::from(2);
        }
    };
    match migrate::sqlite_to_postgres(&source, &target).await {
        Ok(report) => {
            print!("{report}");
            println!(
                "copied {} into {}",
                source.display(),
                crate::store::postgres::redact(&target)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("reference-server: migration failed, nothing was written: {e}");
            ExitCode::FAILURE
        }
    }
}
