//! Shared test helpers: start the real server on a free loopback port with a temporary database, an
//! HTTP client, and an x402 payer that signs exactly as the official clients do.
//!
//! Usable from every test module:
//!
//! ```text
//! let server = TestServer::start().await;                       // seeded, temp SQLite file
//! let server = TestServer::start_with(|c| c.registry.api_token = Some("t".into())).await;
//! let resp = server.client.get(server.url("/healthz")).send().await.unwrap();
//! ```

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use alloy_primitives::{Address, B256, U256};
use alloy_signer_local::PrivateKeySigner;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use reference_server::licensing::Licensing;
use reference_server::{Config, Server};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use x402_tower::client::sign::{
    Offer, Requirements, SignOptions, sign_authorization_sync, sign_sync,
};
use x402_tower::network::Token;
use x402_tower::proto::Authorization;

/// A directory removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh empty directory under the system temp dir.
    pub fn new() -> Self {
        let dir =
            std::env::temp_dir().join(format!("reference-server-it-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The variable that points the suite at a PostgreSQL cluster (an admin URL, e.g.
/// `postgres://postgres@127.0.0.1:5433/postgres`). Unset: every test database is a SQLite file.
pub const POSTGRES_ENV: &str = "REFERENCE_SERVER_TEST_POSTGRES";

/// The backend the suite runs on: `postgres` when [`POSTGRES_ENV`] is set, else `sqlite`.
pub fn backend() -> &'static str {
    if std::env::var_os(POSTGRES_ENV).is_some() {
        "postgres"
    } else {
        "sqlite"
    }
}

/// False (and says so) in the SQLite pass: a test that needs PostgreSQL runs in the suite's PostgreSQL pass,
/// which the test command always runs.
pub fn in_postgres_pass() -> bool {
    let postgres = backend() == "postgres";
    if !postgres {
        eprintln!("runs in the PostgreSQL pass of the suite ({POSTGRES_ENV})");
    }
    postgres
}

/// A fresh, empty database for one test: a SQLite file `name` in `dir`, or (when [`POSTGRES_ENV`] is set) a
/// new PostgreSQL database on that cluster. Returns its `--database` URL.
pub async fn fresh_database(dir: &Path, name: &str) -> String {
    match std::env::var(POSTGRES_ENV) {
        Err(_) => dir.join(name).display().to_string(),
        Ok(admin) => {
            let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("{POSTGRES_ENV}={admin}: cannot connect: {e}"));
            tokio::spawn(connection);
            let db = format!("t_{}", uuid::Uuid::new_v4().simple());
            client
                .batch_execute(&format!("CREATE DATABASE {db}"))
                .await
                .expect("create the test database");
            let (base, _) = admin
                .rsplit_once('/')
                .expect("an admin URL ends with /<database>");
            format!("{base}/{db}")
        }
    }
}

/// The value of metric `name` (a family without labels) in `base`'s `/metrics`.
pub async fn metric(client: &reqwest::Client, base: &str, name: &str) -> u64 {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics"))
}

/// The server binary on a free loopback port with a fresh SQLite file in `dir` and `seed_assets` demo assets,
/// its stdout (the banner) piped: the caller sets the rest and spawns it.
pub fn binary(dir: &TempDir, seed_assets: &str) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_reference-server"));
    command
        .args([
            "--listen",
            "127.0.0.1:0",
            "--seed-assets",
            seed_assets,
            "--database",
        ])
        .arg(dir.path().join("db.sqlite3"))
        .stdout(std::process::Stdio::piped());
    command
}

/// The listen URL in the binary's banner line.
pub fn banner_url(first_line: &str) -> String {
    first_line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("listen URL in the banner")
        .to_owned()
}

/// An HTTP client for the tests (reqwest is built without a default TLS provider: install ring).
pub fn test_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// The real server, running on 127.0.0.1:<free port> until dropped or [`TestServer::stop`]ped.
pub struct TestServer {
    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub base: String,
    /// Shared state of the running server.
    pub state: Arc<Licensing>,
    /// A client for it.
    pub client: reqwest::Client,
    /// The configuration it was started with.
    pub config: Config,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    dir: Option<Arc<TempDir>>,
}

