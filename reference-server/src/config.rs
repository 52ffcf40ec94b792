//! Command-line / environment configuration, and its validation into [`Settings`].
//!
//! Every flag can also be set from an environment variable named `REFERENCE_SERVER_<FLAG>` (for example
//! `REFERENCE_SERVER_PAY_TO`). A flag given on the command line wins over the environment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use alloy_primitives::Address;
use clap::Parser;

use crate::store::DatabaseUrl;

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
    /// Socket address to listen on.
    #[arg(
        long,
        env = "REFERENCE_SERVER_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: SocketAddr,

    /// Public base URL of this server, used in resource URLs, receipts and registry links
    /// (default: `http://<listen address>`; required when listening on `0.0.0.0` or `[::]`).
    #[arg(long, env = "REFERENCE_SERVER_PUBLIC_URL")]
    pub public_url: Option<String>,

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

    /// Address (0x, 40 hex) that receives article payments.
    #[arg(long, env = "REFERENCE_SERVER_PAY_TO", default_value = DEMO_PAY_TO)]
    pub pay_to: String,

    /// Payment network: an x402 v1 name (`base-sepolia`, `base`, ...) or CAIP-2 (`eip155:84532`).
    #[arg(long, env = "REFERENCE_SERVER_NETWORK", default_value = "base-sepolia")]
    pub network: String,

    /// Token contract address (default: the network's USDC).
    #[arg(long, env = "REFERENCE_SERVER_ASSET")]
    pub asset: Option<String>,

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

    /// API token required to register assets and to read the operator endpoints (`Authorization: token
    /// <t>`). Without it POST is refused and a token for the operator endpoints is generated at start and
    /// printed in the banner.
    #[arg(long, env = "REFERENCE_SERVER_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,

    /// Key used to sign registry media URLs (default: random at each start, so old URLs stop working).
    #[arg(long, env = "REFERENCE_SERVER_URL_SIGNING_KEY", hide_env_values = true)]
    pub url_signing_key: Option<String>,

    /// Private key (0x + 64 hex) that signs x402 offers and license receipts (offer-receipt, EIP-712).
    /// Default: derived from `--url-signing-key` when given (so every instance of a deployment signs with
    /// the same key), else generated at start and printed in the banner.
    #[arg(
        long,
        env = "REFERENCE_SERVER_RECEIPT_SIGNING_KEY",
        hide_env_values = true
    )]
    pub receipt_signing_key: Option<String>,

    /// Lifetime of signed media URLs, in seconds.
    #[arg(long, env = "REFERENCE_SERVER_URL_TTL_SECS", default_value_t = 3600)]
    pub url_ttl_secs: u64,

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

    /// Log format: `auto` (JSON lines when stderr is not a terminal, coloured text when it is), `text` or
    /// `json`.
    #[arg(long, env = "REFERENCE_SERVER_LOG_FORMAT", default_value = "auto")]
    pub log_format: LogFormat,

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

    /// License-token contract (ERC-721, `contracts/LicenseToken.sol`): each purchase mints the token whose id
    /// is the receipt's to the payer. Needs on-chain settlement (`--rpc-url`, `--settler-key`, whose account
    /// must be the contract's minter).
    #[arg(long, env = "REFERENCE_SERVER_LICENSE_TOKEN")]
    pub license_token: Option<String>,

    /// A one-off command instead of serving.
    #[command(subcommand)]
    pub command: Option<Command>,
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
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            public_url: None,
            database: Some("sqlite::memory:".into()),
            seed_assets: 50,
            media_dir: None,
            pay_to: DEMO_PAY_TO.into(),
            network: "base-sepolia".into(),
            asset: None,
            asset_name: None,
            asset_version: None,
            facilitator_url: None,
            facilitator_url_token: None,
            facilitator_settle_timeout_secs: 90,
            payment_stale_after_secs: 180,
            payment_keep_after_expiry_secs: 900,
            rpc_url: None,
            settler_key: None,
            rpc_receipt_timeout_secs: 60,
            rpc_timeout_secs: 10,
            rpc_log_lookback_blocks: 10_000,
            facilitator_token: None,
            facilitator_max_timeout_secs: 600,
            facilitator_pay_to: Vec::new(),
            api_token: None,
            url_signing_key: None,
            receipt_signing_key: None,
            url_ttl_secs: 3600,
            header_read_timeout_secs: 10,
            write_stall_timeout_secs: 30,
            max_connections: 4096,
            log_format: LogFormat::Text,
            license_permits: "search ai-input".into(),
            license_prohibits: "ai-train".into(),
            license_users: String::new(),
            bot_agents: Vec::new(),
            bot_directory_timeout_ms: 2000,
            bot_directory_ttl_secs: 3600,
            bot_require: Vec::new(),
            license_token: None,
            command: None,
        }
    }
}

