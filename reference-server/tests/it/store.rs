//! The store traits' contract, checked on the backend of the pass (SQLite, or PostgreSQL when
//! `REFERENCE_SERVER_TEST_POSTGRES` is set): what the handlers rely on, whichever database is behind them.

use std::sync::Arc;

use alloy_primitives::{Address, B256};
use reference_server::domain::license::License;
use reference_server::domain::{Article, Receipt};
use reference_server::store::assets::{FileSource, NewAsset};
use reference_server::store::licensing::{
    DailyInterest, DailyPurchases, LlmsTxtInterest, UserAgentCount,
};
use reference_server::store::settlements::{SettlementOutcome, SettlementRecord};
use reference_server::store::{StoreError, Stores};
use x402_tower::proto::SettleResponse;
use x402_tower::store::{
    IdBinding, IdClaim, PaymentKey, PaymentRecord, PaymentState, Reservation, StoredPayment,
};

use crate::common::*;

async fn stores(dir: &TempDir) -> Stores {
    let url = fresh_database(dir.path(), "store.sqlite3").await;
    Stores::open(&url.parse().unwrap()).await.unwrap()
}

/// Two handles (two pools, as two instances have) on one fresh database.
async fn two_instances(dir: &TempDir, name: &str) -> (Stores, Stores) {
    let url: reference_server::store::DatabaseUrl =
        fresh_database(dir.path(), name).await.parse().unwrap();
    (
        Stores::open(&url).await.unwrap(),
        Stores::open(&url).await.unwrap(),
    )
}

fn asset(cid: &str, us: i64) -> NewAsset {
    NewAsset {
        cid: cid.into(),
        uuid: format!("u-{cid}"),
        uploaded_us: us,
        source: FileSource::Seed(0),
        file_name: "f".into(),
        mime: "image/jpeg".into(),
        size: 1,
        proof_hash: "00".into(),
        template: cid.as_bytes().to_vec(),
    }
}

#[tokio::test]
async fn assets_list_newest_first_with_id_tie_break_and_positions_stay_dense() {
    let dir = TempDir::new();
    let s = stores(&dir).await.assets;
    // Out of order: an upload older than the newest shifts the later positions.
    for (cid, us) in [
        ("a", 10),
        ("b", 30),
        ("c", 20),
        ("d", 30),
        ("e", 5),
        ("f", 40),
    ] {
        s.insert(asset(cid, us)).await.unwrap();
    }
    let page = |offset, limit| {
        let s = s.clone();
        async move {
            let p = s.page(offset, limit).await.unwrap();
            let cids: Vec<String> = p
                .rows
                .iter()
                .map(|(_, t)| String::from_utf8(t.to_vec()).unwrap())
                .collect();
            (p.count, cids)
        }
    };
    assert_eq!(
        page(0, 100).await,
        (6, ["f", "d", "b", "c", "a", "e"].map(String::from).to_vec())
    );
    assert_eq!(page(2, 3).await.1, ["b", "c", "a"]);
    assert!(page(6, 3).await.1.is_empty());
    assert_eq!(page(u64::MAX, u64::MAX).await, (6, vec![]));
    assert_eq!(page(5, u64::MAX).await.1, ["e"]);
    assert_eq!(s.count().await.unwrap(), 6);
    let dup = s.insert(asset("a", 99)).await.unwrap_err();
    assert!(matches!(dup, StoreError::Conflict(_)), "{dup:?}");
    assert_eq!(
        s.file("c".into()).await.unwrap().source,
        FileSource::Seed(0)
    );
    assert!(matches!(
        s.file("zz".into()).await,
        Err(StoreError::NotFound)
    ));
    assert!(s.exists("d".into()).await.unwrap());
    assert!(!s.exists("zz".into()).await.unwrap());
    let (id, tpl) = s.template("b".into()).await.unwrap();
    assert_eq!(tpl, b"b");
    assert!(page(0, 100).await.1.contains(&"b".to_owned()) && id > 0);
}

