//! Command-line / environment configuration, and its validation into [`Settings`].
//!
//! Every flag can also be set from an environment variable named `REFERENCE_SERVER_<FLAG>` (for example
//! `REFERENCE_SERVER_PAY_TO`). A flag given on the command line wins over the environment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::licensing::settings::LicensingSettings;
use crate::store::DatabaseUrl;

mod validate;

/// The database when neither `--database` nor `DATABASE_URL` names one.
pub const DEFAULT_DATABASE: &str = "reference-server.sqlite3";

/// Default recipient of payments in the demo setup (an address nobody uses for anything else).
pub const DEMO_PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// The server's configuration, as given by the operator.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "reference-server",
    version,
    about = "x402 content licensing (interface A) and a media asset registry (interface B), on embedded SQLite",
    long_about = None
)]
pub struct Config {
    /// The HTTP server.
    #[command(flatten)]
    pub http: HttpArgs,

    /// Interface B (the asset registry) and its database.
    #[command(flatten)]
    pub registry: RegistryArgs,

    /// Interface A's payments: what is sold for what, and how it is settled.
    #[command(flatten)]
    pub payment: PaymentArgs,

    /// Interface A's default license terms.
    #[command(flatten)]
    pub licenses: LicenseArgs,

    /// Web Bot Auth: signed crawler requests.
    #[command(flatten)]
    pub bot_auth: BotAuthArgs,

    /// The x402 facilitator API this server offers.
    #[command(flatten)]
    pub facilitator: FacilitatorArgs,

    /// Log format: `auto` (JSON lines when stderr is not a terminal, coloured text when it is), `text` or
    /// `json`.
    #[arg(long, env = "REFERENCE_SERVER_LOG_FORMAT", default_value = "auto")]
    pub log_format: LogFormat,

    /// A one-off command instead of serving.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The HTTP server.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Listening and connections")]
pub struct HttpArgs {
    /// Address and port to listen on: an IP address (`127.0.0.1:8080`, `[::1]:8080`, `0.0.0.0:8080`) or a
    /// host name (`localhost:8080`; its first address).
    #[arg(
        long,
        env = "REFERENCE_SERVER_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: String,

    /// Not a flag of this server: listening is set with `--listen HOST:PORT` (a friendly error says so).
    #[arg(long, hide = true)]
    pub port: Option<String>,

    /// Public base URL of this server, used in resource URLs, receipts and registry links
    /// (default: `http://<listen address>`; required when listening on `0.0.0.0` or `[::]`).
    #[arg(long, env = "REFERENCE_SERVER_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// Seconds a client has to send a request's head; also how long a kept-alive connection may sit idle.
    #[arg(
        long,
        env = "REFERENCE_SERVER_HEADER_READ_TIMEOUT_SECS",
        default_value_t = 10
    )]
    pub header_read_timeout_secs: u64,

    /// Seconds a response write may make no progress (the client stopped reading) before the connection is
    /// dropped.
    #[arg(
        long,
        env = "REFERENCE_SERVER_WRITE_STALL_TIMEOUT_SECS",
        default_value_t = 30
    )]
    pub write_stall_timeout_secs: u64,

    /// Most connections open at once; further connections are closed on accept. Keep it below the
    /// process's open-file limit (`ulimit -n`).
    #[arg(long, env = "REFERENCE_SERVER_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,
}

/// Interface B (the asset registry) and its database.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Registry and storage")]
pub struct RegistryArgs {
    /// Database URL: a SQLite file (`sqlite:PATH`, `sqlite://PATH` or a plain path; created and seeded when
    /// empty), `sqlite::memory:`, or PostgreSQL (`postgres://user:pass@host:port/db`) for several
    /// instances. Without it, `DATABASE_URL`, then `reference-server.sqlite3`.
    #[arg(long, env = "REFERENCE_SERVER_DATABASE")]
    pub database: Option<String>,