impl TestServer {
    /// Start with the test configuration: a fresh database ([`fresh_database`]), 40 seeded assets, port 0.
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// Start after adjusting the test configuration.
    pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> Self {
        let dir = Arc::new(TempDir::new());
        let mut config = Config::for_tests();
        config.registry.database = Some(fresh_database(dir.path(), "db.sqlite3").await);
        config.registry.media_dir = Some(dir.path().join("media"));
        config.registry.seed_assets = 40;
        adjust(&mut config);
        Self::start_config(config, Some(dir)).await
    }

    /// Start with exactly this configuration; `dir` is kept alive as long as the server.
    pub async fn start_config(config: Config, dir: Option<Arc<TempDir>>) -> Self {
        Self::start_wrapping(config, dir, |stores| stores).await
    }

    /// [`TestServer::start_config`] with its stores passed through `wrap` (to inject faults).
    pub async fn start_wrapping(
        config: Config,
        dir: Option<Arc<TempDir>>,
        wrap: impl FnOnce(reference_server::store::Stores) -> reference_server::store::Stores,
    ) -> Self {
        let settings = config.validate().expect("valid test configuration");
        let server = Server::bind_wrapping(settings, wrap)
            .await
            .expect("server starts");
        let base = server.public_url().to_owned();
        let state = server.state().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        Self {
            base,
            state,
            client: test_client(),
            config,
            stop: Some(stop),
            task: Some(task),
            dir,
        }
    }

    /// `GET` an operator endpoint with the server's operator token.
    pub async fn operator_get(&self, path_and_query: &str) -> reqwest::Response {
        self.client
            .get(self.url(path_and_query))
            .header(
                "authorization",
                format!("token {}", self.state.settings.operator_token.as_str()),
            )
            .send()
            .await
            .expect("GET")
    }

    /// Absolute URL of `path_and_query`.
    pub fn url(&self, path_and_query: &str) -> String {
        format!("{}{}", self.base, path_and_query)
    }

    /// GET and return the response.
    pub async fn get(&self, path_and_query: &str) -> reqwest::Response {
        self.client
            .get(self.url(path_and_query))
            .send()
            .await
            .expect("request")
    }

    /// GET `url` with one extra request header and return the response.
    pub async fn get_with(
        &self,
        url: impl reqwest::IntoUrl,
        name: &'static str,
        value: impl AsRef<str>,
    ) -> reqwest::Response {
        self.client
            .get(url)
            .header(name, value.as_ref())
            .send()
            .await
            .expect("request")
    }

    /// The temporary directory (database and media), if any.
    pub fn dir(&self) -> Option<Arc<TempDir>> {
        self.dir.clone()
    }

    /// Stop gracefully and wait until the server has finished.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await
                .expect("server task")
                .expect("server ran cleanly");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The public anvil/hardhat account #0 key (a test wallet, never funded on a real chain).
pub const PAYER_KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// Unix seconds now.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// A random 32-byte nonce.
pub fn random_nonce() -> B256 {
    B256::random()
}

/// A wallet that pays like the official x402 clients, signing with the workspace's client
/// (`x402_tower::client::sign`).
pub struct Payer {
    signer: PrivateKeySigner,
}

/// The one signable offer of a requirements object (`req`: a v2 `accepts` entry or a v1 one).
fn offer_of(req: &Value) -> (Requirements, Offer, Token) {
    let version = if req.get("maxAmountRequired").is_some() {
        1
    } else {
        2
    };
    let requirements =
        Requirements::from_document(&json!({"x402Version": version, "accepts": [req]}))
            .expect("requirements");
    let offer = requirements
        .offers
        .first()
        .expect("a signable offer")
        .clone();
    let token = offer.token().expect("extra.name and extra.version");
    (requirements, offer, token)
}

impl Payer {
    /// The anvil account #0.
    pub fn new() -> Self {
        Self {
            signer: PAYER_KEY.parse().expect("key"),
        }
    }