fn article(id: &str, published: bool) -> Article {
    Article {
        id: id.into(),
        title: format!("Title {id}"),
        excerpt: "e".into(),
        content: "c".into(),
        author_name: "a".into(),
        published_date: "2025-01-02".into(),
        price_atomic: 10_000,
        published,
        // Article "b" is sold under two licenses of its own (stored as JSON, read back as written).
        licenses: if id == "b" {
            vec![
                License {
                    id: "inference".into(),
                    permits: vec!["search".into(), "ai-input".into()],
                    prohibits: vec!["ai-train".into()],
                    users: vec![],
                    price_atomic: 10_000,
                },
                License {
                    id: "training".into(),
                    permits: vec!["ai-train".into()],
                    prohibits: vec![],
                    users: vec!["education".into()],
                    price_atomic: 90_000,
                },
            ]
        } else {
            Vec::new()
        },
    }
}

/// The token id of the payment with `nonce` (the other fields of [`receipt`], valid before 2026-12-01).
fn token(nonce: &str) -> String {
    reference_server::domain::token::token_id("eip155:84532", "0x3", "0x1", nonce, 1_764_547_200)
}

/// The receipt of the payment with `nonce` (its token id derived from the payment, as a store requires).
fn receipt(nonce: &str) -> Receipt {
    Receipt {
        token_id: token(nonce),
        article_id: "a".into(),
        payer: "0x1".into(),
        pay_to: "0x2".into(),
        amount_atomic: "10000".into(),
        network: "eip155:84532".into(),
        asset: "0x3".into(),
        nonce: nonce.into(),
        x402_version: 2,
        settlement: "verify-only".into(),
        created_at: "2025-01-01T00:00:00Z".into(),
        signed: Some(r#"{"format":"eip712"}"#.into()),
        license_id: Some("inference".into()),
        license_version: Some("0123456789abcdef".into()),
        agent: (nonce == "0xaa").then(|| "https://crawler.example".into()),
    }
}

/// A receipt issued before token ids led with `validBefore` keeps its id (the whole hash of the payment):
/// a store accepts it as its payment's (a migration moves such receipts) and finds it by it.
#[tokio::test]
async fn a_receipt_with_a_legacy_token_id_is_accepted_and_found() {
    use reference_server::domain::token::legacy_token_id;

    let dir = TempDir::new();
    let s = stores(&dir).await.licensing;
    s.insert_articles(vec![article("a", true)]).await.unwrap();
    let mut legacy = receipt("0xcc");
    legacy.token_id = legacy_token_id("eip155:84532", "0x3", "0x1", "0xcc");
    s.insert_receipt(legacy.clone().into()).await.unwrap();
    assert_eq!(
        s.receipt(&legacy.token_id).await.unwrap(),
        Some(legacy.clone())
    );
    let e = s.insert_receipt(legacy.into()).await.unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e:?}");
    s.insert_receipt(receipt("0xdd").into()).await.unwrap();
    assert_eq!(s.count_receipts().await.unwrap(), 2);
}

