//! The `ReplayStore` contract, checked the same way on every implementation this crate ships: the in-memory
//! store always, the Redis store (feature `redis`) against a real `redis-server` named by `X402_TEST_REDIS`
//! (the test command starts one; without it the Redis tests fail, they never skip).

use std::sync::Arc;

use alloy_primitives::{Address, B256};
use x402_tower::engine::PaymentEngine;
use x402_tower::engine::facilitator::FacilitatorPolicy;
use x402_tower::proto::SettleResponse;
use x402_tower::store::{
    IdBinding, IdClaim, PaymentRecord, PaymentState, ReplayKey, ReplayStore, Reservation,
    StoredPayment,
};
use x402_tower::{settle::Settler, store::InMemoryReplayStore};

use crate::support::*;

fn key(n: u8) -> ReplayKey {
    ReplayKey {
        chain_id: 84532,
        asset: Address::repeat_byte(0xa5),
        from: Address::repeat_byte(0xf0),
        nonce: B256::repeat_byte(n),
    }
}

fn record(state: PaymentState, expires_at: u64, updated_at: u64) -> PaymentRecord {
    PaymentRecord {
        state,
        resource: "https://shop.test/a".into(),
        fingerprint: B256::repeat_byte(9),
        settlement: None,
        payment: Arc::new(StoredPayment {
            payload: r#"{"x402Version":2}"#.into(),
            requirements: Arc::from(r#"{"scheme":"exact"}"#),
        }),
        expires_at,
        updated_at,
        revision: 0,
    }
}

/// The contract, sequentially: reserve/taken, compare-and-set update and release, expiry, unresolved, ids.
async fn contract(s: Arc<dyn ReplayStore>) {
    let now = now();
    let r = record(PaymentState::InFlight, now + 60, now);
    assert_eq!(
        s.reserve(&key(1), &r, now).await.unwrap(),
        Reservation::Reserved { revision: 1 }
    );
    let Reservation::Taken(t) = s.reserve(&key(1), &r, now).await.unwrap() else {
        panic!("reserved twice")
    };
    assert_eq!(
        (t.state, t.revision, &t.resource),
        (PaymentState::InFlight, 1, &r.resource)
    );
    assert_eq!(t.payment.payload, r.payment.payload);
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
    });
    assert!(
        !s.update(&key(1), 7, &settled).await.unwrap(),
        "stale revision"
    );
    assert!(s.update(&key(1), 1, &settled).await.unwrap());
    assert!(
        !s.update(&key(1), 1, &settled).await.unwrap(),
        "used revision"
    );
    assert!(!s.release(&key(1), 1).await.unwrap());
    let got = s.get(&key(1), now).await.unwrap().unwrap();
    assert_eq!((got.state, got.revision), (PaymentState::Settled, 2));
    assert_eq!(got.settlement, settled.settlement);
    assert!(
        got.payment.is_forgotten(),
        "update replaces the payment too"
    );
    assert!(s.get(&key(1), now + 61).await.unwrap().is_none(), "expired");
    assert!(s.get(&key(99), now).await.unwrap().is_none());
    // An expired record may be reserved again.
    assert_eq!(
        s.reserve(&key(1), &r, now + 61).await.unwrap(),
        Reservation::Reserved { revision: 1 }
    );
    // Release with the right revision: the key is free again.
    assert!(s.release(&key(1), 1).await.unwrap());
    assert!(s.get(&key(1), now).await.unwrap().is_none());
    assert!(matches!(
        s.reserve(&key(1), &r, now).await.unwrap(),
        Reservation::Reserved { .. }
    ));

    // Unresolved: pending ones, and in-flight ones untouched since before the stale mark.
    s.reserve(
        &key(2),
        &record(PaymentState::Pending, now + 60, now - 5),
        now,
    )
    .await
    .unwrap();
    s.reserve(
        &key(3),
        &record(PaymentState::InFlight, now + 60, now - 10),
        now,
    )
    .await
    .unwrap();
    let nonces = |v: Vec<(ReplayKey, PaymentRecord)>| {
        let mut n: Vec<u8> = v.into_iter().map(|(k, _)| k.nonce[0]).collect();
        n.sort();
        n
    };
    assert_eq!(
        nonces(s.unresolved(now, now - 20, 10).await.unwrap()),
        vec![2]
    );
    assert_eq!(
        nonces(s.unresolved(now, now - 8, 10).await.unwrap()),
        vec![2, 3],
        "key 1 (in flight, updated now) is not stale yet"
    );
    let found = s.unresolved(now, now - 8, 10).await.unwrap();
    assert!(
        found
            .iter()
            .all(|(k, r)| r.expires_at == now + 60 && k.asset == key(2).asset)
    );
    assert_eq!(
        s.unresolved(now, now - 8, 1).await.unwrap().len(),
        1,
        "limit"
    );
    // Settled records leave the reconciler's view.
    let mut done = record(PaymentState::Settled, now + 60, now);
    done.settlement = settled.settlement.clone();
    assert!(s.update(&key(2), 1, &done).await.unwrap());
    assert_eq!(
        nonces(s.unresolved(now, now - 8, 10).await.unwrap()),
        vec![3]
    );
    assert!(
        s.unresolved(now + 61, now + 61, 10)
            .await
            .unwrap()
            .is_empty(),
        "expired"
    );

    // Payment identifiers.
    let b = IdBinding {
        fingerprint: B256::repeat_byte(4),
        key: key(1),
        expires_at: now + 60,
    };
    let other = IdBinding {
        fingerprint: B256::repeat_byte(5),
        ..b
    };
    let id = format!("pay_{now}");
    assert_eq!(s.bind_id(&id, &b, now).await.unwrap(), IdClaim::New);
    assert_eq!(s.bind_id(&id, &b, now).await.unwrap(), IdClaim::Same);
    assert_eq!(
        s.bind_id(&id, &other, now).await.unwrap(),
        IdClaim::Conflict
    );
    assert_eq!(
        s.bind_id(&id, &other, now + 61).await.unwrap(),
        IdClaim::New
    );
}