/// The key that signs x402 offers and license receipts, and where it came from.
#[derive(Clone)]
pub enum ReceiptKey {
    /// `--receipt-signing-key`.
    Given(alloy_signer_local::PrivateKeySigner),
    /// Derived from `--url-signing-key` (the same on every instance sharing it).
    Derived(alloy_signer_local::PrivateKeySigner),
    /// Generated at start (printed in the banner; receipts signed before a restart keep their old signer).
    Generated(alloy_signer_local::PrivateKeySigner),
}

impl ReceiptKey {
    /// The signer.
    pub fn signer(&self) -> &alloy_signer_local::PrivateKeySigner {
        match self {
            ReceiptKey::Given(k) | ReceiptKey::Derived(k) | ReceiptKey::Generated(k) => k,
        }
    }
}

impl std::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match self {
            ReceiptKey::Given(_) => "Given",
            ReceiptKey::Derived(_) => "Derived",
            ReceiptKey::Generated(_) => "Generated",
        };
        write!(f, "ReceiptKey::{how}({})", self.signer().address())
    }
}

/// The token the operator endpoints require. They always require one: payers' addresses and callers'
/// user agents are not public.
#[derive(Clone, PartialEq, Eq)]
pub enum OperatorToken {
    /// `--api-token`.
    Given(String),
    /// None was given: generated at start (printed in the banner, valid until the process ends).
    Generated(String),
}

impl OperatorToken {
    /// The token.
    pub fn as_str(&self) -> &str {
        match self {
            OperatorToken::Given(t) | OperatorToken::Generated(t) => t,
        }
    }
}

/// Never printed by `{:?}`.
impl std::fmt::Debug for OperatorToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OperatorToken::Given(_) => f.write_str("Given(***)"),
            OperatorToken::Generated(_) => f.write_str("Generated(***)"),
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
    /// Payment recipient.
    pub pay_to: Address,
    /// The payment network and token.
    pub payment: PaymentNetwork,
    /// Remote facilitator base URL, if any.
    pub facilitator_url: Option<String>,
    /// Bearer token for the remote facilitator, if any.
    pub facilitator_url_token: Option<String>,
    /// How long to wait for the facilitator's `/settle`.
    pub facilitator_settle_timeout: Duration,
    /// After how long an in-flight payment is taken for the leftover of a request that died (the engine
    /// raises it to the settler's longest wait plus a minute).
    pub payment_stale_after: Duration,
    /// How long a payment's record is kept after its `validBefore` (the engine raises it to the stale time
    /// plus a minute).
    pub payment_keep_after_expiry: Duration,
    /// On-chain settler (`--rpc-url` + `--settler-key`), if any.
    pub onchain: Option<x402_tower::settle::onchain::OnchainSettler>,
    /// The facilitator API: its token (off without one) and limits.
    pub facilitator: crate::facilitator::FacilitatorConfig,
    /// Registry API token.
    pub api_token: Option<String>,
    /// The token `/operator/*` requires: `--api-token`, or one generated at start.
    pub operator_token: OperatorToken,
    /// Media URL signing key.
    pub url_signing_key: Option<Vec<u8>>,
    /// The key that signs offers and receipts.
    pub receipt_key: ReceiptKey,
    /// Media URL lifetime.
    pub url_ttl: Duration,
    /// Connection limits of the server loop.
    pub connections: crate::serve::ConnectionLimits,
    /// Log format.
    pub log_format: LogFormat,
    /// The license of articles without licenses of their own.
    pub default_terms: crate::domain::license::DefaultTerms,
    /// Web Bot Auth verification.
    pub bot_auth: crate::licensing::bot_auth::BotAuthConfig,
    /// The license-token contract, when purchases mint license tokens.
    pub license_token: Option<Address>,
}

