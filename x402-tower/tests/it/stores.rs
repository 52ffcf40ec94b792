//! The `ReplayStore` contract, checked the same way on every implementation this crate ships: the in-memory
//! store always, the Redis store (feature `redis`) against a real `redis-server` named by `X402_TEST_REDIS`
//! (the test command starts one; without it the Redis tests fail, they never skip).

use std::sync::Arc;

use x402_tower::engine::PaymentEngine;
use x402_tower::engine::facilitator::FacilitatorPolicy;
use x402_tower::store::conformance::{self, key, record};
use x402_tower::store::{PaymentState, ReplayStore, Reservation};
use x402_tower::{settle::Settler, store::InMemoryReplayStore};

use crate::support::*;

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
    conformance::sequential(Arc::new(InMemoryReplayStore::default())).await;
    conformance::contention(Arc::new(InMemoryReplayStore::default())).await;
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
        conformance::sequential(store().await).await;
        conformance::contention(store().await).await;
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
