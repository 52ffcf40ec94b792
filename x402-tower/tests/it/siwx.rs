//! sign-in-with-x through the layer and the client: a buyer reads again what it paid for without paying, and
//! every way a proof can be wrong falls back to the 402 with the reason, its nonce never usable twice.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use alloy_primitives::Address;
use alloy_signer_local::PrivateKeySigner;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tower::{Layer, ServiceExt};
use x402_tower::client::{Paid, Payer, PaymentPolicy, Requirements, SignedInAs, X402ClientLayer};
use x402_tower::extensions::siwx::{PaidCheck, SignInWithX, SignedIn};
use x402_tower::{Price, VerifiedPayment, pricing::BoxFuture};

use crate::support::*;

type Bought = Arc<Mutex<HashSet<(Address, String)>>>;

struct Receipts(Bought);

impl PaidCheck for Receipts {
    fn has_paid<'a>(
        &'a self,
        payer: Address,
        resource_url: &'a str,
    ) -> BoxFuture<'a, Result<bool, x402_tower::store::StoreError>> {
        let paid = self
            .0
            .lock()
            .unwrap()
            .contains(&(payer, resource_url.to_owned()));
        Box::pin(std::future::ready(Ok(paid)))
    }
}

type Server = tower::util::BoxCloneService<Request<Full<Bytes>>, Response<Full<Bytes>>, Infallible>;

/// The layer with sign-in-with-x over a service that records who paid for what ("receipts") and says how
/// each request got in.
fn server(bought: Bought, clock: Option<Arc<Mutex<u64>>>) -> Server {
    server_and_metrics(bought, clock).0
}

/// [`server`] and its layer's metrics.
fn server_and_metrics(
    bought: Bought,
    clock: Option<Arc<Mutex<u64>>>,
) -> (Server, Arc<x402_tower::engine::metrics::X402Metrics>) {
    let mut config = config()
        .x_payment_required(true)
        .sign_in_with_x(SignInWithX::new(
            b"a test key of 32 bytes, shared..",
            Arc::new(Receipts(bought.clone())),
        ));
    if let Some(c) = clock {
        config = config.engine(Arc::new(
            x402_tower::PaymentEngine::builder()
                .settler(std::sync::Arc::new(x402_tower::settle::VerifyOnlySettler))
                .clock(move || *c.lock().unwrap())
                .build()
                .unwrap(),
        ));
    }
    let layer = config.build().unwrap();
    let metrics = layer.metrics();
    let inner = tower::service_fn(move |req: Request<Full<Bytes>>| {
        let url = format!("{BASE_URL}{}", req.uri().path_and_query().unwrap());
        let how = if let Some(p) = req.extensions().get::<VerifiedPayment>() {
            bought.lock().unwrap().insert((p.payer, url));
            "paid"
        } else if req.extensions().get::<SignedIn>().is_some() {
            "signed in"
        } else {
            "free"
        };
        std::future::ready(Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(
            how,
        )))))
    });
    let svc = layer.layer(inner);
    let server = tower::util::BoxCloneService::new(tower::service_fn(move |req| {
        let svc = svc.clone();
        async move {
            let res = svc.oneshot(req).await?;
            let (parts, body) = res.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            Ok::<_, Infallible>(Response::from_parts(parts, Full::new(bytes)))
        }
    }));
    (server, metrics)
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(format!("{BASE_URL}{path}"))
        .body(Full::default())
        .unwrap()
}

fn policy() -> PaymentPolicy {
    PaymentPolicy::new(Price::from_usdc_decimal("1").unwrap())
}

