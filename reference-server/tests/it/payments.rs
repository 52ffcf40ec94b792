//! The money rules across the boundaries a deployment has: other HTTP methods, lost answers, unknown
//! settlement outcomes, the facilitator door, and two server processes on one database.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine as _;
use serde_json::{Value, json};

use reference_server::store::Stores;

use crate::common::*;
use crate::licensing::{json as json_body, offer, settlement_rows, stub_facilitator_hanging};

pub(crate) const ARTICLE: &str = "provenance-newsroom-2025";

#[tokio::test]
async fn no_method_but_get_is_charged_and_head_never_spends_a_payment() {
    let server = TestServer::start().await;
    let (required, _) = offer(&server, ARTICLE).await;
    let header = Payer::new().pay_v2(&required);
    let url = server.url(&format!("/x402Article?articleId={ARTICLE}"));
    for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"] {
        let resp = server
            .client
            .request(method.parse().unwrap(), &url)
            .header("PAYMENT-SIGNATURE", &header)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 405, "{method}");
        assert!(resp.headers().get("payment-required").is_none(), "{method}");
    }
    let head = server
        .client
        .head(&url)
        .header("PAYMENT-SIGNATURE", &header)
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 402, "HEAD learns the price");
    assert!(head.headers().get("payment-required").is_some());
    // Nothing was settled or spent: the same payment buys the article with GET.
    assert!(settlement_rows(&server, "settled", None).await.is_empty());
    let resp = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(settlement_rows(&server, "settled", None).await.len(), 1);
}

/// A facilitator whose `/settle` never answers the first `hang` calls, then settles with `TX`.
pub(crate) async fn flaky_facilitator(hang: usize) -> (String, Arc<AtomicUsize>) {
    stub_facilitator_hanging(
        json!({"success": true, "transaction": TX, "network": "eip155:84532"}),
        hang,
    )
    .await
}

/// A server settling through `facilitator` (settle timeout 1 s), a signed payment for [`ARTICLE`] and its URL.
async fn pending_purchase_setup(facilitator: String) -> (TestServer, String, String) {
    let server = TestServer::start_with(|c| {
        c.payment.facilitator_url = Some(facilitator);
        c.payment.facilitator_settle_timeout_secs = 1;
    })
    .await;
    let (required, _) = offer(&server, ARTICLE).await;
    let header = Payer::new().pay_v2(&required);
    let url = server.url(&format!("/x402Article?articleId={ARTICLE}"));
    (server, header, url)
}

pub(crate) const TX: &str = "0x3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b3b";

#[tokio::test]
async fn an_unknown_outcome_is_pending_then_the_resend_reconciles_and_delivers() {
    let (facilitator, calls) = flaky_facilitator(1).await;
    let (server, header, url) = pending_purchase_setup(facilitator).await;
    let pending = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(pending.status(), 402);
    assert_eq!(
        decode_header(&pending, "payment-response")["errorReason"],
        "settlement_pending"
    );
    let rows = settlement_rows(&server, "unknown", None).await;
    assert_eq!(rows.len(), 1);
    // The identical payment again: reconciled with the facilitator (which now knows), delivered.
    let resp = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(decode_header(&resp, "payment-response")["transaction"], TX);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // The settlement log shows the transition: one row, now settled, resolved from unknown.
    assert!(settlement_rows(&server, "unknown", None).await.is_empty());
    let settled = settlement_rows(&server, "settled", None).await;
    assert_eq!(settled.len(), 1, "{settled:?}");
    assert_eq!(settled[0]["id"], rows[0]["id"]);
    assert_eq!(settled[0]["transaction"], TX);
    assert_eq!(settled[0]["resolved_from"], "unknown");
    assert!(settled[0]["resolved_at"].is_string());
    assert_eq!(server.state.licensing.count_receipts().await.unwrap(), 1);
    // One signed receipt for this payment: the header's is the body's, and a later resend (another second
    // of the clock) answers the same one.
    one_receipt_on_every_resend(&server, &url, &header, resp).await;
}

