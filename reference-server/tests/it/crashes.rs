//! Crashes: an instance killed (SIGKILL) while a settlement is under way or recorded without its receipt,
//! and what its restart and the other instances make of the payment. The longest tests of the suite (a record
//! left in flight is taken over only once stale): first in the suite's order, so the rest runs beside them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::*;
use crate::licensing::json as json_body;
use crate::payments::{ARTICLE, Instance, TX, flaky_facilitator, signed_receipt};

/// Two instances (A and B) on one fresh database, settling through a facilitator that never answers its
/// first `/settle` (waited for `settle_timeout` seconds), with one receipt key and `more` flags; the
/// article's v2 payment of a new payer.
struct FlakyPair {
    a: Instance,
    b: Instance,
    calls: Arc<AtomicUsize>,
    flags: Vec<String>,
    db: String,
    media: std::path::PathBuf,
    client: reqwest::Client,
    header: String,
    _dir: TempDir,
}

impl FlakyPair {
    async fn start(settle_timeout: &str, more: &[&str]) -> Self {
        const KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
        let (facilitator, calls) = flaky_facilitator(1).await;
        let dir = TempDir::new();
        let db = fresh_database(dir.path(), "flaky.sqlite3").await;
        let media = dir.path().join("media");
        let flags: Vec<String> = [
            "--facilitator-url",
            &facilitator,
            "--facilitator-settle-timeout-secs",
            settle_timeout,
            "--receipt-signing-key",
            KEY,
        ]
        .iter()
        .chain(more)
        .map(|f| f.to_string())
        .collect();
        let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
        let a = Instance::start_with(&db, &media, &flag_refs);
        let b = Instance::start_with(&db, &media, &flag_refs);
        let client = test_client();
        let header = Payer::new().pay_v2(&a.offer(&client).await);
        FlakyPair {
            a,
            b,
            calls,
            flags,
            db,
            media,
            client,
            header,
            _dir: dir,
        }
    }

    /// Kills A with SIGKILL and starts another instance with the same flags on the same database.
    fn kill_a_and_restart(&mut self) -> Instance {
        self.a.child.kill().unwrap();
        self.a.child.wait().unwrap();
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        Instance::start_with(&self.db, &self.media, &flags)
    }