#[tokio::test]
async fn articles_receipts_and_llms_txt_interest_round_trip() {
    let dir = TempDir::new();
    let s = stores(&dir).await.licensing;
    assert_eq!(
        s.insert_articles(vec![article("a", true), article("b", false)])
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        s.insert_articles(vec![article("a", true)]).await.unwrap(),
        0,
        "existing ids are left alone"
    );
    let published = s.list_published().await.unwrap();
    assert_eq!(published, vec![article("a", true)]);
    assert_eq!(s.article("b").await.unwrap(), Some(article("b", false)));
    assert_eq!(s.count_articles().await.unwrap(), 2);

    s.insert_receipt(receipt("0xaa").into()).await.unwrap();
    assert_eq!(
        s.receipt(&token("0xaa")).await.unwrap(),
        Some(receipt("0xaa"))
    );
    assert_eq!(s.receipt(&token("0xbb")).await.unwrap(), None);
    // The same payment again (its nonce in another case: the token id is the same), refused.
    let mut again = receipt("0xAA");
    again.article_id = "b".into();
    let e = s.insert_receipt(again.into()).await.unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e:?}");
    // A token id that is not the payment's (a second id for the same payment), refused before writing.
    let mut forged = receipt("0xaa");
    forged.token_id = token("0xbb");
    let e = s.insert_receipt(forged.into()).await.unwrap_err();
    assert!(matches!(e, StoreError::Invalid(_)), "{e:?}");
    assert_eq!(s.count_receipts().await.unwrap(), 1);

    let minute = |m: u32, ua: &str, client: &str, n: u64| LlmsTxtInterest {
        bucket: format!("2026-11-23T05:{m:02}:00Z"),
        user_agent: ua.into(),
        client_addr: client.into(),
        agent: if ua == "y" {
            "https://crawler.example".into()
        } else {
            String::new()
        },
        count: n,
    };
    s.add_llms_txt_interest(vec![
        minute(1, "x", "10.0.0.1", 1),
        minute(1, "y", "10.0.0.2", 1),
    ])
    .await
    .unwrap();
    s.add_llms_txt_interest(vec![
        minute(1, "x", "10.0.0.1", 1),
        minute(3, "x", "10.0.0.1", 4),
    ])
    .await
    .unwrap();
    let stats = s.llms_txt_stats().await.unwrap();
    assert_eq!((stats.total, stats.distinct_clients), (7, 2));
    assert_eq!(
        stats.by_user_agent,
        vec![
            UserAgentCount {
                user_agent: "x".into(),
                count: 6
            },
            UserAgentCount {
                user_agent: "y".into(),
                count: 1
            }
        ]
    );
    assert_eq!(
        stats.recent[0],
        minute(3, "x", "10.0.0.1", 4),
        "newest minute first"
    );
    assert_eq!(
        stats.recent[1],
        minute(1, "x", "10.0.0.1", 2),
        "same key adds up"
    );
    assert_eq!(
        s.purge_llms_txt_interest("2026-11-23T05:02:00Z".into())
            .await
            .unwrap(),
        2
    );
    assert_eq!(s.llms_txt_stats().await.unwrap().total, 4);

    // The operator's licensing view: purchases per day, agent and license; interest per day and agent.
    s.add_llms_txt_interest(vec![minute(30, "y", "10.0.0.2", 5)])
        .await
        .unwrap();
    let (purchases, interest) = s.licensing_activity("2025-01-01".into()).await.unwrap();
    assert_eq!(
        purchases,
        vec![DailyPurchases {
            day: "2025-01-01".into(),
            agent: "https://crawler.example".into(),
            article_id: "a".into(),
            license_id: "inference".into(),
            purchases: 1,
            amount_atomic: 10_000,
        }]
    );
    assert!(interest.contains(&DailyInterest {
        day: "2026-11-23".into(),
        agent: "https://crawler.example".into(),
        requests: 5,
    }));
    let (later, _) = s.licensing_activity("2025-01-02".into()).await.unwrap();
    assert!(later.is_empty(), "since a day after the only receipt");
}

fn settlement(outcome: SettlementOutcome, nonce: &str) -> SettlementRecord {
    SettlementRecord {
        id: 0,
        at: "2026-01-01T00:00:00.000000Z".into(),
        outcome,
        payer: "0x1".into(),
        pay_to: "0x2".into(),
        article_id: Some("a".into()),
        resource: "http://x/x402Article?articleId=a".into(),
        amount_atomic: "10000".into(),
        network: "eip155:84532".into(),
        asset: "0x3".into(),
        nonce: nonce.into(),
        x402_version: 2,
        transaction: (outcome == SettlementOutcome::Settled).then(|| "0xab".into()),
        reason: (outcome == SettlementOutcome::Failed).then(|| "insufficient_funds".into()),
        message: (outcome == SettlementOutcome::Unknown).then(|| "timed out".into()),
        resolved_from: None,
        resolved_at: None,
        agent: None,
    }
}