/// The network and token articles are sold in (from x402-tower's network table, or given explicitly).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentNetwork {
    /// The network.
    pub network: x402_tower::network::Network,
    /// The EIP-3009 token (its contract and EIP-712 domain).
    pub token: x402_tower::network::Token,
}

impl PaymentNetwork {
    /// CAIP-2 identifier, e.g. `eip155:84532`.
    pub fn caip2(&self) -> &str {
        self.network.caip2()
    }

    /// The v1 name legacy clients know, when there is one (v1 offers are made only then).
    pub fn v1_name(&self) -> Option<&'static str> {
        self.network.legacy_v1_name()
    }
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

fn invalid(flag: &'static str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        flag,
        value: value.to_owned(),
        reason: reason.into(),
    }
}

impl Config {
    /// `--receipt-signing-key`, else a key derived from the URL signing key, else a new one.
    fn receipt_key(&self, url_signing_key: Option<&[u8]>) -> Result<ReceiptKey, ConfigError> {
        use alloy_signer_local::PrivateKeySigner;
        if let Some(k) = &self.receipt_signing_key {
            return k
                .trim()
                .parse::<PrivateKeySigner>()
                .map(ReceiptKey::Given)
                .map_err(|_| {
                    invalid(
                        "receipt-signing-key",
                        "<hidden>",
                        "expected 0x followed by 64 hex digits (a secp256k1 private key)",
                    )
                });
        }
        if let Some(url_key) = url_signing_key {
            use hmac::{Hmac, Mac};
            // A different purpose string for each attempt: the odd HMAC output that is not a valid scalar
            // (about 1 in 2^128) moves on to the next.
            for attempt in 0u8..=255 {
                let Ok(mut mac) = <Hmac<sha2::Sha256> as Mac>::new_from_slice(url_key) else {
                    break;
                };
                mac.update(b"x402 offer and receipt signing key");
                mac.update(&[attempt]);
                let bytes = mac.finalize().into_bytes();
                if let Ok(k) = PrivateKeySigner::from_slice(&bytes) {
                    return Ok(ReceiptKey::Derived(k));
                }
            }
        }
        Ok(ReceiptKey::Generated(PrivateKeySigner::random()))
    }

