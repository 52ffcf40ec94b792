//! The reference server in-process, and the facilitator router.

use std::sync::Arc;

use alloy_primitives::Address;
use reference_server::{Config, Server};
use serde_json::Value;
use tokio::sync::oneshot;
use workspace_tests::chain::{CHAIN_ID, Chain, DEV_KEYS, TOKEN_NAME, TOKEN_VERSION, address_of};
use workspace_tests::pay::decode_b64_json;
use x402_tower::PaymentEngine;
use x402_tower::settle::Settler;
use x402_tower::settle::onchain::OnchainSettler;

use reference_server::facilitator;

/// An article of the demo catalog and its price (0.05 USDC).
pub(crate) const ARTICLE: &str = "provenance-newsroom-2025";
/// Its price in atomic units.
pub(crate) const ARTICLE_PRICE: u64 = 50_000;
/// Where payments go.
pub(crate) const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// A running reference server, stopped on drop.
pub(crate) struct RefServer {
    /// Its listening address, as a base URL.
    pub(crate) url: String,
    /// Its state (stores), for tests that set up data directly.
    pub(crate) state: Arc<reference_server::licensing::Licensing>,
    _stop: oneshot::Sender<()>,
}

impl RefServer {
    pub(crate) async fn start(adjust: impl FnOnce(&mut Config)) -> RefServer {
        let mut config = Config::for_tests();
        config.registry.seed_assets = 5;
        config.payment.pay_to = PAY_TO.into();
        adjust(&mut config);
        let server = Server::bind(config.validate().expect("valid config"))
            .await
            .expect("server starts");
        // Where the tests reach it (its public URL, which payments are bound to, may name another host).
        let url = format!("http://{}", server.local_addr());
        let state = server.state().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        RefServer {
            url,
            state,
            _stop: stop,
        }
    }

    /// Configured for the anvil token, settling on chain itself (`--rpc-url`, `--settler-key`: the relayer is
    /// dev account #1), then adjusted.
    pub(crate) async fn settling_on(chain: &Chain, adjust: impl FnOnce(&mut Config)) -> RefServer {
        let usdc = chain.usdc.to_checksum(None);
        let rpc_url = chain.anvil.url.clone();
        RefServer::start(move |c| {
            c.payment.network = format!("eip155:{CHAIN_ID}");
            c.payment.asset = Some(usdc);
            c.payment.asset_name = Some(TOKEN_NAME.into());
            c.payment.asset_version = Some(TOKEN_VERSION.into());
            c.payment.rpc_url = Some(rpc_url);
            c.payment.settler_key = Some(DEV_KEYS[1].into());
            adjust(c);
        })
        .await
    }

    /// Two instances of one deployment settling on `chain`: one SQLite database in a directory named after
    /// `name` (returned: the database lives as long as it) and one public URL (the resource a payment is
    /// bound to), each instance then adjusted by `adjust`.
    pub(crate) async fn deployment_on(
        chain: &Chain,
        name: &str,
        adjust: impl Fn(&mut Config),
    ) -> (ChildDir, RefServer, RefServer) {
        let dir = ChildDir::new(name);
        let database = format!("sqlite:{}", dir.0.join("shop.sqlite3").display());
        let instance = || {
            RefServer::settling_on(chain, |c| {
                c.registry.database = Some(database.clone());
                c.http.public_url = Some("http://shop.test".into());
                adjust(c);
            })
        };
        let (a, b) = (instance().await, instance().await);
        (dir, a, b)
    }

    /// Configured for the anvil token, settling through `facilitator` (base URL ending in `/facilitator`).
    pub(crate) async fn on_chain(chain: &Chain, facilitator: &str) -> RefServer {
        RefServer::on_network(chain, facilitator, &format!("eip155:{CHAIN_ID}")).await
    }

    /// The same on `network` (a v1 name or CAIP-2 id naming the chain anvil runs as).
    pub(crate) async fn on_network(chain: &Chain, facilitator: &str, network: &str) -> RefServer {
        let usdc = chain.usdc.to_checksum(None);
        let facilitator = facilitator.to_owned();
        let network = network.to_owned();
        RefServer::start(move |c| {
            c.payment.network = network;
            c.payment.asset = Some(usdc);
            c.payment.asset_name = Some(TOKEN_NAME.into());
            c.payment.asset_version = Some(TOKEN_VERSION.into());
            c.payment.facilitator_url = Some(facilitator);
            c.payment.facilitator_url_token = Some(FACILITATOR_TOKEN.into());
        })
        .await
    }