#[tokio::test]
async fn the_settlement_log_filters_counts_and_resolves_unknown_outcomes() {
    let dir = TempDir::new();
    let s = stores(&dir).await.settlements;
    for (i, o) in SettlementOutcome::ALL.into_iter().enumerate() {
        s.record(settlement(o, &format!("0x{i}"))).await.unwrap();
    }
    s.record(settlement(SettlementOutcome::Unknown, "0x9"))
        .await
        .unwrap();
    let all = s.recent(None, 10).await.unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(all[0].nonce, "0x9", "newest first");
    let unknown = s
        .recent(Some(SettlementOutcome::Unknown), 10)
        .await
        .unwrap();
    assert_eq!(unknown.len(), 2);
    let failed = s.recent(Some(SettlementOutcome::Failed), 10).await.unwrap();
    let mut expected = settlement(SettlementOutcome::Failed, "0x1");
    expected.id = failed[0].id;
    assert_eq!(failed, vec![expected]);
    assert_eq!(s.recent(None, 1).await.unwrap().len(), 1);
    assert_eq!(
        s.count_by_outcome().await.unwrap(),
        [
            (SettlementOutcome::Settled, 1),
            (SettlementOutcome::Failed, 1),
            (SettlementOutcome::Unknown, 2)
        ]
    );
    // Still unknown: nothing changes. Found settled: the unknown row takes it. No unknown row: a new one.
    assert_eq!(
        s.resolve(settlement(SettlementOutcome::Unknown, "0x9"))
            .await
            .unwrap(),
        None
    );
    let row = s
        .resolve(settlement(SettlementOutcome::Settled, "0x9"))
        .await
        .unwrap()
        .unwrap();
    let resolved = s.recent(None, 10).await.unwrap();
    let r = resolved.iter().find(|r| r.id == row).unwrap();
    assert_eq!(
        (
            r.outcome,
            r.resolved_from.as_deref(),
            r.transaction.as_deref()
        ),
        (SettlementOutcome::Settled, Some("unknown"), Some("0xab"))
    );
    let new = s
        .resolve(settlement(SettlementOutcome::Settled, "0x77"))
        .await
        .unwrap()
        .unwrap();
    let rows = s.recent(None, 10).await.unwrap();
    assert_eq!(rows[0].id, new);
    assert_eq!(rows[0].resolved_from.as_deref(), Some("in_flight"));
}

fn key(n: u8) -> PaymentKey {
    PaymentKey {
        chain_id: 84532,
        nonce_space: Address::repeat_byte(1),
        from: Address::repeat_byte(2),
        nonce: B256::repeat_byte(n),
    }
}