    /// Check every value and resolve defaults.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        let public_url = self
            .public_url
            .as_deref()
            .map(parse_public_url)
            .transpose()?;
        if public_url.is_none() && self.listen.ip().is_unspecified() {
            return Err(invalid(
                "listen",
                &self.listen.to_string(),
                "an unspecified address (0.0.0.0 or [::]) would end up in links as the server's URL: \
                 pass --public-url with the address clients reach this server at",
            ));
        }
        let written = self
            .database
            .clone()
            .or_else(|| {
                std::env::var("DATABASE_URL")
                    .ok()
                    .filter(|v| !v.trim().is_empty())
            })
            .unwrap_or_else(|| DEFAULT_DATABASE.to_owned());
        let database: DatabaseUrl =
            written
                .parse()
                .map_err(|e: crate::store::DatabaseUrlError| {
                    invalid(
                        "database",
                        &crate::store::postgres::redact(&written),
                        e.to_string(),
                    )
                })?;
        if let DatabaseUrl::SqliteFile(path) = &database {
            if path.is_dir() {
                return Err(invalid(
                    "database",
                    &written,
                    "is a directory, expected a file path",
                ));
            }
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
                && !parent.is_dir()
            {
                return Err(invalid(
                    "database",
                    &written,
                    "its directory does not exist",
                ));
            }
        }
        let pay_to = parse_address("pay-to", &self.pay_to)?;
        if pay_to == Address::ZERO {
            return Err(invalid(
                "pay-to",
                &self.pay_to,
                "the zero address cannot receive payments",
            ));
        }
        let payment = crate::licensing::payment::resolve_network(self)?;
        let facilitator_url = self
            .facilitator_url
            .as_deref()
            .map(|u| parse_http_url("facilitator-url", u))
            .transpose()?;
        if let Some(t) = &self.api_token
            && (t.is_empty()
                || t.len() > 256
                || t.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(invalid(
                "api-token",
                "<hidden>",
                "1 to 256 characters without spaces",
            ));
        }
        let url_signing_key = match &self.url_signing_key {
            Some(k) if k.len() < 16 => {
                return Err(invalid(
                    "url-signing-key",
                    "<hidden>",
                    "at least 16 characters",
                ));
            }
            Some(k) => Some(k.as_bytes().to_vec()),
            None => None,
        };
        for (flag, secs) in [
            ("header-read-timeout-secs", self.header_read_timeout_secs),
            ("write-stall-timeout-secs", self.write_stall_timeout_secs),
        ] {
            if secs == 0 || secs > 3600 {
                return Err(invalid(flag, &secs.to_string(), "1 to 3600 seconds"));
            }
        }
        if self.max_connections == 0 || self.max_connections > 1_000_000 {
            return Err(invalid(
                "max-connections",
                &self.max_connections.to_string(),
                "1 to 1000000",
            ));
        }
        if self.url_ttl_secs == 0 || self.url_ttl_secs > 7 * 24 * 3600 {
            return Err(invalid(
                "url-ttl-secs",
                &self.url_ttl_secs.to_string(),
                "1 to 604800 seconds",
            ));
        }
        if self.facilitator_settle_timeout_secs == 0 || self.facilitator_settle_timeout_secs > 600 {
            return Err(invalid(
                "facilitator-settle-timeout-secs",
                &self.facilitator_settle_timeout_secs.to_string(),
                "1 to 600 seconds",
            ));
        }
        // Below 10 s a request that is merely slow (a long queue of writes) could be taken for dead.
        if !(10..=86_400).contains(&self.payment_stale_after_secs) {
            return Err(invalid(
                "payment-stale-after-secs",
                &self.payment_stale_after_secs.to_string(),
                "10 to 86400 seconds",
            ));
        }
        if !(60..=86_400).contains(&self.payment_keep_after_expiry_secs) {
            return Err(invalid(
                "payment-keep-after-expiry-secs",
                &self.payment_keep_after_expiry_secs.to_string(),
                "60 to 86400 seconds",
            ));
        }
        if self.seed_assets > 1_000_000 {
            return Err(invalid(
                "seed-assets",
                &self.seed_assets.to_string(),
                "at most 1000000",
            ));
        }
        let onchain = match (&self.rpc_url, &self.settler_key) {
            (None, None) => None,
            (Some(url), Some(key)) => {
                if facilitator_url.is_some() {
                    return Err(invalid(
                        "rpc-url",
                        url,
                        "settle either through --facilitator-url or on chain, not both",
                    ));
                }
                let url = parse_http_url("rpc-url", url)?;
                if self.rpc_receipt_timeout_secs == 0 || self.rpc_receipt_timeout_secs > 3600 {
                    return Err(invalid(
                        "rpc-receipt-timeout-secs",
                        &self.rpc_receipt_timeout_secs.to_string(),
                        "1 to 3600 seconds",
                    ));
                }
                if !(1..=120).contains(&self.rpc_timeout_secs) {
                    return Err(invalid(
                        "rpc-timeout-secs",
                        &self.rpc_timeout_secs.to_string(),
                        "1 to 120 seconds",
                    ));
                }
                if !(1..=10_000_000).contains(&self.rpc_log_lookback_blocks) {
                    return Err(invalid(
                        "rpc-log-lookback-blocks",
                        &self.rpc_log_lookback_blocks.to_string(),
                        "1 to 10000000 blocks",
                    ));
                }
                Some(
                    x402_tower::settle::onchain::OnchainSettler::builder(url.clone(), key.clone())
                        .receipt_timeout(Duration::from_secs(self.rpc_receipt_timeout_secs))
                        .rpc_timeout(Duration::from_secs(self.rpc_timeout_secs))
                        .log_lookback_blocks(self.rpc_log_lookback_blocks)
                        .build()
                        .map_err(|e| invalid("settler-key", "<hidden>", e.to_string()))?,
                )
            }
            (Some(url), None) => return Err(invalid("rpc-url", url, "needs --settler-key")),
            (None, Some(_)) => return Err(invalid("settler-key", "<hidden>", "needs --rpc-url")),
        };
        let token_ok = |t: &str| {
            !t.is_empty()
                && t.len() <= 256
                && !t.chars().any(|c| c.is_whitespace() || c.is_control())
        };
        if let Some(t) = &self.facilitator_url_token
            && !token_ok(t)
        {
            return Err(invalid(
                "facilitator-url-token",
                "<hidden>",
                "1 to 256 characters without spaces",
            ));
        }
        if let Some(t) = &self.facilitator_token
            && !token_ok(t)
        {
            return Err(invalid(
                "facilitator-token",
                "<hidden>",
                "1 to 256 characters without spaces",
            ));
        }
        if self.facilitator_max_timeout_secs == 0 || self.facilitator_max_timeout_secs > 86_400 {
            return Err(invalid(
                "facilitator-max-timeout-secs",
                &self.facilitator_max_timeout_secs.to_string(),
                "1 to 86400 seconds",
            ));
        }
        let facilitator_pay_to = self
            .facilitator_pay_to
            .iter()
            .map(|a| parse_address("facilitator-pay-to", a))
            .collect::<Result<Vec<_>, _>>()?;
        let facilitator = crate::facilitator::FacilitatorConfig {
            token: self.facilitator_token.clone(),
            policy: x402_tower::engine::facilitator::FacilitatorPolicy {
                max_timeout_seconds: self.facilitator_max_timeout_secs,
                pay_to: (!facilitator_pay_to.is_empty()).then_some(facilitator_pay_to),
            },
        };
        let default_terms = self.default_terms()?;
        let bot_auth = self.bot_auth()?;
        let license_token = match &self.license_token {
            None => None,
            Some(_) if onchain.is_none() => {
                return Err(invalid(
                    "license-token",
                    self.license_token.as_deref().unwrap_or(""),
                    "minting needs on-chain settlement: --rpc-url and --settler-key",
                ));
            }
            Some(a) => Some(parse_address("license-token", a)?),
        };
        Ok(Settings {
            default_terms,
            bot_auth,
            license_token,
            onchain,
            facilitator,
            listen: self.listen,
            public_url,
            database,
            seed_assets: self.seed_assets,
            media_dir: self.media_dir.clone(),
            pay_to,
            payment,
            facilitator_url,
            facilitator_url_token: self.facilitator_url_token.clone(),
            facilitator_settle_timeout: Duration::from_secs(self.facilitator_settle_timeout_secs),
            payment_stale_after: Duration::from_secs(self.payment_stale_after_secs),
            payment_keep_after_expiry: Duration::from_secs(self.payment_keep_after_expiry_secs),
            api_token: self.api_token.clone(),
            operator_token: self.api_token.clone().map_or_else(
                || OperatorToken::Generated(uuid::Uuid::new_v4().simple().to_string()),
                OperatorToken::Given,
            ),
            receipt_key: self.receipt_key(url_signing_key.as_deref())?,
            url_signing_key,
            url_ttl: Duration::from_secs(self.url_ttl_secs),
            connections: crate::serve::ConnectionLimits {
                header_read_timeout: Duration::from_secs(self.header_read_timeout_secs),
                write_stall_timeout: Duration::from_secs(self.write_stall_timeout_secs),
                max_connections: self.max_connections,
            },
            log_format: self.log_format,
        })
    }
}