    /// Number of registry assets seeded into an empty database.
    #[arg(long, env = "REFERENCE_SERVER_SEED_ASSETS", default_value_t = 1000)]
    pub seed_assets: usize,

    /// Directory holding uploaded media files (default: `<database>.media` next to a SQLite file,
    /// `reference-server.media` for PostgreSQL, a temporary directory for `sqlite::memory:`). Instances on
    /// one PostgreSQL database must share it (a network file system or a shared volume).
    #[arg(long, env = "REFERENCE_SERVER_MEDIA_DIR")]
    pub media_dir: Option<PathBuf>,

    /// API token required to register assets and to read the operator endpoints (`Authorization: token
    /// <t>`). Without it POST is refused and a token for the operator endpoints is generated at start and
    /// printed in the banner.
    #[arg(long, env = "REFERENCE_SERVER_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,

    /// Key used to sign registry media URLs (default: random at each start, so old URLs stop working).
    #[arg(long, env = "REFERENCE_SERVER_URL_SIGNING_KEY", hide_env_values = true)]
    pub url_signing_key: Option<String>,

    /// Lifetime of signed media URLs, in seconds.
    #[arg(long, env = "REFERENCE_SERVER_URL_TTL_SECS", default_value_t = 3600)]
    pub url_ttl_secs: u64,

    /// Price of one record of the paid bulk export `/api/v3/assets/export/`, in the token's atomic units
    /// (default 100: 0.0001 USDC). The buyer signs `limit` x this with x402 `upto` and is charged for the
    /// records returned. 0 turns the export off. Buyers approve Permit2 for the token once.
    #[arg(long, env = "REFERENCE_SERVER_EXPORT_PRICE", default_value_t = crate::registry::DEFAULT_EXPORT_PER_RECORD)]
    pub export_price: u64,
}

/// Interface A's payments: what is sold for what, and how it is settled.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Payments and settlement")]
pub struct PaymentArgs {
    /// Address (0x, 40 hex) that receives article payments.
    #[arg(long, env = "REFERENCE_SERVER_PAY_TO", default_value = DEMO_PAY_TO)]
    pub pay_to: String,

    /// Payment network: an x402 v1 name (`base-sepolia`, `base`, ...) or CAIP-2 (`eip155:84532`).
    #[arg(long, env = "REFERENCE_SERVER_NETWORK", default_value = "base-sepolia")]
    pub network: String,

    /// Token contract address (default: the network's USDC).
    #[arg(long, env = "REFERENCE_SERVER_ASSET")]
    pub asset: Option<String>,