    /// The payment sent to the instance at `base`.
    fn buy(
        &self,
        base: &str,
    ) -> impl Future<Output = reqwest::Result<reqwest::Response>> + 'static {
        self.client
            .get(format!("{base}/x402Article?articleId={ARTICLE}"))
            .header("PAYMENT-SIGNATURE", &self.header)
            .send()
    }

    /// The facilitator's `/settle` calls so far.
    fn settle_calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_payment_left_by_a_kill_9_is_settled_at_restart_and_every_instance_answers_one_receipt()
 {
    // The crash path of a settlement recorded without its receipt: instance A answers `settlement_pending`
    // (the facilitator did not answer in time) and dies with SIGKILL. The restarted instance's reconciler
    // settles the pending record at start; it serves no route, so the record carries no receipt. The buyer's
    // resends, to the restarted instance and to instance B that ran all along, are delivered with one signed
    // receipt (one key on both), dated when the settlement was recorded, and nothing is settled again.
    let mut pair = FlakyPair::start("1", &[]).await;
    let pending = pair.buy(&pair.a.base).await.unwrap();
    assert_eq!(pending.status(), 402);
    assert_eq!(
        decode_header(&pending, "payment-response")["errorReason"],
        "settlement_pending"
    );
    assert_eq!(pair.settle_calls(), 1);

    // Restarted: its reconciler's first pass (at start) asks the facilitator again, which now settles.
    let restarted = pair.kill_a_and_restart();
    let settled_totals = || async {
        pair.b.settlements(&pair.client).await["totals"]["settled"]
            .as_u64()
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while settled_totals().await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the restarted instance did not reconcile the pending payment"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let recorded_by = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(pair.settle_calls(), 2);
    // A second later (a receipt signed on delivery would carry the delivery's time), the resends.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let mut receipts = Vec::new();
    for base in [&pair.b.base, &restarted.base, &pair.b.base, &restarted.base] {
        let resp = pair.buy(base).await.unwrap();
        assert_eq!(resp.status(), 200);
        let settlement = decode_header(&resp, "payment-response");
        assert_eq!(settlement["transaction"], TX);
        let in_header = signed_receipt(&settlement);
        let body = json_body(resp).await;
        assert_eq!(body["receipt"]["signed"], in_header, "header and body");
        receipts.push(in_header);
    }
    let first = &receipts[0];
    assert!(first["signature"].is_string(), "{first}");
    assert!(
        receipts.iter().all(|r| r == first),
        "one receipt on every instance: {receipts:?}"
    );
    let issued = first["payload"]["issuedAt"].as_u64().unwrap();
    assert!(
        issued <= recorded_by,
        "issuedAt {issued} after the record ({recorded_by})"
    );
    // Nothing was settled again, and the shared log shows one settlement.
    assert_eq!(pair.settle_calls(), 2);
    assert_eq!(settled_totals().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_in_flight_when_its_instance_is_killed_is_reconciled_once_stale_and_delivered_once()
 {
    // Instance A is killed with SIGKILL while the facilitator's `/settle` for a payment is under way (the
    // facilitator never answers that call): the buyer's request dies with it, and the payment's record
    // stays `in_flight`. Until it is stale (the settle timeout plus a minute: 63 s here), a resend to
    // instance B waits for it and answers `settlement_pending`, asking the facilitator nothing. Once it
    // is stale, a resend to the restarted A (or its reconciler, whichever comes first) reconciles it with
    // the facilitator, which settles it now: delivered, with one signed receipt on both instances, one
    // settlement recorded and the facilitator asked exactly twice.
    let mut pair = FlakyPair::start("3", &["--payment-stale-after-secs", "10"]).await;
    let dying = tokio::spawn(pair.buy(&pair.a.base));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while pair.settle_calls() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "A never asked /settle"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let restarted = pair.kill_a_and_restart();
    assert!(
        dying.await.unwrap().is_err(),
        "the buyer's connection died with A"
    );

    // Not stale yet: B waits for the in-flight payment, then answers settlement_pending.
    let pending = pair.buy(&pair.b.base).await.unwrap();
    assert_eq!(pending.status(), 402);
    assert_eq!(
        decode_header(&pending, "payment-response")["errorReason"],
        "settlement_pending"
    );
    assert_eq!(pair.settle_calls(), 1, "nothing asked while in flight");

    // Stale after 63 s: the buyer keeps resending, a copy to the restarted instance and one to B at the
    // same time, until it is delivered. Whichever claims the stale record reconciles it; the other copy
    // waits for that record and answers the same.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let (delivered, copy) = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the payment was never reconciled"
        );
        let (resp, copy) = tokio::join!(pair.buy(&restarted.base), pair.buy(&pair.b.base));
        let (resp, copy) = (resp.unwrap(), copy.unwrap());
        if resp.status() == 200 || copy.status() == 200 {
            break (resp, copy);
        }
        for r in [&resp, &copy] {
            assert_eq!(r.status(), 402);
            assert_eq!(
                decode_header(r, "payment-response")["errorReason"],
                "settlement_pending"
            );
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    };
    assert_eq!(
        delivered.status(),
        200,
        "the copy on the restarted instance"
    );
    assert_eq!(copy.status(), 200, "the concurrent copy on B");
    assert_eq!(
        decode_header(&copy, "payment-response"),
        decode_header(&delivered, "payment-response")
    );
    let settlement = decode_header(&delivered, "payment-response");
    assert_eq!(settlement["transaction"], TX);
    let receipt = signed_receipt(&settlement);
    assert!(receipt["signature"].is_string(), "{settlement}");
    assert_eq!(json_body(delivered).await["receipt"]["signed"], receipt);
    // B answers the same settlement and receipt; nothing was settled again.
    let again = pair.buy(&pair.b.base).await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(decode_header(&again, "payment-response"), settlement);
    assert_eq!(pair.settle_calls(), 2);
    let log = pair.b.settlements(&pair.client).await;
    assert_eq!(log["totals"]["settled"], 1, "{log}");
}
