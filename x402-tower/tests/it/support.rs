//! Shared test helpers: a counting inner service, payments shaped like the official clients' (signed by the
//! crate's client), header encoding.
#![allow(unreachable_pub)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use alloy_primitives::{Address, B256, U256, address};
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{Eip712Domain, eip712_domain};
use base64::Engine as _;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tower::ServiceExt;
use x402_tower::client::sign::sign_authorization_sync;
use x402_tower::network::Token;
use x402_tower::pricing::BoxFuture;
use x402_tower::proto::Authorization;
use x402_tower::proto::{SettleResponse, SupportedResponse};
use x402_tower::settle::{SettleError, SettleOutcome, SettleRequest, Settler, VerifyOutcome};
use x402_tower::{PaymentOffer, Price, X402Config, X402Layer, network::Network};

pub const ACCOUNT0_KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
pub const ACCOUNT0: Address = address!("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");
pub const PAY_TO: Address = address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
pub const USDC_BASE_SEPOLIA: Address = address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e");
pub const BASE_URL: &str = "https://shop.example";

pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// 0.01 USDC on Base Sepolia to PAY_TO.
pub fn offer() -> PaymentOffer {
    PaymentOffer::usdc(
        "base-sepolia".parse().unwrap(),
        PAY_TO,
        Price::from_usdc_decimal("0.01").unwrap(),
    )
    .unwrap()
    .description("A report")
    .mime_type("application/json")
}

pub fn config() -> X402Config {
    X402Layer::builder(BASE_URL).offer(offer())
}

pub fn signer() -> PrivateKeySigner {
    ACCOUNT0_KEY.parse().unwrap()
}

/// A key that is not the payer's ([`signer`]): what a forger signs with (anvil's account 1).
pub fn stranger() -> PrivateKeySigner {
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
        .parse()
        .unwrap()
}

pub fn domain_base_sepolia() -> Eip712Domain {
    eip712_domain! {
        name: "USDC",
        version: "2",
        chain_id: 84532,
        verifying_contract: USDC_BASE_SEPOLIA,
    }
}

/// An authorization as a client would build it.
#[derive(Clone, Debug)]
pub struct Auth {
    pub from: Address,
    pub to: Address,
    pub value: U256,
    pub valid_after: u64,
    pub valid_before: u64,
    pub nonce: B256,
}

impl Auth {
    /// v2 client: validAfter = 0, validBefore = now + 300.
    pub fn v2(nonce: u8) -> Auth {
        Auth {
            from: ACCOUNT0,
            to: PAY_TO,
            value: U256::from(10_000u64),
            valid_after: 0,
            valid_before: now() + 300,
            nonce: B256::repeat_byte(nonce),
        }
    }

    /// legacy v1 client: validAfter = now - 600.
    pub fn v1(nonce: u8) -> Auth {
        Auth {
            valid_after: now() - 600,
            ..Auth::v2(nonce)
        }
    }

    /// Signed with the crate's client (the workspace's one signer) under `domain`.
    pub fn sign(&self, signer: &PrivateKeySigner, domain: &Eip712Domain) -> String {
        let authorization = Authorization {
            from: self.from,
            to: self.to,
            value: self.value,
            valid_after: U256::from(self.valid_after),
            valid_before: U256::from(self.valid_before),
            nonce: self.nonce,
        };
        let token = Token::new(
            domain.verifying_contract.expect("domain address"),
            domain.name.as_deref().expect("domain name"),
            domain.version.as_deref().expect("domain version"),
            6,
        );
        let chain_id = domain.chain_id.expect("domain chain id").to::<u64>();
        let sig = sign_authorization_sync(signer, &authorization, chain_id, &token).unwrap();
        format!("0x{}", hex(&sig))
    }

