//! The [`PaymentStore`] contract as checks a store must pass (feature `test-util`), for this crate's stores
//! and for anyone who writes one: [`sequential`] (reserve and taken, compare-and-set update and release,
//! expiry, unresolved records, payment identifiers, single-use nonces) and [`contention`] (one winner per
//! key, per revision, per identifier, per nonce, under concurrent calls). They panic, like assertions, on the first broken rule. Run
//! [`contention`] on a multi-threaded runtime, each on a fresh store (they use fixed keys).
//!
//! ```
//! use std::sync::Arc;
//! use x402_tower::store::{InMemoryPaymentStore, conformance};
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! conformance::sequential(Arc::new(InMemoryPaymentStore::default())).await;
//! conformance::contention(Arc::new(InMemoryPaymentStore::default())).await;
//! # }
//! ```

use std::sync::Arc;

use alloy_primitives::{Address, B256};

use super::{
    IdBinding, IdClaim, PaymentKey, PaymentRecord, PaymentState, PaymentStore, Reservation,
    StoredPayment,
};
use crate::proto::SettleResponse;

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The key with nonce byte `n` (one chain, asset and payer).
pub fn key(n: u8) -> PaymentKey {
    PaymentKey {
        chain_id: 84532,
        nonce_space: Address::repeat_byte(0xa5),
        from: Address::repeat_byte(0xf0),
        nonce: B256::repeat_byte(n),
    }
}

/// A record in `state`, kept until `expires_at`, last changed at `updated_at` (unix seconds).
pub fn record(state: PaymentState, expires_at: u64, updated_at: u64) -> PaymentRecord {
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

/// The contract, call after call: reserve and taken, compare-and-set update and release, expiry, unresolved
/// records, payment identifiers.
#[allow(clippy::missing_panics_doc)]
pub async fn sequential(s: Arc<dyn PaymentStore>) {
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
        amount: None,
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
    let nonces = |v: Vec<(PaymentKey, PaymentRecord)>| {
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
            .all(|(k, r)| r.expires_at == now + 60 && k.nonce_space == key(2).nonce_space)
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

    // Single-use nonces: once until they expire, apart from identifiers and payments.
    let nonce = alloy_primitives::keccak256(id.as_bytes());
    assert!(
        s.use_nonce(&nonce, now + 60, now).await.unwrap(),
        "first use"
    );
    assert!(!s.use_nonce(&nonce, now + 60, now).await.unwrap(), "used");
    assert!(
        !s.use_nonce(&nonce, now + 90, now + 60).await.unwrap(),
        "used until it expires"
    );
    assert!(
        s.use_nonce(&nonce, now + 200, now + 61).await.unwrap(),
        "expired: usable again"
    );
    assert!(!s.use_nonce(&nonce, now + 200, now + 62).await.unwrap());
    assert!(
        s.use_nonce(&B256::repeat_byte(9), now + 60, now)
            .await
            .unwrap(),
        "another nonce"
    );
}

/// The contract under contention: one winner of 64 concurrent reservations of a key, of 32 updates of one
/// revision, of 16 releases, of 32 bindings of one identifier to different payments.
#[allow(clippy::missing_panics_doc)]
pub async fn contention(s: Arc<dyn PaymentStore>) {
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
    let uses: Vec<_> = (0..32)
        .map(|_| {
            let s = s.clone();
            let nonce = B256::repeat_byte(0x42);
            tokio::spawn(async move { s.use_nonce(&nonce, now + 60, now).await.unwrap() })
        })
        .collect();
    let mut first = 0;
    for t in uses {
        first += usize::from(t.await.unwrap());
    }
    assert_eq!(first, 1, "one of 32 concurrent uses of a nonce");
}