    /// How buyers may move the token, comma-separated: `eip3009` (USDC's `transferWithAuthorization`, no
    /// approval needed) and/or `permit2` (any ERC-20 the buyer approved Permit2 for). Each article license is
    /// offered once per method, EIP-3009 first. A token without EIP-3009 takes `permit2` alone.
    #[arg(
        long,
        env = "REFERENCE_SERVER_TRANSFER_METHODS",
        value_delimiter = ',',
        default_value = "eip3009"
    )]
    pub transfer_methods: Vec<String>,

    /// EIP-712 domain name of the token (default: the network's USDC name).
    #[arg(long, env = "REFERENCE_SERVER_ASSET_NAME")]
    pub asset_name: Option<String>,

    /// EIP-712 domain version of the token (default: "2").
    #[arg(long, env = "REFERENCE_SERVER_ASSET_VERSION")]
    pub asset_version: Option<String>,

    /// Remote x402 facilitator (`https://.../`) used to verify and settle payments. Without it payments
    /// are verified locally and not settled ("verify-only").
    #[arg(long, env = "REFERENCE_SERVER_FACILITATOR_URL")]
    pub facilitator_url: Option<String>,

    /// Bearer token sent to `--facilitator-url` (`Authorization: Bearer <t>` on verify, settle and supported),
    /// for facilitators that require one (this server's own facilitator API does).
    #[arg(
        long,
        env = "REFERENCE_SERVER_FACILITATOR_URL_TOKEN",
        hide_env_values = true
    )]
    pub facilitator_url_token: Option<String>,

    /// How long to wait for the facilitator's `/settle` answer, in seconds. Without an answer in time the
    /// settlement's outcome is unknown: the client gets 402 `settlement_pending`, the attempt is recorded as
    /// `unknown` and reconciled later.
    #[arg(
        long,
        env = "REFERENCE_SERVER_FACILITATOR_SETTLE_TIMEOUT_SECS",
        default_value_t = 90
    )]
    pub facilitator_settle_timeout_secs: u64,

    /// After how long, in seconds, a payment left in flight by a request that died (a crash, a kill, a lost
    /// instance) is reconciled by the background reconciler or the buyer's resend. The engine raises it to
    /// the settler's longest wait plus a minute (`--facilitator-settle-timeout-secs`, or
    /// `--rpc-receipt-timeout-secs` and five `--rpc-timeout-secs`), so a settlement still under way is never
    /// reconciled underneath itself.
    /// 10 to 86400.
    #[arg(
        long,
        env = "REFERENCE_SERVER_PAYMENT_STALE_AFTER_SECS",
        default_value_t = 180
    )]
    pub payment_stale_after_secs: u64,

    /// How long a payment's record is kept after its `validBefore`: while it is, a payment whose settlement
    /// was still unknown at `validBefore` is reconciled, and a buyer who resends a settled payment (an
    /// answer lost near the end of its window) gets the article again instead of a refusal. Raised to the
    /// stale time plus a minute. Longer keeps more rows, and serves a settled payment's resource again to
    /// whoever rebuilds it from the chain's public calldata for that long. 60 to 86400.
    #[arg(
        long,
        env = "REFERENCE_SERVER_PAYMENT_KEEP_AFTER_EXPIRY_SECS",
        default_value_t = 900
    )]
    pub payment_keep_after_expiry_secs: u64,

    /// Private key (0x + 64 hex) that signs x402 offers and license receipts (offer-receipt, EIP-712).
    /// Default: derived from `--url-signing-key` when given (so every instance of a deployment signs with
    /// the same key), else generated at start and printed in the banner.
    #[arg(
        long,
        env = "REFERENCE_SERVER_RECEIPT_SIGNING_KEY",
        hide_env_values = true
    )]
    pub receipt_signing_key: Option<String>,

    /// JSON-RPC URL of the chain to settle on. With `--settler-key`, every purchase is settled on chain
    /// (USDC `transferWithAuthorization`, sent by the relayer) and the receipt carries the transaction hash.
    #[arg(long, env = "REFERENCE_SERVER_RPC_URL")]
    pub rpc_url: Option<String>,

    /// Private key (0x + 64 hex) of the relayer that sends settlement transactions: it pays the gas,
    /// never the USDC. Required with `--rpc-url`.
    #[arg(long, env = "REFERENCE_SERVER_SETTLER_KEY", hide_env_values = true)]
    pub settler_key: Option<String>,

    /// With `--rpc-url`: how long to wait for a settlement transaction's receipt, in seconds. Past it the
    /// outcome is unknown: the buyer gets 402 `settlement_pending` with the transaction hash, and the payment
    /// is reconciled from the chain later (never broadcast again).
    #[arg(
        long,
        env = "REFERENCE_SERVER_RPC_RECEIPT_TIMEOUT_SECS",
        default_value_t = 60
    )]
    pub rpc_receipt_timeout_secs: u64,

    /// With `--rpc-url`: how long one JSON-RPC call may take, in seconds (1 to 120). A settlement's send
    /// phase is at most five calls in a row, so this also sets how soon a payment left in flight by a dead
    /// process can be reconciled (`--payment-stale-after-secs`).
    #[arg(long, env = "REFERENCE_SERVER_RPC_TIMEOUT_SECS", default_value_t = 10)]
    pub rpc_timeout_secs: u64,

    /// With `--rpc-url`: how many blocks back USDC's `AuthorizationUsed` log is searched for a payment whose
    /// authorization the chain shows used by a transaction this server did not record (it died awaiting the
    /// receipt, or somebody else broadcast it first). Past it such a payment stays pending, never refused.
    /// 1 to 10,000,000; the default covers 5.5 hours of 2-second blocks. Keep it within the `eth_getLogs`
    /// range your JSON-RPC provider answers: a refused query leaves the payment pending.
    #[arg(
        long,
        env = "REFERENCE_SERVER_RPC_LOG_LOOKBACK_BLOCKS",
        default_value_t = 10_000
    )]
    pub rpc_log_lookback_blocks: u64,

    /// The address that settles `upto` payments (the paid export), which buyers sign as the only one allowed
    /// to (`extra.facilitatorAddress`): with `--facilitator-url`, the facilitator's settling address (its
    /// `/supported` lists it). Default: `--pay-to` (verify-only: nothing is settled).
    #[arg(long, env = "REFERENCE_SERVER_UPTO_FACILITATOR")]
    pub upto_facilitator: Option<String>,

    /// License-token contract (ERC-721, `contracts/LicenseToken.sol`): each purchase mints the token whose id
    /// is the receipt's to the payer. Needs on-chain settlement (`--rpc-url`, `--settler-key`, whose account
    /// must be the contract's minter).
    #[arg(long, env = "REFERENCE_SERVER_LICENSE_TOKEN")]
    pub license_token: Option<String>,
}