    /// GET the article (or `url` of this server when given) with `header` as `PAYMENT-SIGNATURE`.
    pub(crate) async fn pay(&self, header: &str) -> reqwest::Response {
        self.pay_at(&self.article_url(), header).await
    }

    /// GET `url` with `header` as `PAYMENT-SIGNATURE`.
    pub(crate) async fn pay_at(&self, url: &str, header: &str) -> reqwest::Response {
        get_paid(url, header).await
    }

    /// The settlement log (`/operator/settlements`), read with the operator token `token`.
    pub(crate) async fn settlements(&self, token: &str) -> Value {
        settlements_at(&self.url, token).await
    }

    pub(crate) fn article_url(&self) -> String {
        format!("{}/x402Article?articleId={ARTICLE}", self.url)
    }
}

/// The settlement log (`/operator/settlements`) of the server at `base`, read with the operator token
/// `token`.
pub(crate) async fn settlements_at(base: &str, token: &str) -> Value {
    json_of(
        http()
            .get(format!("{base}/operator/settlements"))
            .header("authorization", format!("token {token}")),
    )
    .await
}

/// GET `url` and parse its JSON body.
pub(crate) async fn get_json(url: &str) -> Value {
    json_of(http().get(url)).await
}

/// Sends `request` and parses its JSON body.
async fn json_of(request: reqwest::RequestBuilder) -> Value {
    request
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON")
}

/// The server's `/metrics` text.
pub(crate) async fn metrics_text(url: &str) -> String {
    http()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
}

/// Serves `router` on a free loopback port; returns its base URL.
pub(crate) async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{addr}")
}

/// The relayer key (anvil account #1) and an on-chain settler for `chain`.
pub(crate) fn settler(chain: &Chain) -> OnchainSettler {
    OnchainSettler::builder(chain.anvil.url.clone(), DEV_KEYS[1])
        .build()
        .expect("settler")
}

/// The bearer token of the facilitator API the tests start.
pub(crate) const FACILITATOR_TOKEN: &str = "e2e-facilitator-token";

/// Starts the facilitator API (behind [`FACILITATOR_TOKEN`]) over a payment engine with an on-chain settler;
/// returns its base URL (`http://.../facilitator`).
pub(crate) async fn facilitator_for(chain: &Chain) -> String {
    let settler: Arc<dyn Settler> = Arc::new(settler(chain));
    let engine = PaymentEngine::builder()
        .settler(settler)
        .build()
        .expect("engine");
    let stores = reference_server::store::Stores::open(&"sqlite::memory:".parse().expect("url"))
        .await
        .expect("stores");
    let router = facilitator::router(
        Arc::new(engine),
        facilitator::FacilitatorConfig::with_token(FACILITATOR_TOKEN),
        Arc::new(reference_server::facilitator::discovery::Catalogue::new(
            stores.settlements.clone(),
        )),
    );
    format!("{}/facilitator", serve(router).await)
}

/// The decoded `PAYMENT-RESPONSE` of an answer.
pub(crate) fn receipt_of(resp: &reqwest::Response) -> Value {
    decode_b64_json(
        resp.headers()["payment-response"]
            .to_str()
            .expect("receipt header"),
    )
}

pub(crate) fn pay_to() -> Address {
    PAY_TO.parse().expect("address")
}

/// A payer key from the dev accounts, and its address.
pub(crate) fn payer(n: usize) -> (&'static str, Address) {
    (DEV_KEYS[n], address_of(DEV_KEYS[n]))
}

pub(crate) fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// GET the article unpaid: the decoded PAYMENT-REQUIRED.
pub(crate) async fn offer(url: &str) -> Value {
    let resp = http().get(url).send().await.expect("GET");
    assert_eq!(resp.status(), 402);
    let header = resp.headers()["payment-required"]
        .to_str()
        .expect("ascii")
        .to_owned();
    decode_b64_json(&header)
}