    /// A fresh random wallet.
    pub fn random() -> Self {
        Self {
            signer: PrivateKeySigner::random(),
        }
    }

    /// Its address.
    pub fn address(&self) -> Address {
        self.signer.address()
    }

    /// Sign an authorization of `value` for `req` (a v2 or v1 requirements object) with the given window
    /// and nonce, returning `{authorization, signature}`.
    pub fn sign(
        &self,
        req: &Value,
        value: &str,
        valid_after: u64,
        valid_before: u64,
        nonce: B256,
    ) -> Value {
        let (_, offer, token) = offer_of(req);
        let authorization = Authorization {
            from: self.address(),
            to: offer.pay_to,
            value: value.parse().expect("value"),
            valid_after: U256::from(valid_after),
            valid_before: U256::from(valid_before),
            nonce,
        };
        let signature = sign_authorization_sync(
            &self.signer,
            &authorization,
            offer.network.chain_id(),
            &token,
        )
        .expect("sign");
        json!({
            "signature": format!("0x{}", alloy_primitives::hex::encode(signature)),
            "authorization": authorization,
        })
    }

    fn pay(&self, document: &Value, options: &SignOptions) -> String {
        let requirements = Requirements::from_document(document).expect("requirements");
        let offer = requirements.offers.first().expect("a signable offer");
        let token = offer.token().expect("extra.name and extra.version");
        sign_sync(&self.signer, &requirements, offer, &token, options)
            .expect("sign")
            .header_value
    }

    /// The `PAYMENT-SIGNATURE` value the official v2 client (`@x402/fetch`) sends for a decoded
    /// `PAYMENT-REQUIRED` document: first offer, validAfter "0", validBefore now + maxTimeoutSeconds,
    /// random nonce, `accepted` = the offer as given.
    pub fn pay_v2(&self, payment_required: &Value) -> String {
        self.pay(payment_required, &SignOptions::default())
    }

    /// [`Payer::pay_v2`] with `validBefore` at `valid_before` (unix seconds).
    pub fn pay_v2_valid_before(&self, payment_required: &Value, valid_before: u64) -> String {
        let options = SignOptions {
            valid_before: Some(U256::from(valid_before)),
            ..Default::default()
        };
        self.pay(payment_required, &options)
    }

    /// [`Payer::pay_v2`] for the offer in `payment_required`, re-using the nonce of an earlier
    /// `PAYMENT-SIGNATURE` value: the same authorization key (chain, token, payer, nonce), signed anew.
    pub fn pay_v2_with_nonce_of(&self, payment_required: &Value, earlier: &str) -> String {
        let earlier: Value =
            serde_json::from_slice(&B64.decode(earlier).expect("base64")).expect("payment JSON");
        let nonce: B256 = earlier["payload"]["authorization"]["nonce"]
            .as_str()
            .expect("nonce")
            .parse()
            .expect("nonce hex");
        let options = SignOptions {
            nonce: Some(nonce),
            valid_before: Some(U256::from(now() + 300)),
            ..Default::default()
        };
        self.pay(payment_required, &options)
    }

    /// The `X-PAYMENT` value the legacy v1 client (`x402-fetch` 1.x) sends for a v1 402 body:
    /// validAfter now - 600, validBefore now + maxTimeoutSeconds.
    pub fn pay_v1(&self, body_v1: &Value) -> String {
        self.pay(body_v1, &SignOptions::default())
    }
}

/// Decode a Base64 JSON header value.
pub fn decode_header(resp: &reqwest::Response, name: &str) -> Value {
    let raw = resp
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("header {name} missing"));
    let bytes = B64.decode(raw.as_bytes()).expect("base64 header");
    serde_json::from_slice(&bytes).expect("JSON header")
}