/// The contract under contention: one winner per key, one winner per revision.
async fn contention(s: Arc<dyn ReplayStore>) {
    let now = now();
    let r = record(PaymentState::InFlight, now + 60, now);
    let reserves: Vec<_> = (0..64)
        .map(|_| {
            let (s, r) = (s.clone(), r.clone());
            tokio::spawn(async move { s.reserve(&key(40), &r, now).await.unwrap() })
        })
        .collect();
    let mut won = 0;
    for t in reserves {
        if matches!(t.await.unwrap(), Reservation::Reserved { .. }) {
            won += 1;
        }
    }
    assert_eq!(won, 1, "exactly one of 64 concurrent reservations");
    let updates: Vec<_> = (0..32)
        .map(|i| {
            let s = s.clone();
            let mut r = r.clone();
            r.state = if i % 2 == 0 {
                PaymentState::Settled
            } else {
                PaymentState::Pending
            };
            tokio::spawn(async move { s.update(&key(40), 1, &r).await.unwrap() })
        })
        .collect();
    let mut won = 0;
    for t in updates {
        won += usize::from(t.await.unwrap());
    }
    assert_eq!(won, 1, "exactly one of 32 updates of one revision");
    let releases: Vec<_> = (0..16)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move { s.release(&key(40), 2).await.unwrap() })
        })
        .collect();
    let mut won = 0;
    for t in releases {
        won += usize::from(t.await.unwrap());
    }
    assert_eq!(won, 1, "exactly one of 16 releases");
    let binds: Vec<_> = (0..32u8)
        .map(|i| {
            let s = s.clone();
            let b = IdBinding {
                fingerprint: B256::repeat_byte(i),
                key: key(41),
                expires_at: now + 60,
            };
            let id = format!("pay_contended_{now}");
            tokio::spawn(async move { s.bind_id(&id, &b, now).await.unwrap() })
        })
        .collect();
    let mut new = 0;
    for t in binds {
        if t.await.unwrap() == IdClaim::New {
            new += 1;
        }
    }
    assert_eq!(new, 1, "one of 32 different payments binds an id");
}