    pub fn json(&self) -> Value {
        json!({
            "from": self.from.to_checksum(None),
            "to": self.to.to_checksum(None),
            "value": self.value.to_string(),
            "validAfter": self.valid_after.to_string(),
            "validBefore": self.valid_before.to_string(),
            "nonce": self.nonce.to_string(),
        })
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The v2 `accepted` for [`offer`].
pub fn accepted_v2() -> Value {
    json!({
        "scheme": "exact",
        "network": "eip155:84532",
        "amount": "10000",
        "asset": USDC_BASE_SEPOLIA.to_checksum(None),
        "payTo": PAY_TO.to_checksum(None),
        "maxTimeoutSeconds": 300,
        "extra": {"name": "USDC", "version": "2"}
    })
}

pub fn payload_v2(auth: &Auth, signature: &str) -> Value {
    json!({
        "x402Version": 2,
        "payload": {"authorization": auth.json(), "signature": signature},
        "resource": {"url": format!("{BASE_URL}/report"), "description": "A report", "mimeType": "application/json"},
        "accepted": accepted_v2(),
    })
}

pub fn payload_v1(auth: &Auth, signature: &str) -> Value {
    json!({
        "x402Version": 1,
        "scheme": "exact",
        "network": "base-sepolia",
        "payload": {"signature": signature, "authorization": auth.json()},
    })
}

pub fn b64(v: &Value) -> String {
    base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(v).unwrap())
}

pub fn unb64(s: &str) -> Value {
    serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(s).unwrap()).unwrap()
}

/// A signed v2 payment header value for [`offer`].
pub fn v2_header(nonce: u8) -> String {
    let a = Auth::v2(nonce);
    b64(&payload_v2(&a, &a.sign(&signer(), &domain_base_sepolia())))
}

/// A signed v1 payment header value for [`offer`].
pub fn v1_header(nonce: u8) -> String {
    let a = Auth::v1(nonce);
    b64(&payload_v1(&a, &a.sign(&signer(), &domain_base_sepolia())))
}

/// An inner service that counts its calls and answers `status` with a JSON body.
#[derive(Clone)]
pub struct Inner {
    pub calls: Arc<AtomicUsize>,
}