fn record(state: PaymentState, updated_at: u64) -> PaymentRecord {
    PaymentRecord {
        state,
        resource: "http://x/r".into(),
        fingerprint: B256::repeat_byte(9),
        settlement: None,
        // Distinct per record, so that a test sees whose payment a record comes back with.
        payment: Arc::new(StoredPayment {
            payload: format!(r#"{{"state":"{}","at":{updated_at}}}"#, state.as_str()).into(),
            requirements: format!(r#"{{"at":{updated_at}}}"#).into(),
        }),
        expires_at: 100,
        updated_at,
        revision: 0,
    }
}

#[tokio::test]
async fn payment_records_reserve_once_change_by_revision_survive_a_reopen_and_expire() {
    let dir = TempDir::new();
    let url = fresh_database(dir.path(), "p.sqlite3").await;
    let s = Stores::open(&url.parse().unwrap()).await.unwrap().payments;
    let r = record(PaymentState::InFlight, 10);
    assert_eq!(
        s.reserve(&key(1), &r, 10).await.unwrap(),
        Reservation::Reserved { revision: 1 }
    );
    let Reservation::Taken(t) = s.reserve(&key(1), &r, 10).await.unwrap() else {
        panic!("reserved twice")
    };
    assert_eq!((t.state, t.revision), (PaymentState::InFlight, 1));
    assert_eq!(t.payment, r.payment, "the payment as it was reserved");
    // A claim (in flight again, by a reconciliation) writes the whole record, its payment too.
    let mut claimed = record(PaymentState::InFlight, 11);
    claimed.revision = 1;
    assert!(s.update(&key(1), 1, &claimed).await.unwrap());
    let got = s.get(&key(1), 10).await.unwrap().unwrap();
    assert_eq!((got.revision, &got.payment), (2, &claimed.payment));
    // The engine settles with the payment forgotten: the record is written without it.
    let mut settled = r.clone();
    settled.state = PaymentState::Settled;
    settled.payment = StoredPayment::forgotten();
    settled.settlement = Some(SettleResponse {
        success: true,
        error_reason: None,
        error_message: None,
        transaction: "0xab".into(),
        network: "eip155:84532".into(),
        payer: None,
        extensions: None,
        amount: None,
    });
    assert!(
        !s.update(&key(1), 5, &settled).await.unwrap(),
        "stale revision"
    );
    assert!(s.update(&key(1), 2, &settled).await.unwrap());
    assert!(!s.release(&key(1), 2).await.unwrap());
    // A restart (new handles on the same database) remembers it.
    drop(s);
    let s = Stores::open(&url.parse().unwrap()).await.unwrap().payments;
    let got = s.get(&key(1), 10).await.unwrap().unwrap();
    assert_eq!(
        (got.state, got.revision, got.settlement),
        (PaymentState::Settled, 3, settled.settlement)
    );
    assert!(got.payment.is_forgotten(), "{:?}", got.payment);
    assert!(s.get(&key(1), 101).await.unwrap().is_none(), "expired");
    // Unresolved: pending, and in-flight older than the stale mark.
    s.reserve(&key(2), &record(PaymentState::Pending, 10), 10)
        .await
        .unwrap();
    s.reserve(&key(3), &record(PaymentState::InFlight, 10), 10)
        .await
        .unwrap();
    let nonces = |v: Vec<(PaymentKey, PaymentRecord)>| {
        let mut n: Vec<u8> = v.into_iter().map(|(k, _)| k.nonce[0]).collect();
        n.sort();
        n
    };
    assert_eq!(nonces(s.unresolved(10, 5, 10).await.unwrap()), vec![2]);
    let unresolved = s.unresolved(10, 11, 10).await.unwrap();
    assert_eq!(nonces(unresolved.clone()), vec![2, 3]);
    for (k, got) in &unresolved {
        let state = if k.nonce[0] == 2 {
            PaymentState::Pending
        } else {
            PaymentState::InFlight
        };
        assert_eq!(got.payment, record(state, 10).payment, "{state:?}");
    }
    assert!(s.release(&key(3), 1).await.unwrap());
    // An expired record may be reserved anew, with the new payment.
    let anew = PaymentRecord {
        expires_at: 300,
        ..record(PaymentState::InFlight, 101)
    };
    assert!(matches!(
        s.reserve(&key(1), &anew, 101).await.unwrap(),
        Reservation::Reserved { .. }
    ));
    let Reservation::Taken(t) = s.reserve(&key(1), &r, 101).await.unwrap() else {
        panic!("reserved twice")
    };
    assert_eq!(t.payment, anew.payment);
    // Payment identifiers.
    let b = IdBinding {
        fingerprint: B256::repeat_byte(4),
        key: key(1),
        expires_at: 100,
    };
    let other = IdBinding {
        fingerprint: B256::repeat_byte(5),
        ..b
    };
    let id = "pay_0123456789abcdef";
    assert_eq!(s.bind_id(id, &b, 10).await.unwrap(), IdClaim::New);
    assert_eq!(s.bind_id(id, &b, 10).await.unwrap(), IdClaim::Same);
    assert_eq!(s.bind_id(id, &other, 10).await.unwrap(), IdClaim::Conflict);
    assert_eq!(s.bind_id(id, &other, 101).await.unwrap(), IdClaim::New);
    // The pending record and the id expired; the record reserved anew has not.
    assert_eq!(s.purge_expired(200).await.unwrap(), 2);
    assert_eq!(
        s.get(&key(1), 200).await.unwrap().unwrap().payment,
        anew.payment
    );
    assert_eq!(s.purge_expired(400).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reservations_of_one_authorization_from_two_handles_reserve_once() {
    let dir = TempDir::new();
    let (a, b) = two_instances(&dir, "race.sqlite3").await;
    let (a, b) = (a.payments, b.payments);
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let s = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                s.reserve(&key(50), &record(PaymentState::InFlight, 10), 10)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut reserved = 0;
    for t in tasks {
        if matches!(t.await.unwrap(), Reservation::Reserved { .. }) {
            reserved += 1;
        }
    }
    assert_eq!(reserved, 1);
}

/// One payment, one receipt, whichever instance writes it: concurrent receipts of the same payment (the
/// nonce spelt in either case, for either article) from two handles on one database, one stored, the rest
/// refused as conflicts. Since migration 0010 this rests on the token id's key alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_receipts_of_one_payment_from_two_handles_store_one() {
    let dir = TempDir::new();
    let (a, b) = two_instances(&dir, "receipts-race.sqlite3").await;
    let (a, b) = (a.licensing, b.licensing);
    a.insert_articles(vec![article("a", true), article("b", true)])
        .await
        .unwrap();
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let s = if i % 2 == 0 { a.clone() } else { b.clone() };
            let mut r = receipt(if i % 4 < 2 { "0xcc" } else { "0xCC" });
            if i % 3 == 0 {
                r.article_id = "b".into();
            }
            tokio::spawn(async move { s.insert_receipt(r.into()).await })
        })
        .collect();
    let (mut stored, mut refused) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(()) => stored += 1,
            Err(StoreError::Conflict(_)) => refused += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!((stored, refused), (1, 39));
    assert_eq!(a.count_receipts().await.unwrap(), 1);
    assert_eq!(b.count_receipts().await.unwrap(), 1);
}

#[tokio::test]
async fn license_mints_are_queued_once_for_on_chain_receipts_and_retried_until_minted() {
    let dir = TempDir::new();
    let s = stores(&dir).await.licensing;
    s.insert_articles(vec![article("a", true)]).await.unwrap();
    let (one, two) = (token("0xaa"), token("0xbb"));
    let mut on_chain = receipt("0xaa");
    on_chain.settlement = format!("0x{}", "ab".repeat(32));
    s.insert_receipt(on_chain.into()).await.unwrap();
    s.insert_receipt(receipt("0xbb").into()).await.unwrap(); // verify-only: nothing settled, nothing minted
    assert_eq!(
        s.queue_mints("2026-01-01T00:00:00Z".into(), 100)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        s.queue_mints("2026-01-01T00:00:01Z".into(), 100)
            .await
            .unwrap(),
        0,
        "queued once"
    );
    let pending = s.pending_mints(10).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].token_id.as_str(), pending[0].owner.as_str()),
        (one.as_str(), "0x1")
    );
    assert_eq!(pending[0].attempts, 0);
    s.record_mint(
        vec![one.clone()],
        Err("paused".into()),
        "2026-01-01T00:00:02Z".into(),
    )
    .await
    .unwrap();
    let retry = s.license_mint(&one).await.unwrap().unwrap();
    assert_eq!((retry.status.as_str(), retry.attempts), ("pending", 1));
    assert_eq!(retry.last_error.as_deref(), Some("paused"));
    s.record_mint(
        vec![one.clone()],
        Ok("0xtx".into()),
        "2026-01-01T00:00:03Z".into(),
    )
    .await
    .unwrap();
    let done = s.license_mint(&one).await.unwrap().unwrap();
    assert_eq!((done.status.as_str(), done.attempts), ("minted", 2));
    assert_eq!(done.tx_hash.as_deref(), Some("0xtx"));
    assert!(s.pending_mints(10).await.unwrap().is_empty());
    // A late failure report for a minted token changes nothing.
    s.record_mint(
        vec![one.clone()],
        Err("late".into()),
        "2026-01-01T00:00:04Z".into(),
    )
    .await
    .unwrap();
    assert_eq!(
        s.license_mint(&one).await.unwrap().unwrap().status,
        "minted"
    );
    assert!(s.license_mint(&two).await.unwrap().is_none());
}

