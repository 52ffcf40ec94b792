//! In-process cost of interface A's hot paths through the whole router (no socket): the 402 answer, a
//! paid purchase (local verification, verify-only settlement, receipt write to an in-memory database),
//! and the catalog. The loopback figures with wrk are in docs/bench/reference-server-licensing.md.

use alloy_signer_local::PrivateKeySigner;
use axum::body::Body;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use http::Request;
use http_body_util::BodyExt as _;
use reference_server::store::{Db, Stores};
use reference_server::{Config, build_app};
use serde_json::Value;
use tower::ServiceExt as _;
use x402_tower::client::sign::{Requirements, SignOptions, sign_sync};

const BASE: &str = "http://127.0.0.1:8080";
const PATH: &str = "/x402Article?articleId=c2pa-explained";

/// A payment for the first offer of `required`, signed by the workspace's client as `@x402/fetch` signs.
fn sign(signer: &PrivateKeySigner, required: &Value) -> String {
    let requirements = Requirements::from_document(required).unwrap();
    let offer = &requirements.offers[0];
    let token = offer.token().unwrap();
    sign_sync(
        signer,
        &requirements,
        offer,
        &token,
        &SignOptions::default(),
    )
    .unwrap()
    .header_value
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut config = Config::for_tests();
    config.registry.seed_assets = 0;
    config.http.public_url = Some(BASE.into());
    let settings = config.validate().unwrap();
    let stores = Stores::sqlite(Db::open_in_memory().unwrap());
    rt.block_on(reference_server::licensing::seed(&*stores.licensing))
        .unwrap();
    let app = rt
        .block_on(build_app(settings, BASE.into(), stores))
        .unwrap();

    let get = |path: &str, payment: Option<String>| {
        let mut req = Request::get(path);
        if let Some(p) = payment {
            req = req.header("PAYMENT-SIGNATURE", p);
        }
        req.body(Body::empty()).unwrap()
    };
    let required: Value = rt.block_on(async {
        let resp = app.clone().oneshot(get(PATH, None)).await.unwrap();
        assert_eq!(resp.status(), 402);
        serde_json::from_slice(
            &B64.decode(resp.headers()["payment-required"].as_bytes())
                .unwrap(),
        )
        .unwrap()
    });

    let mut group = c.benchmark_group("licensing");
    group.bench_function("402 answer", |b| {
        b.iter(|| {
            rt.block_on(async {
                let resp = app.clone().oneshot(get(PATH, None)).await.unwrap();
                assert_eq!(resp.status(), 402);
                resp.into_body().collect().await.unwrap()
            })
        })
    });
    group.bench_function("catalog", |b| {
        b.iter(|| {
            rt.block_on(async {
                let resp = app
                    .clone()
                    .oneshot(get("/x402Article/list", None))
                    .await
                    .unwrap();
                resp.into_body().collect().await.unwrap()
            })
        })
    });
    let signer = PrivateKeySigner::random();
    group.bench_function("paid purchase (verify-only, receipt written)", |b| {
        b.iter_batched(
            || sign(&signer, &required),
            |payment| {
                rt.block_on(async {
                    let resp = app.clone().oneshot(get(PATH, Some(payment))).await.unwrap();
                    assert_eq!(resp.status(), 200);
                    resp.into_body().collect().await.unwrap()
                })
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

/// A request to sign for the Web Bot Auth bench: `@authority` only (as the draft's vector).
struct ToSign {
    input: String,
    signature: String,
}

impl web_bot_auth::message_signatures::UnsignedMessage for ToSign {
    fn fetch_components_to_cover(
        &self,
    ) -> indexmap::IndexMap<web_bot_auth::components::CoveredComponent, String> {
        indexmap::IndexMap::from_iter([(
            web_bot_auth::components::CoveredComponent::Derived(
                web_bot_auth::components::DerivedComponent::Authority { req: false },
            ),
            "127.0.0.1:8080".to_owned(),
        )])
    }

    fn register_header_contents(&mut self, input: String, signature: String) {
        self.input = format!("sig1={input}");
        self.signature = format!("sig1={signature}");
    }
}

/// Verifying a Web Bot Auth signed request (key directory cached, fresh nonce each time): parse, time
/// checks, Ed25519 verification, nonce bookkeeping.
fn bot_auth(c: &mut Criterion) {
    use reference_server::licensing::bot_auth::{BotAuthConfig, BotVerifier};
    const PRIVATE: [u8; 32] = [
        0x9f, 0x83, 0x62, 0xf8, 0x7a, 0x48, 0x4a, 0x95, 0x4e, 0x6e, 0x74, 0x0c, 0x5b, 0x4c, 0x0e,
        0x84, 0x22, 0x91, 0x39, 0xa2, 0x0a, 0xa8, 0xab, 0x56, 0xff, 0x66, 0x58, 0x6f, 0x6a, 0x7d,
        0x29, 0xc5,
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let verifier = BotVerifier::new(
        BotAuthConfig {
            agents: vec!["https://agent.test".into()],
            directory_timeout: std::time::Duration::from_secs(1),
            directory_ttl: std::time::Duration::from_secs(3600),
            require: vec![],
        },
        BASE,
    );
    rt.block_on(verifier.preload(
        "https://agent.test",
        serde_json::from_str(
            r#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}]}"#,
        )
        .unwrap(),
    ));
    let uri: http::Uri = PATH.parse().unwrap();
    let mut n = 0u64;
    c.bench_function("web bot auth: verify a signed request", |b| {
        b.iter_batched(
            || {
                n += 1;
                let mut m = ToSign {
                    input: String::new(),
                    signature: String::new(),
                };
                web_bot_auth::message_signatures::MessageSigner {
                    keyid: "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U".into(),
                    nonce: format!("bench-{n}"),
                    tag: "web-bot-auth".into(),
                }
                .generate_signature_headers_content(
                    &mut m,
                    std::time::Duration::from_secs(300),
                    web_bot_auth::keyring::Algorithm::Ed25519,
                    &PRIVATE,
                )
                .unwrap();
                let mut h = http::HeaderMap::new();
                h.insert("host", "127.0.0.1:8080".parse().unwrap());
                h.insert("signature-input", m.input.parse().unwrap());
                h.insert("signature", m.signature.parse().unwrap());
                h
            },
            |h| {
                let now = time::OffsetDateTime::now_utc().unix_timestamp();
                rt.block_on(verifier.verify(&http::Method::GET, &uri, &h, now))
                    .unwrap()
            },
            BatchSize::SmallInput,
        )
    });
}

criterion_group!(benches, bench, bot_auth);
criterion_main!(benches);