/// Two engines (two instances) on `store`: the same payment through both settles once.
async fn two_engines_settle_once(store: Arc<dyn ReplayStore>, nonce: u8) {
    let (s1, s2) = (
        Scripted::new(settled_outcome()),
        Scripted::new(settled_outcome()),
    );
    let engine = |settler: Arc<dyn Settler>| {
        Arc::new(
            PaymentEngine::builder()
                .settler(settler)
                .replay_store(store.clone())
                .build()
                .unwrap(),
        )
    };
    let (e1, e2) = (engine(s1.clone()), engine(s2.clone()));
    let payload = unb64(&v2_header(nonce));
    let body = serde_json::json!({"x402Version": 2, "paymentRequirements": payload["accepted"].clone(), "paymentPayload": payload});
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let e = if i % 2 == 0 { e1.clone() } else { e2.clone() };
            let body = body.clone();
            tokio::spawn(async move {
                e.facilitator_settle(&FacilitatorPolicy::default(), body.to_string().as_bytes())
                    .await
                    .unwrap()
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(s1.settles() + s2.settles(), 1);
    let p = FacilitatorPolicy::default();
    let (a, b) = (
        e1.facilitator_settle(&p, body.to_string().as_bytes())
            .await
            .unwrap(),
        e2.facilitator_settle(&p, body.to_string().as_bytes())
            .await
            .unwrap(),
    );
    assert!(a.success && a == b, "{a:?} {b:?}");
    assert_eq!(s1.settles() + s2.settles(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_store_keeps_the_contract() {
    contract(Arc::new(InMemoryReplayStore::default())).await;
    contention(Arc::new(InMemoryReplayStore::default())).await;
    two_engines_settle_once(Arc::new(InMemoryReplayStore::default()), 61).await;
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use x402_tower::store::redis::RedisReplayStore;

    /// A store on the test server under a fresh prefix (tests share the server, never keys).
    async fn store() -> Arc<dyn ReplayStore> {
        let url = std::env::var("X402_TEST_REDIS").unwrap_or_else(|_| {
            panic!(
                "X402_TEST_REDIS is not set: the Redis store's tests need a redis-server \
                 (scripts/test.sh starts one; or X402_TEST_REDIS=redis://127.0.0.1:6379)"
            )
        });
        let prefix = format!("test-{}-{}", std::process::id(), now_nanos());
        Arc::new(RedisReplayStore::connect(&url, &prefix).await.unwrap())
    }

    fn now_nanos() -> u128 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_store_keeps_the_contract() {
        contract(store().await).await;
        contention(store().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_processes_on_one_redis_settle_an_authorization_once() {
        // Two stores with their own connections and one prefix: what two processes would have.
        let url = std::env::var("X402_TEST_REDIS").expect("X402_TEST_REDIS");
        let prefix = format!("shared-{}", now_nanos());
        let a = Arc::new(RedisReplayStore::connect(&url, &prefix).await.unwrap());
        let b: Arc<dyn ReplayStore> =
            Arc::new(RedisReplayStore::connect(&url, &prefix).await.unwrap());
        let now = now();
        let r = record(PaymentState::InFlight, now + 60, now);
        assert!(matches!(
            a.reserve(&key(7), &r, now).await.unwrap(),
            Reservation::Reserved { .. }
        ));
        assert!(matches!(
            b.reserve(&key(7), &r, now).await.unwrap(),
            Reservation::Taken(_)
        ));
        two_engines_settle_once(b, 62).await;
    }
}