/// Interface A's default license terms.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "License terms")]
pub struct LicenseArgs {
    /// Usages the site's default license permits (RSL 1.0 tokens: all ai-all ai-train ai-input ai-index
    /// search), for articles without licenses of their own.
    #[arg(
        long,
        env = "REFERENCE_SERVER_LICENSE_PERMITS",
        default_value = "search ai-input"
    )]
    pub license_permits: String,

    /// Usages the site's default license prohibits.
    #[arg(
        long,
        env = "REFERENCE_SERVER_LICENSE_PROHIBITS",
        default_value = "ai-train"
    )]
    pub license_prohibits: String,

    /// User types the site's default license is for (commercial non-commercial education government
    /// personal). Default: any.
    #[arg(long, env = "REFERENCE_SERVER_LICENSE_USERS", default_value = "")]
    pub license_users: String,
}

/// Web Bot Auth: signed crawler requests.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Web Bot Auth")]
pub struct BotAuthArgs {
    /// Web Bot Auth: origins of the signature agents whose key directories this server may fetch
    /// (`https://agent.example`; repeat or comma-separate). A signed request from any other agent is treated
    /// as unsigned. Default: none.
    #[arg(long, env = "REFERENCE_SERVER_BOT_AGENTS", value_delimiter = ',')]
    pub bot_agents: Vec<String>,

    /// Web Bot Auth: how long to wait for an agent's key directory, in milliseconds.
    #[arg(
        long,
        env = "REFERENCE_SERVER_BOT_DIRECTORY_TIMEOUT_MS",
        default_value_t = 2000
    )]
    pub bot_directory_timeout_ms: u64,

    /// Web Bot Auth: how long a fetched key directory is used before it is fetched again, in seconds.
    #[arg(
        long,
        env = "REFERENCE_SERVER_BOT_DIRECTORY_TTL_SECS",
        default_value_t = 3600
    )]
    pub bot_directory_ttl_secs: u64,

    /// Web Bot Auth: paths that answer 401 to a request without a verified signature (`/x402Article`,
    /// `/llms.txt`...; repeat or comma-separate). Default: none (signatures are recorded, never required).
    #[arg(long, env = "REFERENCE_SERVER_BOT_REQUIRE", value_delimiter = ',')]
    pub bot_require: Vec<String>,
}