/// The signed receipt of `first` (a 200 for `header`) in its `PAYMENT-RESPONSE` is the one of its body, and
/// a resend a second later answers the same in both.
async fn one_receipt_on_every_resend(
    server: &TestServer,
    url: &str,
    header: &str,
    first: reqwest::Response,
) {
    let in_header = signed_receipt(&decode_header(&first, "payment-response"));
    assert!(in_header["signature"].is_string(), "{in_header}");
    let body: Value = first.json().await.unwrap();
    assert_eq!(body["receipt"]["signed"], in_header);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let again = server.get_with(url, "PAYMENT-SIGNATURE", header).await;
    assert_eq!(again.status(), 200);
    assert_eq!(
        signed_receipt(&decode_header(&again, "payment-response")),
        in_header
    );
    let body: Value = again.json().await.unwrap();
    assert_eq!(body["receipt"]["signed"], in_header);
}

#[tokio::test]
async fn the_background_reconciler_resolves_an_unknown_outcome_without_a_resend() {
    let (facilitator, _) = flaky_facilitator(1).await;
    let (server, header, url) = pending_purchase_setup(facilitator).await;
    assert_eq!(
        server
            .get_with(&url, "PAYMENT-SIGNATURE", &header)
            .await
            .status(),
        402
    );
    let report = server
        .state
        .payments
        .engine()
        .reconcile_unresolved(10)
        .await
        .unwrap();
    assert_eq!((report.examined, report.settled), (1, 1));
    let settled = settlement_rows(&server, "settled", None).await;
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0]["resolved_from"], "unknown");
    // The buyer's resend is then delivered from the record.
    let resp = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(resp.status(), 200);
    // The record has no receipt (the reconciler serves no route): signed on delivery, the same every time.
    one_receipt_on_every_resend(&server, &url, &header, resp).await;
}

/// The facilitator request for a payment of `required` (a v2 PaymentRequired).
fn facilitator_body(header: &str) -> Value {
    let payload: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(header)
            .unwrap(),
    )
    .unwrap();
    json!({"x402Version": 2, "paymentRequirements": payload["accepted"].clone(), "paymentPayload": payload})
}