/// The backend's group-commit counters: (commits, writes they carried).
fn group_commits(stores: &Stores) -> (u64, u64) {
    let text =
        reference_server::metrics::Metrics::default().render(|| stores.backend.record_metrics());
    let value = |suffix: &str| {
        text.lines()
            .find_map(|l| {
                let (name, v) = l.split_once(' ')?;
                (name == format!("{}_{suffix}", stores.backend.kind()))
                    .then(|| v.parse::<f64>().ok())?
            })
            .unwrap_or_else(|| panic!("no {suffix} counter in\n{text}")) as u64
    };
    (
        value("group_commits_total"),
        value("group_commit_writes_total"),
    )
}

/// Writes issued together are committed together, and one that fails among them fails alone. Of 22 receipts
/// written at once (so that the backend's writer takes them as one group), one is for an article that does
/// not exist (a foreign-key violation: on PostgreSQL an error aborts the group's whole transaction) and one
/// repeats another's payment (a conflict): those two are refused, the 20 others are stored.
#[tokio::test]
async fn a_write_that_fails_among_concurrent_writes_fails_alone() {
    let dir = TempDir::new();
    let stores = stores(&dir).await;
    let s = stores.licensing.clone();
    s.insert_articles(vec![article("a", true)]).await.unwrap();
    let mut receipts: Vec<Receipt> = (0..20)
        .map(|i| receipt(&format!("0x{:02x}", 0x10 + i)))
        .collect();
    let mut orphan = receipt("0x99");
    orphan.article_id = "no-such-article".into();
    receipts.insert(7, orphan);
    receipts.insert(13, receipt("0x10"));
    let (commits, writes) = group_commits(&stores);
    // Every write is queued before any is answered: the test's runtime has one thread, so the writer (a task
    // on PostgreSQL, a thread on SQLite) sees them all waiting.
    let results =
        futures_util::future::join_all(receipts.into_iter().map(|r| s.insert_receipt(r.into())))
            .await;
    for (i, result) in results.iter().enumerate() {
        match (i, result) {
            (7, Err(e)) => assert!(!matches!(e, StoreError::Conflict(_)), "{e:?}"),
            (13, Err(StoreError::Conflict(_))) => {}
            (7 | 13, other) => panic!("write {i}: {other:?}"),
            (_, r) => assert!(r.is_ok(), "write {i}: {r:?}"),
        }
    }
    assert_eq!(s.count_receipts().await.unwrap(), 20);
    assert!(s.receipt(&token("0x10")).await.unwrap().is_some());
    assert!(s.receipt(&token("0x99")).await.unwrap().is_none());
    let (commits, writes) = {
        let (c, w) = group_commits(&stores);
        (c - commits, w - writes)
    };
    assert_eq!(writes, 22);
    if backend() == "postgres" {
        // One group: its transaction was rolled back, then each write ran alone.
        assert_eq!(commits, 1);
    } else {
        assert!((1..=22).contains(&commits), "{commits}");
    }
}