/// The x402 facilitator API this server offers.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Facilitator API")]
pub struct FacilitatorArgs {
    /// Bearer token that callers of the facilitator API (`/facilitator/*`) must send
    /// (`Authorization: Bearer <t>`). Without it the facilitator API is off.
    #[arg(
        long,
        env = "REFERENCE_SERVER_FACILITATOR_TOKEN",
        hide_env_values = true
    )]
    pub facilitator_token: Option<String>,

    /// The facilitator API's own `validBefore` horizon, in seconds: a payment valid for longer (plus 120 s
    /// of clock skew) is refused, whatever `maxTimeoutSeconds` the caller sends.
    #[arg(
        long,
        env = "REFERENCE_SERVER_FACILITATOR_MAX_TIMEOUT_SECS",
        default_value_t = 600
    )]
    pub facilitator_max_timeout_secs: u64,

    /// Recipient the facilitator API may settle for (repeat the flag, or comma-separate in the env var).
    /// Default: any.
    #[arg(
        long,
        env = "REFERENCE_SERVER_FACILITATOR_PAY_TO",
        value_delimiter = ','
    )]
    pub facilitator_pay_to: Vec<String>,
}

/// One-off commands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Deploy the license-token contract (`contracts/LicenseToken.sol`) with `--rpc-url` and
    /// `--settler-key` (that account owns it and mints), token URIs under `--public-url`; prints its
    /// address for `--license-token`, then exits.
    DeployLicenseToken,
    /// Copy a SQLite database (every table, ids included) into an empty PostgreSQL database, in one
    /// transaction, then exit. Stop the server first; copy the media directory separately.
    MigrateSqliteToPostgres {
        /// The SQLite file (`sqlite:PATH` or a path).
        #[arg(long)]
        from: String,
        /// The PostgreSQL URL (`postgres://user:pass@host:port/db`); the database must be empty.
        #[arg(long)]
        to: String,
    },
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// JSON when stderr is not a terminal (a file, journald, a container log), text when it is.
    Auto,
    /// Human-readable lines (colours only on a terminal).
    Text,
    /// One JSON object per line.
    Json,
}

impl Config {
    /// A configuration for tests and embedding: in-memory database, port 0, small seed, defaults elsewhere.
    pub fn for_tests() -> Self {
        Self {
            http: HttpArgs {
                listen: "127.0.0.1:0".into(),
                port: None,
                public_url: None,
                header_read_timeout_secs: 10,
                write_stall_timeout_secs: 30,
                max_connections: 4096,
            },
            registry: RegistryArgs {
                database: Some("sqlite::memory:".into()),
                seed_assets: 50,
                media_dir: None,
                api_token: None,
                url_signing_key: None,
                url_ttl_secs: 3600,
                export_price: crate::registry::DEFAULT_EXPORT_PER_RECORD,
            },
            payment: PaymentArgs {
                pay_to: DEMO_PAY_TO.into(),
                network: "base-sepolia".into(),
                asset: None,
                transfer_methods: vec!["eip3009".into()],
                asset_name: None,
                asset_version: None,
                facilitator_url: None,
                facilitator_url_token: None,
                facilitator_settle_timeout_secs: 90,
                payment_stale_after_secs: 180,
                payment_keep_after_expiry_secs: 900,
                receipt_signing_key: None,
                rpc_url: None,
                settler_key: None,
                rpc_receipt_timeout_secs: 60,
                rpc_timeout_secs: 10,
                rpc_log_lookback_blocks: 10_000,
                license_token: None,
                upto_facilitator: None,
            },
            licenses: LicenseArgs {
                license_permits: "search ai-input".into(),
                license_prohibits: "ai-train".into(),
                license_users: String::new(),
            },
            bot_auth: BotAuthArgs {
                bot_agents: Vec::new(),
                bot_directory_timeout_ms: 2000,
                bot_directory_ttl_secs: 3600,
                bot_require: Vec::new(),
            },
            facilitator: FacilitatorArgs {
                facilitator_token: None,
                facilitator_max_timeout_secs: 600,
                facilitator_pay_to: Vec::new(),
            },
            log_format: LogFormat::Text,
            command: None,
        }
    }
}

