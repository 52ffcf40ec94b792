//! The `PaymentStore` contract, checked the same way on every implementation this crate ships: the in-memory
//! store always, the Redis store (feature `redis`) against a real `redis-server` named by `X402_TEST_REDIS`
//! (the test command starts one; without it the Redis tests fail, they never skip).

use std::sync::Arc;

use x402_tower::engine::PaymentEngine;
use x402_tower::engine::facilitator::FacilitatorPolicy;
use x402_tower::store::conformance::{self, key, record};
use x402_tower::store::{PaymentState, PaymentStore, Reservation};
use x402_tower::{settle::Settler, store::InMemoryPaymentStore};

use crate::support::*;

/// Two engines (two instances) on `store`: the same payment through both settles once.
async fn two_engines_settle_once(store: Arc<dyn PaymentStore>, nonce: u8) {
    let (s1, s2) = (
        Scripted::new(settled_outcome()),
        Scripted::new(settled_outcome()),
    );
    let engine = |settler: Arc<dyn Settler>| {
        Arc::new(
            PaymentEngine::builder()
                .settler(settler)
                .store(store.clone())
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

/// The paid route (the layer) and the facilitator door of one engine on `store`, each presented the same
/// authorization at the same moment, for 12 authorizations: exactly one door takes each, and each moves
/// money once.
async fn route_and_door_race(store: Arc<dyn PaymentStore>) {
    use tower::Layer;
    use x402_tower::layer::faults::{FaultyService, LedgerSettler};
    let ledger = LedgerSettler::new();
    let engine = Arc::new(
        PaymentEngine::builder()
            .settler(ledger.clone())
            .store(store)
            .build()
            .unwrap(),
    );
    let service = FaultyService::new("content");
    let mut races = Vec::new();
    for nonce in 0xd0..0xdc {
        let header = v2_header(nonce);
        let payload = unb64(&header);
        let body = serde_json::json!({"x402Version": 2, "paymentRequirements": payload["accepted"].clone(), "paymentPayload": payload}).to_string();
        let svc = config()
            .engine(engine.clone())
            .build()
            .unwrap()
            .layer(service.clone());
        let engine = engine.clone();
        races.push(tokio::spawn(async move {
            let route = tokio::spawn(async move {
                send(svc, req("/report", &[("payment-signature", &header)])).await
            });
            let door = tokio::spawn(async move {
                engine
                    .facilitator_settle(&FacilitatorPolicy::default(), body.as_bytes())
                    .await
                    .unwrap()
            });
            let (route, door) = (route.await.unwrap(), door.await.unwrap());
            (route.status == http::StatusCode::OK, door.success)
        }));
    }
    for race in races {
        let (route, door) = race.await.unwrap();
        assert!(route ^ door, "exactly one door: route {route}, door {door}");
    }
    assert_eq!(ledger.moved(), 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_store_keeps_the_contract() {
    conformance::sequential(Arc::new(InMemoryPaymentStore::default())).await;
    conformance::contention(Arc::new(InMemoryPaymentStore::default())).await;
    two_engines_settle_once(Arc::new(InMemoryPaymentStore::default()), 61).await;
    route_and_door_race(Arc::new(InMemoryPaymentStore::default())).await;
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use x402_tower::store::redis::RedisPaymentStore;

    /// A store on the test server under a fresh prefix (tests share the server, never keys).
    async fn store() -> Arc<dyn PaymentStore> {
        let url = std::env::var("X402_TEST_REDIS").unwrap_or_else(|_| {
            panic!(
                "X402_TEST_REDIS is not set: the Redis store's tests need a redis-server \
                 (scripts/test.sh starts one; or X402_TEST_REDIS=redis://127.0.0.1:6379)"
            )
        });
        let prefix = format!("test-{}-{}", std::process::id(), now_nanos());
        Arc::new(RedisPaymentStore::connect(&url, &prefix).await.unwrap())
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
        route_and_door_race(store().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_processes_on_one_redis_settle_an_authorization_once() {
        // Two stores with their own connections and one prefix: what two processes would have.
        let url = std::env::var("X402_TEST_REDIS").expect("X402_TEST_REDIS");
        let prefix = format!("shared-{}", now_nanos());
        let a = Arc::new(RedisPaymentStore::connect(&url, &prefix).await.unwrap());
        let b: Arc<dyn PaymentStore> =
            Arc::new(RedisPaymentStore::connect(&url, &prefix).await.unwrap());
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

/// A `redis-server` of one test's own on a free loopback port, with its data in `dir` (append-only file:
/// a clean restart keeps every record), stopped on drop.
#[cfg(feature = "redis")]
struct OwnRedis {
    child: std::process::Child,
    port: u16,
    dir: std::path::PathBuf,
}

#[cfg(feature = "redis")]
impl OwnRedis {
    fn start(dir: &std::path::Path, port: u16) -> OwnRedis {
        let child = std::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "yes"])
            .args(["--appendfsync", "always", "--daemonize", "no"])
            .arg("--port")
            .arg(port.to_string())
            .arg("--dir")
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test-services.sh installs it)");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not listen within 20 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        OwnRedis {
            child,
            port,
            dir: dir.to_owned(),
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGTERM (a clean shutdown: the append-only file is complete) and wait.
    fn stop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = self.child.wait();
    }

    fn restart(&mut self) {
        self.stop();
        *self = OwnRedis::start(&self.dir.clone(), self.port);
    }
}

#[cfg(feature = "redis")]
impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Redis goes away under a running service, comes back after a restart (with its data), and is then lost
/// (emptied): while it is away every payment is refused (503) and nothing is settled; after the restart a
/// settled payment's resend is delivered again; after the loss, that resend is refused by the settler's
/// own view of the chain, never settled twice.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_away_restarted_or_lost_never_admits_blindly_or_settles_twice() {
    use http::StatusCode;
    use tower::Layer;
    use x402_tower::layer::faults::{FaultyService, LedgerSettler};

    let dir = std::env::temp_dir().join(format!("x402-redis-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut redis = OwnRedis::start(&dir, port);
    let store = Arc::new(
        x402_tower::store::redis::RedisPaymentStore::connect(&redis.url(), "away")
            .await
            .unwrap(),
    );
    let ledger = LedgerSettler::new();
    let engine = Arc::new(
        PaymentEngine::builder()
            .settler(ledger.clone())
            .store(store)
            .store_timeout(std::time::Duration::from_secs(10))
            .build()
            .unwrap(),
    );
    let service = FaultyService::new("content");
    // Each payment signed once: its resends are the identical payment.
    let headers: std::collections::HashMap<u8, String> = [0xc1, 0xc2]
        .into_iter()
        .map(|n| (n, v2_header(n)))
        .collect();
    let buy = |nonce: u8| {
        let svc = config()
            .engine(engine.clone())
            .build()
            .unwrap()
            .layer(service.clone());
        let header = headers[&nonce].clone();
        async move { send(svc, req("/report", &[("payment-signature", &header)])).await }
    };
    assert_eq!(buy(0xc1).await.status, StatusCode::OK);
    assert_eq!(ledger.moved(), 1);

    // Away: refused, nothing settled, the service not called.
    redis.stop();
    for nonce in [0xc2, 0xc1] {
        let a = buy(nonce).await;
        assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{a:?}");
    }
    assert_eq!((ledger.moved(), service.calls()), (1, 1));

    // Back, with its data: the settled payment is delivered again, the refused one now bought.
    redis.restart();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let again = loop {
        let a = buy(0xc1).await;
        if a.status != StatusCode::SERVICE_UNAVAILABLE || std::time::Instant::now() > deadline {
            break a;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(again.status, StatusCode::OK, "{again:?}");
    assert_eq!(buy(0xc2).await.status, StatusCode::OK);
    assert_eq!(ledger.moved(), 2);

    // Lost (emptied): the resend of a settled payment finds no record; the settler's view refuses it.
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let () = ::redis::cmd("FLUSHALL")
        .query_async(&mut conn)
        .await
        .unwrap();
    let a = buy(0xc1).await;
    assert_eq!(a.error(), "invalid_exact_evm_nonce_already_used");
    assert_eq!(ledger.moved(), 2, "never settled twice");
    let _ = std::fs::remove_dir_all(&dir);
}