/// In the PostgreSQL pass only (`None` in the SQLite pass): a fresh database in `dir`'s name, its URL and the
/// server's stores on it.
async fn postgres_stores(dir: &TempDir) -> Option<(String, Stores)> {
    if !in_postgres_pass() {
        return None;
    }
    let url = fresh_database(dir.path(), "unused").await;
    let stores = Stores::open(&url.parse().unwrap()).await.unwrap();
    Some((url, stores))
}

/// A plain connection to the PostgreSQL database at `url`.
async fn postgres_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// PostgreSQL's writer holds a connection; when the database drops it (a restart, a failover, an
/// administrator), the writes queued next run on a new one instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_writer_takes_a_new_connection_when_its_own_is_dropped() {
    let dir = TempDir::new();
    let Some((url, stores)) = postgres_stores(&dir).await else {
        return;
    };
    let s = stores.licensing.clone();
    s.insert_articles(vec![article("a", true)]).await.unwrap();
    s.insert_receipt(receipt("0x01").into()).await.unwrap();
    let admin = postgres_client(&std::env::var(POSTGRES_ENV).unwrap()).await;
    let db = url.rsplit_once('/').unwrap().1;
    let killed = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
            &[&db],
        )
        .await
        .unwrap();
    assert!(!killed.is_empty());
    let results = futures_util::future::join_all(
        ["0x02", "0x03", "0x04"].map(|n| s.insert_receipt(receipt(n).into())),
    )
    .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(s.count_receipts().await.unwrap(), 4);
}