impl Inner {
    pub fn new() -> Self {
        Inner {
            calls: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn service(
        &self,
        status: StatusCode,
    ) -> impl tower::Service<
        Request<Full<Bytes>>,
        Response = Response<Full<Bytes>>,
        Error = Infallible,
        Future: Send,
    >
    + Clone
    + Send
    + 'static
    + use<> {
        let calls = self.calls.clone();
        tower::service_fn(move |req: Request<Full<Bytes>>| {
            calls.fetch_add(1, Ordering::SeqCst);
            let paid = req
                .extensions()
                .get::<x402_tower::VerifiedPayment>()
                .cloned();
            async move {
                let body = json!({
                    "ok": true,
                    "payer": paid.as_ref().map(|p| p.payer.to_checksum(None)),
                    "settled": paid.as_ref().and_then(|p| p.settlement.as_ref()).map(|s| s.transaction.clone()),
                });
                let mut res = Response::new(Full::new(Bytes::from(body.to_string())));
                *res.status_mut() = status;
                Ok::<_, Infallible>(res)
            }
        })
    }
}

pub fn get(path: &str) -> http::request::Builder {
    Request::get(path)
}

pub fn req(path: &str, headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut b = get(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Full::new(Bytes::new())).unwrap()
}

/// The parts of a response tests look at.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
    /// The v2 document of `PAYMENT-REQUIRED`, checked to be `X-Payment-Required`'s (when sent) plus
    /// `extensions`.
    pub fn payment_required(&self) -> Value {
        let v = unb64(self.header("payment-required").expect("PAYMENT-REQUIRED"));
        if let Some(legacy) = self.header("x-payment-required") {
            let mut lean = v.clone();
            lean.as_object_mut().unwrap().remove("extensions");
            assert_eq!(unb64(legacy), lean);
        }
        v
    }
    /// The bytes of the headers as HTTP/1.1 writes them (`name: value\r\n`).
    pub fn headers_len(&self) -> usize {
        self.headers
            .iter()
            .map(|(n, v)| n.as_str().len() + 2 + v.len() + 2)
            .sum()
    }
    /// The `error` of a 402's v2 document, checked to agree with the v1 body's (which names `X-PAYMENT`
    /// where the v2 document names `PAYMENT-SIGNATURE`).
    pub fn error(&self) -> String {
        assert_eq!(self.status, StatusCode::PAYMENT_REQUIRED, "{self:?}");
        let v1 = self.json()["error"].as_str().unwrap().to_owned();
        let v2 = self.payment_required()["error"]
            .as_str()
            .unwrap()
            .to_owned();
        if v2 == x402_tower::layer::NO_PAYMENT_ERROR {
            assert_eq!(v1, x402_tower::layer::NO_PAYMENT_ERROR_V1);
        } else {
            assert_eq!(v1, v2);
        }
        v2
    }
    pub fn receipt(&self, name: &str) -> SettleResponse {
        serde_json::from_value(unb64(self.header(name).expect("receipt header"))).unwrap()
    }
}

pub async fn send<S, B>(svc: S, req: Request<Full<Bytes>>) -> Answer
where
    S: tower::Service<Request<Full<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let res = svc.oneshot(req).await.unwrap();
    let (parts, body) = res.into_parts();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

pub fn network(s: &str) -> Network {
    s.parse().unwrap()
}

/// A settler whose every settlement ends in `outcome`, counting settle and reconcile calls.
pub struct Scripted {
    outcome: SettleOutcome,
    settles: AtomicUsize,
    verifies: AtomicUsize,
    reconciles: AtomicUsize,
    reconciled: std::sync::Mutex<Option<SettleOutcome>>,
    deadline: std::sync::Mutex<Option<std::time::Duration>>,
}

impl Scripted {
    pub fn new(outcome: SettleOutcome) -> Arc<Self> {
        Arc::new(Scripted {
            outcome,
            settles: AtomicUsize::new(0),
            verifies: AtomicUsize::new(0),
            reconciles: AtomicUsize::new(0),
            reconciled: std::sync::Mutex::new(None),
            deadline: std::sync::Mutex::new(None),
        })
    }
    pub fn settles(&self) -> usize {
        self.settles.load(Ordering::SeqCst)
    }
    pub fn verifies(&self) -> usize {
        self.verifies.load(Ordering::SeqCst)
    }
    pub fn reconciles(&self) -> usize {
        self.reconciles.load(Ordering::SeqCst)
    }
    /// How long its settlements may take (default: unbounded).
    pub fn settles_within(&self, deadline: std::time::Duration) {
        *self.deadline.lock().unwrap() = Some(deadline);
    }
    /// What reconciliation finds from now on (default: settle's outcome).
    pub fn reconcile_to(&self, outcome: SettleOutcome) {
        *self.reconciled.lock().unwrap() = Some(outcome);
    }
}

impl Settler for Scripted {
    fn verify<'a>(
        &'a self,
        _: &'a SettleRequest,
    ) -> BoxFuture<'a, Result<VerifyOutcome, SettleError>> {
        self.verifies.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(VerifyOutcome::Valid) })
    }
    fn settle<'a>(&'a self, _: &'a SettleRequest) -> BoxFuture<'a, SettleOutcome> {
        self.settles.fetch_add(1, Ordering::SeqCst);
        let o = self.outcome.clone();
        Box::pin(async move { o })
    }
    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, SettleError>> {
        Box::pin(async { Ok(SupportedResponse::default()) })
    }
    fn settle_deadline(&self) -> Option<std::time::Duration> {
        *self.deadline.lock().unwrap()
    }
    fn reconcile<'a>(
        &'a self,
        _: &'a SettleRequest,
        _: Option<&'a str>,
    ) -> BoxFuture<'a, SettleOutcome> {
        self.reconciles.fetch_add(1, Ordering::SeqCst);
        let o = self
            .reconciled
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_else(|| self.outcome.clone());
        Box::pin(async move { o })
    }
}

/// A successful settlement with a fixed transaction.
pub fn settled_outcome() -> SettleOutcome {
    SettleOutcome::Settled {
        transaction: format!("0x{}", "ab".repeat(32)),
        payer: ACCOUNT0,
        network: "eip155:84532".into(),
    }
}