impl Config {
    fn default_terms(&self) -> Result<crate::domain::license::DefaultTerms, ConfigError> {
        use crate::domain::license::{DefaultTerms, USAGES, USER_TYPES, parse_tokens};
        let terms = DefaultTerms {
            permits: parse_tokens(&self.license_permits, "usage", USAGES)
                .map_err(|e| invalid("license-permits", &self.license_permits, e.to_string()))?,
            prohibits: parse_tokens(&self.license_prohibits, "usage", USAGES).map_err(|e| {
                invalid("license-prohibits", &self.license_prohibits, e.to_string())
            })?,
            users: parse_tokens(&self.license_users, "user type", USER_TYPES)
                .map_err(|e| invalid("license-users", &self.license_users, e.to_string()))?,
        };
        terms
            .validate()
            .map_err(|e| invalid("license-prohibits", &self.license_prohibits, e.to_string()))?;
        Ok(terms)
    }

    fn bot_auth(&self) -> Result<crate::licensing::bot_auth::BotAuthConfig, ConfigError> {
        let agents = self
            .bot_agents
            .iter()
            .filter(|a| !a.trim().is_empty())
            .map(|a| {
                let url = parse_http_url("bot-agents", a)?;
                let origin = crate::licensing::bot_auth::origin_of(&url).ok_or_else(|| {
                    invalid("bot-agents", a, "expected an origin (scheme://host[:port])")
                })?;
                Ok(origin)
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        for (flag, v, max) in [
            (
                "bot-directory-timeout-ms",
                self.bot_directory_timeout_ms,
                60_000,
            ),
            (
                "bot-directory-ttl-secs",
                self.bot_directory_ttl_secs,
                7 * 86_400,
            ),
        ] {
            if v == 0 || v > max {
                return Err(invalid(flag, &v.to_string(), format!("1 to {max}")));
            }
        }
        let require = self
            .bot_require
            .iter()
            .filter(|p| !p.trim().is_empty())
            .map(|p| {
                if p.starts_with('/') && !p.contains(['?', '#', ' ']) {
                    Ok(p.trim_end_matches('/').to_owned())
                } else {
                    Err(invalid(
                        "bot-require",
                        p,
                        "expected a path such as /x402Article",
                    ))
                }
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        Ok(crate::licensing::bot_auth::BotAuthConfig {
            agents,
            directory_timeout: Duration::from_millis(self.bot_directory_timeout_ms),
            directory_ttl: Duration::from_secs(self.bot_directory_ttl_secs),
            require,
        })
    }
}

/// Parse a 0x address (any case; checksummed when mixed-case is given and valid).
pub(crate) fn parse_address(flag: &'static str, s: &str) -> Result<Address, ConfigError> {
    let t = s.trim();
    if !(t.len() == 42 && t.starts_with("0x") && t[2..].bytes().all(|b| b.is_ascii_hexdigit())) {
        return Err(invalid(flag, s, "expected 0x followed by 40 hex digits"));
    }
    t.parse::<Address>()
        .map_err(|e| invalid(flag, s, e.to_string()))
}

fn parse_http_url(flag: &'static str, s: &str) -> Result<String, ConfigError> {
    let t = s.trim();
    let rest = t
        .strip_prefix("http://")
        .or_else(|| t.strip_prefix("https://"))
        .ok_or_else(|| invalid(flag, s, "expected an http:// or https:// URL"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || t.contains(char::is_whitespace) {
        return Err(invalid(flag, s, "expected an absolute URL with a host"));
    }
    if t.contains(['?', '#']) {
        return Err(invalid(flag, s, "must not carry a query or fragment"));
    }
    t.parse::<http::Uri>()
        .map_err(|e| invalid(flag, s, e.to_string()))?;
    Ok(t.trim_end_matches('/').to_owned())
}

fn parse_public_url(s: &str) -> Result<String, ConfigError> {
    parse_http_url("public-url", s)
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
        assert_eq!(s.payment.caip2(), "eip155:84532");
        assert_eq!(s.facilitator_url, None);
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