/// What a PostgreSQL group does when its `COMMIT` fails, driven by a check that runs at commit (a deferred
/// constraint trigger on `receipts`). Refused by the server (`ERROR`): the group was rolled back, each write
/// runs alone, and only the refused one fails. The session ended during the commit (its backend terminated,
/// `FATAL`): whether the group was written is unknown, so every write of it fails with `CommitUnknown` and
/// none is run again; the next writes go through a new connection.
#[tokio::test]
async fn a_refused_postgres_commit_reruns_each_write_and_a_broken_one_fails_its_group() {
    let dir = TempDir::new();
    let Some((url, stores)) = postgres_stores(&dir).await else {
        return;
    };
    let s = stores.licensing.clone();
    let articles = ["a", "refused", "dies"].map(|id| article(id, true));
    s.insert_articles(articles.to_vec()).await.unwrap();
    let db = postgres_client(&url).await;
    db.batch_execute(
        "CREATE FUNCTION at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.article_id = 'refused' THEN RAISE EXCEPTION 'refused at commit'; END IF;
             IF NEW.article_id = 'dies' THEN
                 PERFORM pg_terminate_backend(pg_backend_pid());
                 PERFORM pg_sleep(5);
             END IF;
             RETURN NULL;
         END $$;
         CREATE CONSTRAINT TRIGGER at_commit AFTER INSERT ON receipts
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION at_commit();",
    )
    .await
    .unwrap();
    // Four receipts written at once (one group), the third for article `odd`.
    let group = async |odd: &str, nonces: [&str; 4]| {
        futures_util::future::join_all(nonces.into_iter().enumerate().map(|(i, n)| {
            let mut r = receipt(n);
            if i == 2 {
                r.article_id = odd.into();
            }
            s.insert_receipt(r.into())
        }))
        .await
    };

    let (commits, _) = group_commits(&stores);
    let refused = group("refused", ["0x01", "0x02", "0x03", "0x04"]).await;
    assert_eq!(group_commits(&stores).0 - commits, 1, "one group");
    for (i, r) in refused.iter().enumerate() {
        match (i, r) {
            (2, Err(StoreError::Postgres(e))) => assert_eq!(
                e.as_db_error().map(|db| db.message()),
                Some("refused at commit")
            ),
            (2, other) => panic!("{other:?}"),
            (_, r) => assert!(r.is_ok(), "write {i}: {r:?}"),
        }
    }
    assert_eq!(s.count_receipts().await.unwrap(), 3);

    let broken = group("dies", ["0x11", "0x12", "0x13", "0x14"]).await;
    for r in &broken {
        assert!(matches!(r, Err(StoreError::CommitUnknown(_))), "{r:?}");
    }
    assert_eq!(
        s.count_receipts().await.unwrap(),
        3,
        "the ended session wrote nothing"
    );
    s.insert_receipt(receipt("0x21").into()).await.unwrap();
    assert_eq!(s.count_receipts().await.unwrap(), 4);
}

/// x402-tower's payment store contract (`x402_tower::store::conformance`), the checks the in-memory and
/// Redis stores pass, on the backend of the pass: call after call, then under contention (concurrent
/// reservations, updates of one revision, releases, and bindings of one payment identifier).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payment_store_keeps_the_engines_contract_alone_and_under_contention() {
    use x402_tower::store::conformance;
    let dir = TempDir::new();
    conformance::sequential(stores(&dir).await.payments).await;
    let (a, _) = two_instances(&dir, "contention.sqlite3").await;
    conformance::contention(a.payments).await;
}