async fn body(res: Response<Full<Bytes>>) -> String {
    String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

#[tokio::test]
async fn a_buyer_reads_again_what_it_paid_for_without_paying() {
    let bought: Bought = Default::default();
    let svc = server(bought.clone(), None);
    let client = X402ClientLayer::new(signer(), policy()).layer(svc.clone());

    // First read: the sign-in is refused (not paid), so the client pays.
    let first = client.clone().oneshot(get("/report")).await.unwrap();
    assert!(first.extensions().get::<Paid>().is_some());
    assert_eq!(body(first).await, "paid");
    // Second read: signed in, nothing paid.
    let second = client.clone().oneshot(get("/report")).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    assert!(second.extensions().get::<Paid>().is_none());
    assert_eq!(
        second.extensions().get::<SignedInAs>().map(|s| s.0),
        Some(ACCOUNT0)
    );
    assert_eq!(body(second).await, "signed in");
    // Another resource was not bought: paid for.
    let other = client.oneshot(get("/report?page=2")).await.unwrap();
    assert!(other.extensions().get::<Paid>().is_some());
    assert_eq!(bought.lock().unwrap().len(), 2);
}

/// The 402 of `svc` for `path`, its requirements and the SIGN-IN-WITH-X value `signer` makes for it.
async fn proof_for(svc: &Server, path: &str, signer: PrivateKeySigner) -> (Requirements, String) {
    let res = svc.clone().oneshot(get(path)).await.unwrap();
    assert_eq!(res.status(), StatusCode::PAYMENT_REQUIRED);
    let reqs = Requirements::from_header(res.headers()["payment-required"].as_bytes()).unwrap();
    let proof = Payer::new(signer, policy())
        .sign_in(&reqs)
        .await
        .expect("declared");
    (reqs, proof)
}

async fn sign_in(svc: &Server, path: &str, proof: &str) -> (StatusCode, String) {
    let req = Request::get(format!("{BASE_URL}{path}"))
        .header("sign-in-with-x", proof)
        .body(Full::default())
        .unwrap();
    let res = svc.clone().oneshot(req).await.unwrap();
    let status = res.status();
    if status == StatusCode::OK {
        return (status, body(res).await);
    }
    let v: Value = serde_json::from_str(&body(res).await).unwrap();
    (
        status,
        v["error"]
            .as_str()
            .or(v["code"].as_str())
            .unwrap()
            .to_owned(),
    )
}

fn tamper(proof: &str, f: impl FnOnce(&mut Value)) -> String {
    let mut v = unb64(proof);
    f(&mut v);
    b64(&v)
}

#[tokio::test]
async fn every_wrong_proof_falls_back_to_the_402_with_its_reason() {
    let bought: Bought = Default::default();
    bought
        .lock()
        .unwrap()
        .insert((ACCOUNT0, format!("{BASE_URL}/report")));
    let clock = Arc::new(Mutex::new(now()));
    let svc = server(bought, Some(clock.clone()));

    // The declaration: this server's domain, the resource, a fresh nonce per 402.
    let (reqs, proof) = proof_for(&svc, "/report", signer()).await;
    let info = &reqs.extensions.as_ref().unwrap()["sign-in-with-x"]["info"];
    assert_eq!(info["domain"], "shop.example");
    assert_eq!(info["uri"], format!("{BASE_URL}/report"));
    let (again, _) = proof_for(&svc, "/report", signer()).await;
    assert_ne!(
        again.extensions.as_ref().unwrap()["sign-in-with-x"]["info"]["nonce"],
        info["nonce"]
    );

    let cases: Vec<(String, &str)> = vec![
        ("not base64".into(), "siwx_malformed"),
        (
            tamper(&proof, |v| v["domain"] = "evil.example".into()),
            "siwx_wrong_domain",
        ),
        (
            tamper(&proof, |v| v["uri"] = "https://evil.example/report".into()),
            "siwx_wrong_domain",
        ),
        (
            tamper(&proof, |v| v["chainId"] = "eip155:1".into()),
            "siwx_unsupported",
        ),
        (
            tamper(&proof, |v| {
                v["nonce"] = "00112233445566778899aabbccddeeff".into()
            }),
            "siwx_invalid_nonce",
        ),
        (
            tamper(&proof, |v| v["statement"] = "something else".into()),
            "siwx_invalid_signature",
        ),
    ];
    for (p, reason) in &cases {
        assert_eq!(
            sign_in(&svc, "/report", p).await,
            (StatusCode::PAYMENT_REQUIRED, (*reason).to_owned()),
            "{reason}"
        );
    }
    // Signed by another key than the address it claims.
    let (_, stolen) = proof_for(&svc, "/report", PrivateKeySigner::random()).await;
    let stolen = tamper(&stolen, |v| {
        v["address"] = ACCOUNT0.to_checksum(None).into()
    });
    assert_eq!(
        sign_in(&svc, "/report", &stolen).await.1,
        "siwx_invalid_signature"
    );
    // A signer who did not pay for this resource.
    let (_, stranger) = proof_for(&svc, "/report", PrivateKeySigner::random()).await;
    assert_eq!(sign_in(&svc, "/report", &stranger).await.1, "siwx_not_paid");
    // The real proof works once; its nonce never again.
    assert_eq!(
        sign_in(&svc, "/report", &proof).await,
        (StatusCode::OK, "signed in".to_owned())
    );
    assert_eq!(
        sign_in(&svc, "/report", &proof).await.1,
        "siwx_invalid_nonce"
    );
    // Past its validity (5 minutes), a proof is refused.
    let (_, late) = proof_for(&svc, "/report", signer()).await;
    *clock.lock().unwrap() += 301;
    assert_eq!(sign_in(&svc, "/report", &late).await.1, "siwx_expired");
}

#[tokio::test]
async fn a_short_key_is_a_configuration_error() {
    let r = config()
        .sign_in_with_x(SignInWithX::new(
            b"short",
            Arc::new(Receipts(Default::default())),
        ))
        .build();
    assert!(
        matches!(r, Err(x402_tower::ConfigError::SignInKeyTooShort)),
        "{r:?}"
    );
}

/// The 402 is built once per second and resource and copied with a fresh nonce: every copy has its own
/// nonce, both headers carry the same document, and a proof signed over any copy signs in, also after the
/// second it was issued in has passed (a new second starts a new build with its own `issuedAt`).
#[tokio::test]
async fn every_copy_of_the_402_carries_its_own_nonce_and_each_signs_in() {
    let bought: Bought = Default::default();
    let clock = Arc::new(Mutex::new(now()));
    let (svc, metrics) = server_and_metrics(bought.clone(), Some(clock.clone()));
    let mut nonces = HashSet::new();
    let mut issued = HashSet::new();
    let mut proofs = Vec::new();
    for round in 0..2 {
        for i in 0..4 {
            let path = format!("/report?copy={}", i % 2);
            bought
                .lock()
                .unwrap()
                .insert((ACCOUNT0, format!("{BASE_URL}{path}")));
            let res = svc.clone().oneshot(get(&path)).await.unwrap();
            assert_eq!(res.status(), StatusCode::PAYMENT_REQUIRED);
            let headers = res.headers();
            let reqs = Requirements::from_header(headers["payment-required"].as_bytes()).unwrap();
            // X-Payment-Required has no extensions, so no nonce: the same document for each copy.
            let lean = Requirements::from_header(headers["x-payment-required"].as_bytes()).unwrap();
            assert!(lean.extensions.is_none());
            assert_eq!(lean.offered, reqs.offered);
            let info = &reqs.extensions.as_ref().unwrap()["sign-in-with-x"]["info"];
            assert_eq!(info["uri"], format!("{BASE_URL}{path}"));
            let nonce = info["nonce"].as_str().unwrap().to_owned();
            assert_eq!(nonce.len(), 32);
            assert!(nonce.bytes().all(|b| b.is_ascii_hexdigit()), "{nonce}");
            assert!(nonces.insert(nonce), "a nonce was sent twice");
            issued.insert(info["issuedAt"].as_str().unwrap().to_owned());
            // The v1 body is the same for every copy and stays a valid v1 document.
            let v1: Value = serde_json::from_str(&body(res).await).unwrap();
            assert_eq!(v1["x402Version"], 1);
            let proof = Payer::new(signer(), policy())
                .sign_in(&reqs)
                .await
                .expect("declared");
            proofs.push((path, proof));
        }
        assert_eq!(issued.len(), round + 1, "one issue time per second");
        *clock.lock().unwrap() += 1;
    }
    // A refused proof's 402 is built whole, with a fresh nonce of its own.
    assert_eq!(
        sign_in(&svc, "/report?copy=0", "not base64").await,
        (StatusCode::PAYMENT_REQUIRED, "siwx_malformed".to_owned())
    );
    for (path, proof) in &proofs {
        assert_eq!(
            sign_in(&svc, path, proof).await,
            (StatusCode::OK, "signed in".to_owned()),
            "{path}"
        );
    }
    // Every 402 counted once, copied or built whole.
    assert_eq!(metrics.snapshot().payment_required_sent, 9);
}