#[tokio::test]
async fn the_facilitator_is_off_without_a_token_and_shares_the_paid_routes_engine() {
    let off = TestServer::start().await;
    let resp = off
        .client
        .post(off.url("/facilitator/settle"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(json_body(resp).await["code"], "facilitator_disabled");

    let server =
        TestServer::start_with(|c| c.facilitator.facilitator_token = Some("fac-token".into()))
            .await;
    let post = |path: &str, auth: Option<&str>, body: &Value| {
        let mut r = server.client.post(server.url(path)).json(body);
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        r.send()
    };
    let (required, _) = offer(&server, ARTICLE).await;
    let header = Payer::new().pay_v2(&required);
    let body = facilitator_body(&header);
    for auth in [None, Some("Bearer nope"), Some("token fac-token")] {
        let resp = post("/facilitator/settle", auth, &body).await.unwrap();
        assert_eq!(resp.status(), 401, "{auth:?}");
    }
    let settled = json_body(
        post("/facilitator/settle", Some("Bearer fac-token"), &body)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(settled["success"], true, "{settled}");
    // Settled through the facilitator door: refused at the paid route, before anything is settled again.
    let url = server.url(&format!("/x402Article?articleId={ARTICLE}"));
    let resp = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(resp.status(), 402);
    assert_eq!(
        json_body(resp).await["error"],
        "invalid_exact_evm_nonce_already_used"
    );
    // The other way round: bought at the paid route, refused by /facilitator/settle.
    let header = Payer::new().pay_v2(&required);
    assert_eq!(
        server
            .get_with(&url, "PAYMENT-SIGNATURE", &header)
            .await
            .status(),
        200
    );
    let again = json_body(
        post(
            "/facilitator/settle",
            Some("Bearer fac-token"),
            &facilitator_body(&header),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(
        again["errorReason"], "invalid_exact_evm_nonce_already_used",
        "{again}"
    );
}

#[tokio::test]
async fn a_facilitator_flood_with_caller_chosen_terms_cannot_block_a_purchase() {
    // Without the token nothing is stored; with it, validBefore is capped by the facilitator's own limit.
    let server =
        TestServer::start_with(|c| c.facilitator.facilitator_token = Some("fac-token".into()))
            .await;
    let (required, _) = offer(&server, ARTICLE).await;
    let mut accepted = required["accepts"][0].clone();
    accepted["maxTimeoutSeconds"] = json!(u64::MAX / 2);
    let payer = Payer::random();
    let mut refused = 0;
    for _ in 0..200 {
        let payload = payer.sign(&accepted, "50000", 0, now() + 1_000_000_000, random_nonce());
        let body = json!({"x402Version": 2, "paymentRequirements": accepted,
            "paymentPayload": {"x402Version": 2, "accepted": accepted, "payload": payload}});
        let resp = server
            .client
            .post(server.url("/facilitator/settle"))
            .header("authorization", "Bearer fac-token")
            .json(&body)
            .send()
            .await
            .unwrap();
        let r = json_body(resp).await;
        if r["errorReason"] == "invalid_exact_evm_payload_authorization_valid_before" {
            refused += 1;
        }
    }
    assert_eq!(refused, 200);
    let url = server.url(&format!("/x402Article?articleId={ARTICLE}"));
    let header = Payer::new().pay_v2(&required);
    assert_eq!(
        server
            .get_with(&url, "PAYMENT-SIGNATURE", &header)
            .await
            .status(),
        200
    );
}

/// A `reference-server` process on `db`, reachable at its own port, all with one public URL.
/// The operator token every [`Instance`] gets (unless its flags name another).
pub(crate) const OPERATOR_TOKEN: &str = "it-operator-token";

pub(crate) struct Instance {
    pub(crate) child: std::process::Child,
    pub(crate) base: String,
}

impl Instance {
    /// The article's PaymentRequired (v2), from an unpaid request.
    pub(crate) async fn offer(&self, client: &reqwest::Client) -> Value {
        let resp = client
            .get(format!("{}/x402Article?articleId={ARTICLE}", self.base))
            .send()
            .await
            .unwrap();
        decode_header(&resp, "payment-required")
    }

    /// The operator's settlement log (`/operator/settlements?limit=1000`) as this instance answers it.
    pub(crate) async fn settlements(&self, client: &reqwest::Client) -> Value {
        client
            .get(format!("{}/operator/settlements?limit=1000", self.base))
            .header("authorization", format!("token {OPERATOR_TOKEN}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    fn start(db: &str, media: &std::path::Path) -> Self {
        Self::start_with(db, media, &[])
    }

    /// [`Instance::start`] with more flags.
    pub(crate) fn start_with(db: &str, media: &std::path::Path, flags: &[&str]) -> Self {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_reference-server"))
            .args(["--listen", "127.0.0.1:0"])
            .args(
                ["--seed-assets", "5"]
                    .iter()
                    .filter(|_| !flags.contains(&"--seed-assets")),
            )
            .args(
                ["--api-token", OPERATOR_TOKEN]
                    .iter()
                    .filter(|_| !flags.contains(&"--api-token")),
            )
            .args(flags)
            .args(["--public-url", "http://shop.test"])
            .arg("--database")
            .arg(db)
            .arg("--media-dir")
            .arg(media)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn binary");
        // Its log, the last lines kept, so that an instance that stops before its banner says why.
        let log = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let kept = log.clone();
        let logging = std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let mut kept = kept.lock().unwrap();
                if kept.len() == 40 {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
        let stdout = child.stdout.take().unwrap();
        let mut lines = std::io::BufReader::new(stdout).lines();
        let Some(first) = lines.next() else {
            let status = child.wait();
            let _ = logging.join();
            let log: Vec<String> = log.lock().unwrap().iter().cloned().collect();
            panic!(
                "a banner line: the server ended first ({status:?}); its log:\n{}",
                log.join("\n")
            );
        };
        let first = first.expect("utf-8");
        // Keep reading: a closed pipe would kill the server at its next line of output.
        std::thread::spawn(move || lines.for_each(drop));
        let base = banner_url(&first);
        Instance { child, base }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_database_settle_one_payment_once() {
    let dir = TempDir::new();
    let db = fresh_database(dir.path(), "shared.sqlite3").await;
    let media = dir.path().join("media");
    let a = Instance::start(&db, &media);
    let b = Instance::start(&db, &media);
    let client = test_client();
    let path = format!("/x402Article?articleId={ARTICLE}");
    let required = a.offer(&client).await;
    assert_eq!(
        required["resource"]["url"],
        format!("http://shop.test{path}")
    );
    let header = Payer::new().pay_v2(&required);
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let url = format!("{}{path}", if i % 2 == 0 { &a.base } else { &b.base });
            let client = client.clone();
            let header = header.clone();
            tokio::spawn(async move {
                let resp = client
                    .get(url)
                    .header("PAYMENT-SIGNATURE", header)
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                let receipt = (status == 200).then(|| json_body(resp));
                (
                    status,
                    match receipt {
                        Some(f) => Some(f.await),
                        None => None,
                    },
                )
            })
        })
        .collect();
    let mut delivered = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            (200, Some(body)) => delivered.push(body["receipt"].clone()),
            (402, _) => {}
            (status, _) => panic!("unexpected {status}"),
        }
    }
    assert!(!delivered.is_empty());
    assert!(delivered.iter().all(|r| *r == delivered[0]), "one receipt");
    // Exactly one settlement in the shared log, whichever instance is asked.
    let rows = b.settlements(&client).await;
    assert_eq!(rows["totals"]["settled"], 1, "{rows}");
    // A lost-answer resend to the other instance: the same receipt.
    let resp = client
        .get(format!("{}{path}", b.base))
        .header("PAYMENT-SIGNATURE", &header)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(json_body(resp).await["receipt"], delivered[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purchase_answered_before_a_kill_9_keeps_its_receipt_and_payment_record() {
    // Two instances on one database take purchases concurrently (writes in flight) when instance A is killed
    // with SIGKILL. Every purchase either instance answered 200 must have its receipt and its settled record,
    // as instance B (still running) and A after a restart both see: nobody is answered before their write is
    // durable. Every purchase sent and not answered is then resent by its buyer: each ends delivered, and
    // every settlement has exactly one receipt (complete, or absent and made whole by the resend).
    let dir = TempDir::new();
    let db = fresh_database(dir.path(), "crash.sqlite3").await;
    let media = dir.path().join("media");
    // A record A left in flight counts as abandoned after 10 s (not the default 3 minutes).
    let stale = ["--payment-stale-after-secs", "10"];
    let mut a = Instance::start_with(&db, &media, &stale);
    let b = Instance::start_with(&db, &media, &stale);
    let client = test_client();
    let path = format!("/x402Article?articleId={ARTICLE}");
    let required = a.offer(&client).await;
    let payer = Payer::new();
    let headers: Vec<String> = (0..400).map(|_| payer.pay_v2(&required)).collect();
    let answered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let base = if i % 2 == 0 { &a.base } else { &b.base };
            let (client, url) = (client.clone(), format!("{base}{path}"));
            let (headers, next, answered) = (headers.clone(), next.clone(), answered.clone());
            tokio::spawn(async move {
                while let Some(h) = headers.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let Ok(resp) = client.get(&url).header("PAYMENT-SIGNATURE", h).send().await
                    else {
                        return; // the instance is gone
                    };
                    if resp.status() != 200 {
                        continue;
                    }
                    let Ok(body) = resp.json::<Value>().await else {
                        return;
                    };
                    let token = body["receipt"]["nft"]["tokenId"]
                        .as_str()
                        .unwrap()
                        .to_owned();
                    answered.lock().unwrap().push((h.clone(), token));
                }
            })
        })
        .collect();
    // Let some purchases complete, then kill -9 instance A in the middle of the rest.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while answered.lock().unwrap().len() < 40 {
        assert!(
            std::time::Instant::now() < deadline,
            "40 purchases not answered within 2 minutes"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    for t in tasks {
        tokio::time::timeout(std::time::Duration::from_secs(120), t)
            .await
            .expect("the buyers finished within 2 minutes")
            .unwrap();
    }
    let answered = answered.lock().unwrap().clone();
    assert!(answered.len() >= 40);
    drop(a);

    let restarted = Instance::start_with(&db, &media, &stale);
    for server in [&b, &restarted] {
        for (_, token) in &answered {
            let resp = client
                .get(format!("{}/receipts/{token}", server.base))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200, "receipt {token} answered but lost");
        }
    }
    // Every answered purchase also has its settled payment record and settlement row.
    let rows = b.settlements(&client).await;
    let settled = rows["totals"]["settled"].as_u64().unwrap() as usize;
    assert!(
        settled >= answered.len(),
        "{settled} settled rows < {} answered",
        answered.len()
    );
    // The buyers resend, to either instance: the same receipts, no settlement anew.
    for (i, (header, token)) in answered.iter().take(20).enumerate() {
        let server = if i % 2 == 0 { &b } else { &restarted };
        let resp = client
            .get(format!("{}/x402Article?articleId={ARTICLE}", server.base))
            .header("PAYMENT-SIGNATURE", header)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(
            json_body(resp).await["receipt"]["nft"]["tokenId"],
            token.as_str()
        );
    }
    let after = restarted.settlements(&client).await;
    assert_eq!(after["totals"]["settled"], rows["totals"]["settled"]);

    // Every purchase that was sent and not answered (A died under it, or its buyer stopped) is resent: it
    // is delivered, whatever A had done of it (told to come back while A's record of it is not yet stale).
    let sent = next.load(Ordering::SeqCst).min(headers.len());
    let unanswered: Vec<&String> = headers[..sent]
        .iter()
        .filter(|h| !answered.iter().any(|(a, _)| a == *h))
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    for (i, header) in unanswered.iter().enumerate() {
        let server = if i % 2 == 0 { &b } else { &restarted };
        loop {
            let resp = client
                .get(format!("{}/x402Article?articleId={ARTICLE}", server.base))
                .header("PAYMENT-SIGNATURE", header.as_str())
                .send()
                .await
                .unwrap();
            if resp.status() == 200 {
                break;
            }
            let status = resp.status();
            let answer = json_body(resp).await;
            assert!(
                status == 402 && answer["error"] == "settlement_pending",
                "an unanswered purchase resent: {status} {answer}"
            );
            assert!(
                std::time::Instant::now() < deadline,
                "an unanswered purchase still pending after 2 minutes"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
    // One receipt per settlement, one settlement per purchase delivered.
    let totals = restarted.settlements(&client).await["totals"]["settled"]
        .as_u64()
        .unwrap() as usize;
    assert_eq!(totals, answered.len() + unanswered.len(), "{sent} sent");
    let receipts = Stores::open(&db.parse().unwrap())
        .await
        .unwrap()
        .licensing
        .count_receipts()
        .await
        .unwrap() as usize;
    assert_eq!(receipts, totals);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_settled_through_one_instances_facilitator_is_settled_for_every_instance_even_after_a_kill_9()
 {
    let dir = TempDir::new();
    let db = fresh_database(dir.path(), "shared.sqlite3").await;
    let media = dir.path().join("media");
    let flags = ["--facilitator-token", "fac-token"];
    let mut a = Instance::start_with(&db, &media, &flags);
    let b = Instance::start_with(&db, &media, &flags);
    let client = test_client();
    let required = a.offer(&client).await;
    let header = Payer::new().pay_v2(&required);
    let body = facilitator_body(&header);
    let settle = |base: &str| {
        client
            .post(format!("{base}/facilitator/settle"))
            .header("authorization", "Bearer fac-token")
            .json(&body)
            .send()
    };
    let settled = json_body(settle(&a.base).await.unwrap()).await;
    assert_eq!(settled["success"], true, "{settled}");
    // Instance A dies hard right after answering.
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    // On the other instance: the paid route refuses it, the identical facilitator request gets the same
    // settlement (not a second one).
    let resp = client
        .get(format!("{}/x402Article?articleId={ARTICLE}", b.base))
        .header("PAYMENT-SIGNATURE", &header)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 402);
    assert_eq!(
        json_body(resp).await["error"],
        "invalid_exact_evm_nonce_already_used"
    );
    assert_eq!(json_body(settle(&b.base).await.unwrap()).await, settled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_starting_together_on_an_empty_database_migrate_and_seed_it_once() {
    // The processes are started before any is listening: migrations and seeding race (PostgreSQL:
    // advisory locks, from the creation of `schema_migrations` on; SQLite: the first seed chunk's write
    // transaction holds the emptiness check). Four rather than two: with two, the race on creating
    // `schema_migrations` (fixed: it failed one start in ~50 with 42710) showed too rarely to be caught.
    let dir = TempDir::new();
    let db = fresh_database(dir.path(), "together.sqlite3").await;
    let media = dir.path().join("media");
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let (db, media) = (db.clone(), media.clone());
            std::thread::spawn(move || {
                Instance::start_with(&db, &media, &["--seed-assets", "3000"])
            })
        })
        .collect();
    let instances: Vec<Instance> = starts.into_iter().map(|t| t.join().unwrap()).collect();
    let client = test_client();
    for instance in &instances {
        let page: Value = client
            .get(format!("{}/api/v3/assets/?limit=1", instance.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(page["count"], 3000, "seeded once, not twice");
        let catalog: Value = client
            .get(format!("{}/x402Article/list", instance.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            catalog.as_array().unwrap().len(),
            12,
            "the demo catalog once"
        );
    }
}

/// Sign-in-with-x across instances sharing the URL signing key (the key of the sign-in nonces): a nonce
/// issued by one instance is honoured by the other, and the same proof sent to both at once lets exactly one
/// copy in. On both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_nonce_issued_by_one_instance_works_once_on_any_instance() {
    use x402_tower::client::{PaymentPolicy, Requirements};
    let dir = TempDir::new();
    let db = fresh_database(dir.path(), "siwx.sqlite3").await;
    let media = dir.path().join("media");
    let flags = ["--url-signing-key", "one signing key for every instance"];
    let a = Instance::start_with(&db, &media, &flags);
    let b = Instance::start_with(&db, &media, &flags);
    let client = test_client();
    let path = format!("/x402Article?articleId={ARTICLE}");
    let bought = client
        .get(format!("{}{path}", a.base))
        .header(
            "PAYMENT-SIGNATURE",
            Payer::new().pay_v2(&a.offer(&client).await),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(bought.status(), 200);
    let bought = json_body(bought).await;

    let signer: alloy_signer_local::PrivateKeySigner = crate::common::PAYER_KEY.parse().unwrap();
    let payer = x402_tower::client::Payer::new(
        signer,
        PaymentPolicy::new(x402_tower::Price::from_usdc_decimal("1").unwrap()),
    );
    let proof_from = async |instance: &Instance| {
        let reqs = Requirements::from_document(&instance.offer(&client).await).unwrap();
        payer.sign_in(&reqs).await.expect("sign-in-with-x declared")
    };
    // Issued by A, used on B.
    let proof = proof_from(&a).await;
    let read = client
        .get(format!("{}{path}", b.base))
        .header("SIGN-IN-WITH-X", &proof)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    assert_eq!(
        json_body(read).await,
        bought,
        "the same article and receipt"
    );

    // One proof issued by B, eight copies at once on both instances: one gets in.
    let proof = proof_from(&b).await;
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let url = format!("{}{path}", if i % 2 == 0 { &a.base } else { &b.base });
            let (client, proof) = (client.clone(), proof.clone());
            tokio::spawn(async move {
                let resp = client
                    .get(url)
                    .header("SIGN-IN-WITH-X", proof)
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                (status, json_body(resp).await)
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        let (status, body) = t.await.unwrap();
        if status == 200 {
            admitted += 1;
        } else {
            assert_eq!(
                (status, body["error"].as_str()),
                (402, Some("siwx_invalid_nonce")),
                "{body}"
            );
        }
    }
    assert_eq!(admitted, 1, "a nonce is used once, whichever instance");
}

/// The signed receipt in a settlement's `offer-receipt` extension.
pub(crate) fn signed_receipt(settlement: &Value) -> Value {
    settlement["extensions"]["offer-receipt"]["info"]["receipt"].clone()
}

#[tokio::test]
async fn the_stale_after_flag_reaches_the_engine_raised_to_the_settlers_longest_wait() {
    let verify_only = TestServer::start_with(|c| c.payment.payment_stale_after_secs = 10).await;
    assert_eq!(
        verify_only.state.payments.engine().stale_after(),
        std::time::Duration::from_secs(10)
    );
    let (facilitator, _) = flaky_facilitator(0).await;
    let facilitated = TestServer::start_with(|c| {
        c.payment.payment_stale_after_secs = 10;
        c.payment.facilitator_url = Some(facilitator);
        c.payment.facilitator_settle_timeout_secs = 3;
    })
    .await;
    assert_eq!(
        facilitated.state.payments.engine().stale_after(),
        std::time::Duration::from_secs(63)
    );
    let mut config = reference_server::Config::for_tests();
    for refused in [0, 9, 86_401] {
        config.payment.payment_stale_after_secs = refused;
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("payment-stale-after-secs"), "{refused}: {err}");
    }
}