/// The v2 payment with nonce byte `nonce`, echoing in `extensions` what an official client copies from a 402
/// that declares discovery, signed offers, sign-in-with-x and terms, beside a `payment-identifier` id and an
/// extension this crate does not know (what a payment record must keep).
pub fn payload_v2_echoing(nonce: u8) -> Value {
    let a = Auth::v2(nonce);
    let mut payload = payload_v2(&a, &a.sign(&signer(), &domain_base_sepolia()));
    payload["extensions"] = json!({
        "bazaar": {"info": {"input": {"type": "http", "method": "GET"}, "output": {"type": "json"}},
                   "schema": {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}},
        "offer-receipt": {"info": {"offers": [{"format": "eip712", "signature": format!("0x{}", "ab".repeat(65))}]}},
        "sign-in-with-x": {"info": {"domain": "shop.example", "nonce": "n0", "issuedAt": "2026-11-24T00:00:00Z"}},
        "payment-identifier": {"info": {"required": false, "id": "pay_0123456789abcdef0123"}},
        "terms": {"info": {"version": "1.0", "url": "https://shop.example/license.xml"}},
        "later-extension": {"info": [1, "two", {"three": 3}]},
    });
    payload
}

/// A v2 payment whose extensions are only the 402's echoed declarations (as the official clients pay for
/// the reference server's articles): its record keeps `"extensions":{}`.
pub fn payload_v2_echoing_only(nonce: u8) -> Value {
    let mut payload = payload_v2_echoing(nonce);
    let ext = payload["extensions"].as_object_mut().expect("extensions");
    ext.retain(|k, _| x402_tower::extensions::SERVER_DECLARATIONS.contains(&k.as_str()));
    payload
}

/// `payload` without the extensions a payment record leaves out (`x402_tower::extensions::SERVER_DECLARATIONS`).
pub fn without_echoed(payload: &Value) -> Value {
    let mut kept = payload.clone();
    if let Some(ext) = kept["extensions"].as_object_mut() {
        for k in x402_tower::extensions::SERVER_DECLARATIONS {
            ext.remove(k);
        }
    }
    kept
}

/// The record key of the payment [`Auth::v2`]/[`Auth::v1`] sign with nonce byte `nonce` (USDC on Base
/// Sepolia, from account 0).
pub fn payment_key(nonce: u8) -> x402_tower::store::PaymentKey {
    x402_tower::store::PaymentKey {
        chain_id: 84532,
        nonce_space: USDC_BASE_SEPOLIA,
        from: ACCOUNT0,
        nonce: B256::repeat_byte(nonce),
    }
}

/// An engine that settles with `settler`, everything else as built by default.
pub fn engine_with(settler: Arc<dyn x402_tower::Settler>) -> Arc<x402_tower::PaymentEngine> {
    Arc::new(
        x402_tower::PaymentEngine::builder()
            .settler(settler)
            .build()
            .unwrap(),
    )
}

/// Log lines written while `f` runs (a `tracing` subscriber of its own, no colours).
pub fn logs_of(f: impl FnOnce()) -> String {
    // One subscriber for the whole test binary, writing to the buffer of the thread that logs. A scoped
    // (thread-local) subscriber is not enough: tracing caches each log call site's interest across
    // threads, and a call site first reached while no subscriber wanted it could be skipped here too (this
    // test failed about one run in seven so).
    use std::cell::RefCell;
    thread_local! {
        static CAPTURED: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
    }
    struct ToThread;
    impl std::io::Write for ToThread {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            CAPTURED.with_borrow_mut(|c| {
                if let Some(c) = c {
                    c.extend_from_slice(bytes);
                }
            });
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(|| ToThread)
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in this test binary");
    });
    CAPTURED.with_borrow_mut(|c| *c = Some(Vec::new()));
    f();
    let captured = CAPTURED.with_borrow_mut(Option::take).unwrap_or_default();
    String::from_utf8(captured).unwrap()
}