/// A checked configuration: everything parsed, nothing left to fail per request.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Listen address.
    pub listen: SocketAddr,
    /// Public base URL without a trailing slash, or `None` to derive it from the bound address.
    pub public_url: Option<String>,
    /// Database location.
    pub database: DatabaseUrl,
    /// Assets seeded into an empty registry.
    pub seed_assets: usize,
    /// Media directory (`None`: derived at start).
    pub media_dir: Option<PathBuf>,
    /// Registry API token.
    pub api_token: Option<String>,
    /// Media URL signing key.
    pub url_signing_key: Option<Vec<u8>>,
    /// Media URL lifetime.
    pub url_ttl: Duration,
    /// Atomic units per record of the paid export (0: no export).
    pub export_price: u64,
    /// Connection limits of the server loop.
    pub connections: ConnectionLimits,
    /// Log format.
    pub log_format: LogFormat,
    /// The facilitator API: its token (off without one) and limits.
    pub facilitator: crate::facilitator::FacilitatorConfig,
    /// Interface A.
    pub licensing: LicensingSettings,
}

/// The limits every connection is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time a client has to send a request's head, and the most a kept-alive connection may sit idle.
    pub header_read_timeout: Duration,
    /// Time a response write may make no progress before the connection is dropped.
    pub write_stall_timeout: Duration,
    /// Most connections open at once; more are closed on accept.
    pub max_connections: usize,
}

/// A configuration value that cannot work; reported before the server listens (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A flag has a value that cannot be used.
    #[error("invalid --{flag} {value:?}: {reason}")]
    Invalid {
        /// Flag name without dashes.
        flag: &'static str,
        /// The offending value.
        value: String,
        /// What is wrong and what is expected.
        reason: String,
    },
}

pub(crate) fn invalid(flag: &'static str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        flag,
        value: value.to_owned(),
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Settings, String> {
        let mut argv = vec!["reference-server"];
        argv.extend_from_slice(args);
        let cfg = Config::try_parse_from(argv).map_err(|e| e.to_string())?;
        cfg.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_valid() {
        let s = parse(&[]).unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(s.licensing.payment.caip2(), "eip155:84532");
        assert_eq!(s.licensing.facilitator_url, None);
    }

    #[test]
    fn bad_values_are_named() {
        for (args, flag) in [
            (&["--pay-to", "0x12"][..], "--pay-to"),
            (&["--public-url", "ftp://x"][..], "--public-url"),
            (&["--facilitator-url", "nope"][..], "--facilitator-url"),
            (&["--network", "mars"][..], "--network"),
            (&["--asset", "0xzz"][..], "--asset"),
            (&["--database", "/no/such/dir/db.sqlite"][..], "--database"),
            (&["--database", "mysql://u@h/db"][..], "--database"),
            (&["--database", "postgres://u:pw@h:x/db"][..], "--database"),
            (
                &["--facilitator-settle-timeout-secs", "0"][..],
                "--facilitator-settle-timeout-secs",
            ),
        ] {
            let err = parse(args).unwrap_err();
            assert!(err.contains(flag), "{args:?}: {err}");
        }
    }

    #[test]
    fn unspecified_listen_address_needs_a_public_url() {
        for listen in ["0.0.0.0:8080", "[::]:8080"] {
            let err = parse(&["--listen", listen]).unwrap_err();
            assert!(
                err.contains("--listen") && err.contains("--public-url"),
                "{listen}: {err}"
            );
            let s = parse(&["--listen", listen, "--public-url", "https://example.org"]).unwrap();
            assert_eq!(s.public_url.as_deref(), Some("https://example.org"));
        }
    }

    #[test]
    fn public_url_loses_trailing_slash() {
        let s = parse(&["--public-url", "https://example.org/"]).unwrap();
        assert_eq!(s.public_url.as_deref(), Some("https://example.org"));
    }
}