/// Checks a purchase from outside: 200, the article, the receipt header decodes with success, and the
/// receipt's verify URL confirms the payer. Returns the settlement transaction of the verify URL's record.
pub(crate) async fn check_purchase(
    p: &workspace_tests::clients::Purchase,
    payer: Address,
) -> String {
    assert_eq!(p.status, 200, "purchase failed: {}", p.body);
    assert_eq!(p.receipt["success"], true, "receipt {}", p.receipt);
    let body: Value = serde_json::from_str(&p.body).expect("JSON body");
    assert!(
        body["article"]["content"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{body}"
    );
    let verify_url = body["receipt"]["nft"]["verifyUrl"]
        .as_str()
        .expect("verifyUrl");
    let resp = http().get(verify_url).send().await.expect("verify URL");
    assert_eq!(resp.status(), 200);
    let record: Value = resp.json().await.expect("receipt JSON");
    let recorded_payer = record["payer"].as_str().expect("payer");
    assert!(
        recorded_payer.eq_ignore_ascii_case(&payer.to_string()),
        "{record}"
    );
    assert_eq!(record["amount"], ARTICLE_PRICE.to_string(), "{record}");
    let settlement = record["settlement"]
        .as_str()
        .expect("settlement")
        .to_owned();
    assert_eq!(
        p.receipt["transaction"].as_str(),
        Some(settlement.as_str()),
        "{record} vs {}",
        p.receipt
    );
    settlement
}

/// The reference server as a child process (this package's `e2e-reference-server` binary, which runs the
/// server's own command line) on a SQLite file in its own directory, for tests that kill it: SIGKILL, and
/// on drop. The directory outlives the process (a restart opens the same database) and is removed with the
/// [`ChildDir`].
pub(crate) struct ChildServer {
    child: std::process::Child,
    pub(crate) url: String,
    log: Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
}

/// A directory for child servers' media and database (a SQLite file in it, or a PostgreSQL database of its
/// own), removed on drop.
pub(crate) struct ChildDir(pub(crate) std::path::PathBuf, String);

impl ChildDir {
    /// With a SQLite database in the directory.
    pub(crate) fn new(name: &str) -> ChildDir {
        let dir = std::env::temp_dir().join(format!("e2e-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let database = dir.join("shop.sqlite3").display().to_string();
        ChildDir(dir, database)
    }

    /// With a new database on the PostgreSQL cluster the test command started
    /// (`X402_TEST_POSTGRES_ADMIN`; a loud failure without it).
    pub(crate) async fn on_postgres(name: &str) -> ChildDir {
        let admin = std::env::var("X402_TEST_POSTGRES_ADMIN").unwrap_or_else(|_| {
            panic!(
                "X402_TEST_POSTGRES_ADMIN is not set: this test needs PostgreSQL (scripts/test.sh starts one)"
            )
        });
        let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("X402_TEST_POSTGRES_ADMIN={admin}: {e}"));
        tokio::spawn(connection);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos();
        let db = format!("e2e_{}_{nanos}", name.replace('-', "_"));
        client
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .await
            .expect("a database for the test");
        let (base, _) = admin
            .rsplit_once('/')
            .expect("an admin URL ends with /<database>");
        let mut dir = ChildDir::new(name);
        dir.1 = format!("{base}/{db}");
        dir
    }
}

impl Drop for ChildDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl ChildServer {
    /// Starts it on `dir`'s database with `flags` (besides `--listen 127.0.0.1:0`, `--database`,
    /// `--media-dir`, `--seed-assets 5` and `--pay-to`), and waits for its banner.
    pub(crate) fn start(dir: &ChildDir, flags: &[String]) -> ChildServer {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_e2e-reference-server"))
            .args([
                "--listen",
                "127.0.0.1:0",
                "--seed-assets",
                "5",
                "--pay-to",
                PAY_TO,
            ])
            .arg("--database")
            .arg(&dir.1)
            .arg("--media-dir")
            .arg(dir.0.join("media"))
            .args(["--log-format", "text"])
            .args(flags)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn e2e-reference-server");
        // The last lines of its log, so that a failure says what the server did.
        let log = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
        let stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let mut kept = kept.lock().expect("log");
                if kept.len() == 60 {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
        let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let banner = lines.next().and_then(Result::ok);
        // Keep reading: a closed pipe would kill the server at its next line of output.
        std::thread::spawn(move || lines.for_each(drop));
        let mut server = ChildServer {
            child,
            url: String::new(),
            log,
        };
        let Some(url) = banner
            .as_deref()
            .and_then(|b| b.split_whitespace().find(|w| w.starts_with("http://")))
        else {
            let status = server.child.wait();
            std::thread::sleep(std::time::Duration::from_millis(200));
            panic!(
                "no banner: the server ended ({status:?}); its log:\n{}",
                server.log_tail()
            );
        };
        server.url = url.to_owned();
        server
    }

    /// SIGKILL, and waits for the process to end.
    pub(crate) fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("the killed server's status");
    }

    /// The last lines of its log.
    pub(crate) fn log_tail(&self) -> String {
        let log = self.log.lock().expect("log");
        log.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    pub(crate) fn article_url(&self) -> String {
        format!("{}/x402Article?articleId={ARTICLE}", self.url)
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How many transactions the tests' relayer (dev account #1, [`settler`]'s key) has had mined.
pub(crate) async fn relayer_transactions(chain: &Chain) -> alloy_primitives::U256 {
    let relayer = address_of(DEV_KEYS[1]);
    workspace_tests::chain::quantity(
        &chain
            .rpc
            .call(
                "eth_getTransactionCount",
                serde_json::json!([relayer, "latest"]),
            )
            .await,
    )
}

/// A third party (anvil's admin) broadcasts the payer's signed authorization of `payload` (a decoded v2
/// `PaymentPayload`) for `requirements` itself, as another facilitator or anybody holding it could: the
/// hash of the mined transaction.
pub(crate) async fn broadcast_elsewhere(
    chain: &Chain,
    payload: &serde_json::Value,
    requirements: &serde_json::Value,
) -> String {
    let request = x402_tower::engine::facilitator::settle_request(
        payload.to_string().into(),
        &requirements.to_string(),
    )
    .expect("a settle request");
    let (to, calldata) =
        x402_tower::settle::onchain::settlement_call(&request).expect("a scheme settled on chain");
    let mined = chain.transact(to, calldata.to_vec()).await;
    mined["transactionHash"].as_str().expect("hash").to_owned()
}

/// The payer `from` holds `balance` and the relayer sent no transaction since it had sent `sent_before`.
pub(crate) async fn assert_balance_and_nothing_sent(
    chain: &Chain,
    from: alloy_primitives::Address,
    balance: alloy_primitives::U256,
    sent_before: alloy_primitives::U256,
) {
    assert_eq!(chain.balance(from).await, balance);
    assert_eq!(
        relayer_transactions(chain).await,
        sent_before,
        "nothing sent"
    );
}

/// GET `url` with `header` as `PAYMENT-SIGNATURE`.
pub(crate) async fn get_paid(url: &str, header: &str) -> reqwest::Response {
    http()
        .get(url)
        .header("PAYMENT-SIGNATURE", header)
        .send()
        .await
        .expect("GET")
}

/// The command-line flags of a child reference server selling the articles in `chain`'s USDC over `methods`
/// (`--transfer-methods`) as `http://shop.test` on chain `chain_id`, settling on chain with dev account #1 as
/// relayer; then `extra`.
pub(crate) fn onchain_flags(
    chain: &Chain,
    chain_id: u64,
    methods: &str,
    extra: &[&str],
) -> Vec<String> {
    use workspace_tests::chain::{DEV_KEYS, TOKEN_NAME, TOKEN_VERSION};
    let network = format!("eip155:{chain_id}");
    let usdc = chain.usdc.to_checksum(None);
    [
        "--public-url",
        "http://shop.test",
        "--network",
        &network,
        "--asset",
        &usdc,
        "--asset-name",
        TOKEN_NAME,
        "--asset-version",
        TOKEN_VERSION,
        "--transfer-methods",
        methods,
        "--rpc-url",
        &chain.anvil.url,
        "--settler-key",
        DEV_KEYS[1],
    ]
    .iter()
    .chain(extra)
    .map(|f| f.to_string())
    .collect()
}

/// An official server's configuration selling `chain`'s USDC on `network` for 10,000 atomic units to
/// [`PAY_TO`] through `facilitator` (which wants [`FACILITATOR_TOKEN`]).
pub(crate) fn express_config(
    chain: &Chain,
    network: &str,
    facilitator: String,
) -> workspace_tests::clients::ExpressConfig {
    workspace_tests::clients::ExpressConfig {
        facilitator,
        network: network.to_owned(),
        asset: chain.usdc.to_checksum(None),
        name: workspace_tests::chain::TOKEN_NAME.into(),
        version: workspace_tests::chain::TOKEN_VERSION.into(),
        pay_to: PAY_TO.into(),
        amount: "10000".into(),
        facilitator_token: Some(FACILITATOR_TOKEN.into()),
    }
}

/// An address in a JSON answer.
pub(crate) fn address_in(v: &Value) -> Address {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an address: {v}"))
}
