//! `reference-server`: see the library docs and the workspace README.

use std::process::ExitCode;

use clap::Parser;
use reference_server::store::{DatabaseUrl, migrate};
use reference_server::{Command, Config, ServeError, init_tracing, serve, shutdown_signal};

#[tokio::main]
async fn main() -> ExitCode {
    let config = Config::parse(); // bad flags: clap prints usage and exits with 2
    init_tracing(config.log_format);
    if let Some(Command::MigrateSqliteToPostgres { from, to }) = &config.command {
        return migrate_command(from, to).await;
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
                reference_server::store::postgres::redact(to)
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
                reference_server::store::postgres::redact(&target)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("reference-server: migration failed, nothing was written: {e}");
            ExitCode::FAILURE
        }
    }
}
