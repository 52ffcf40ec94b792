//! Reference server: x402 content licensing (interface A) and a DRF-style asset registry (interface B),
//! on an embedded SQLite database.
//!
//! The binary (`cargo run --release -p reference-server`) is a thin wrapper over this library; tests and
//! other programs start the same server in-process:
//!
//! ```no_run
//! use reference_server::{Config, Server};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = Config::for_tests(); // in-memory database, 127.0.0.1:0
//! config.registry.seed_assets = 10;
//! let server = Server::bind(config.validate()?).await?;
//! println!("listening on {}", server.public_url());
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let task = tokio::spawn(server.run(async { let _ = stopped.await; }));
//! // ... talk to it over HTTP ...
//! let _ = stop.send(());
//! task.await??;
//! # Ok(()) }
//! ```
//!
//! Module map, top to bottom (a module imports only modules below it; docs/architecture.md):
//!
//! - [`server`]: the composition root (binding, the router assembled from each part's own, background
//!   tasks, command line, logging, OpenAPI, operations endpoints);
//! - [`config`]: the flags and their validation into each part's settings;
//! - the parts: [`licensing`] (interface A), [`registry`] (interface B), [`facilitator`] (the x402
//!   facilitator API and its discovery listing);
//! - [`web`] (HTTP plumbing shared by the parts) and [`store`] (the only module that talks to the database);
//! - [`domain`] (plain types) and [`metrics`] (counters).
#![warn(missing_docs)]

pub mod config;
pub mod domain;
pub mod facilitator;
pub mod licensing;
pub mod metrics;
pub mod registry;
pub mod server;
pub mod store;
pub mod web;

pub use config::{Command, Config, ConfigError, LogFormat, Settings};
pub use server::{Server, StartError, build_app};
