//! Faults after the money moved, in the real server on the backend of the pass (SQLite, or PostgreSQL):
//! the database refuses the license receipt after the settlement (a trigger the test puts on the receipts
//! table), a restart follows, and the paid route races the facilitator door for one authorization.

use serde_json::Value;

use crate::common::*;
use crate::licensing::{ARTICLE, json, offer, settlement_rows};

/// Makes the database refuse (or accept again) every new license receipt: a trigger on `receipts`, the
/// way a full disk or a broken constraint would refuse it, on either backend.
async fn refuse_receipts(server: &TestServer, refuse: bool) {
    let db = server
        .config
        .registry
        .database
        .clone()
        .expect("the test server's database");
    if backend() == "postgres" {
        let (client, connection) = tokio_postgres::connect(&db, tokio_postgres::NoTls)
            .await
            .expect("connect to the test database");
        tokio::spawn(connection);
        let sql = if refuse {
            "CREATE OR REPLACE FUNCTION injected_fault() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'injected fault: receipts refused'; END $$; \
             CREATE TRIGGER injected_fault BEFORE INSERT ON receipts \
             FOR EACH ROW EXECUTE FUNCTION injected_fault();"
        } else {
            "DROP TRIGGER injected_fault ON receipts;"
        };
        client.batch_execute(sql).await.expect("the fault trigger");
    } else {
        let sql = if refuse {
            "CREATE TRIGGER injected_fault BEFORE INSERT ON receipts \
             BEGIN SELECT RAISE(ABORT, 'injected fault: receipts refused'); END;"
        } else {
            "DROP TRIGGER injected_fault;"
        };
        tokio::task::spawn_blocking(move || {
            let c = rusqlite::Connection::open(&db).expect("open the test database");
            c.busy_timeout(std::time::Duration::from_secs(10))
                .expect("busy timeout");
            c.execute_batch(sql).expect("the fault trigger");
        })
        .await
        .expect("the trigger task");
    }
}

/// The settled rows of the settlement log.
async fn settled(server: &TestServer) -> usize {
    settlement_rows(server, "settled", None).await.len()
}

#[tokio::test]
async fn a_receipt_the_database_refuses_after_the_settlement_is_stored_and_delivered_on_the_resend()
{
    let server = TestServer::start().await;
    let (required, _) = offer(&server, ARTICLE).await;
    let header = Payer::new().pay_v2(&required);
    let url = server.url(&format!("/x402Article?articleId={ARTICLE}"));
    refuse_receipts(&server, true).await;

    let refused = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "2");
    // The buyer learns that the money moved, and what to do.
    let receipt = decode_header(&refused, "payment-response");
    assert_eq!(receipt["success"], true, "{receipt}");
    let problem: Value = json(refused).await;
    assert_eq!(problem["code"], "receipt_not_stored", "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("same PAYMENT-SIGNATURE"),
        "{problem}"
    );
    assert_eq!(server.state.licensing.count_receipts().await.unwrap(), 0);
    assert_eq!(settled(&server).await, 1);

    // The database accepts receipts again: the identical resend gets the article and its receipt, with the
    // settlement made the first time.
    refuse_receipts(&server, false).await;
    let resp = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(resp.status(), 200);
    let delivered = decode_header(&resp, "payment-response");
    assert_eq!(delivered["transaction"], receipt["transaction"]);
    let body: Value = resp.json().await.unwrap();
    assert!(body["article"]["content"].is_string(), "{body}");
    assert_eq!(server.state.licensing.count_receipts().await.unwrap(), 1);
    assert_eq!(settled(&server).await, 1, "one settlement in the log");

    // After a restart on the same database (and address: the payment was for this URL): the record is
    // settled, the receipt stored once.
    let (mut config, dir) = (server.config.clone(), server.dir());
    config.http.listen = server.base.trim_start_matches("http://").to_owned();
    server.stop().await;
    let restarted = TestServer::start_config(config, dir).await;
    let url = restarted.url(&format!("/x402Article?articleId={ARTICLE}"));
    let again = restarted.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(
        again.status(),
        200,
        "{:?}",
        again
            .headers()
            .get("payment-required")
            .map(|_| decode_header(&again, "payment-required"))
    );
    assert_eq!(
        decode_header(&again, "payment-response")["transaction"],
        receipt["transaction"]
    );
    assert_eq!(restarted.state.licensing.count_receipts().await.unwrap(), 1);
    assert_eq!(settled(&restarted).await, 1);
}

/// The facilitator request for the payment in `header` (a v2 payment header).
fn facilitator_body(header: &str) -> Value {
    use base64::Engine as _;
    let payload: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(header)
            .unwrap(),
    )
    .unwrap();
    serde_json::json!({"x402Version": 2, "paymentRequirements": payload["accepted"].clone(), "paymentPayload": payload})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_paid_route_and_the_facilitator_door_racing_one_authorization_settle_it_once() {
    const RACES: usize = 12;
    let server =
        TestServer::start_with(|c| c.facilitator.facilitator_token = Some("fac-token".into()))
            .await;
    let (required, _) = offer(&server, ARTICLE).await;
    let url = server.url(&format!("/x402Article?articleId={ARTICLE}"));
    let mut races = Vec::new();
    for _ in 0..RACES {
        let header = Payer::new().pay_v2(&required);
        let route = server
            .client
            .get(&url)
            .header("PAYMENT-SIGNATURE", &header)
            .send();
        let door = server
            .client
            .post(server.url("/facilitator/settle"))
            .header("authorization", "Bearer fac-token")
            .json(&facilitator_body(&header))
            .send();
        races.push(tokio::spawn(async move {
            let (route, door) = tokio::join!(route, door);
            let (route, door) = (route.unwrap(), door.unwrap());
            let route_paid = route.status() == 200;
            let door: Value = door.json().await.unwrap();
            (route_paid, door["success"] == true, door)
        }));
    }
    let mut won = (0, 0);
    for race in races {
        let (route, door, answer) = tokio::time::timeout(std::time::Duration::from_secs(60), race)
            .await
            .expect("a race answered within a minute")
            .unwrap();
        assert!(
            route ^ door,
            "exactly one door takes an authorization (route {route}, door {answer})"
        );
        won.0 += usize::from(route);
        won.1 += usize::from(door);
    }
    assert_eq!(won.0 + won.1, RACES, "{won:?}");
    assert_eq!(
        settled(&server).await,
        RACES,
        "one settlement per authorization"
    );
    assert_eq!(
        server.state.licensing.count_receipts().await.unwrap(),
        won.0 as u64
    );
}

/// The server's payment store (SQLite or PostgreSQL) behind x402-tower's `FaultyStore`.
#[derive(Debug)]
struct FaultyPayments {
    faults: Arc<FaultyStore>,
    inner: Arc<dyn ExpiringPaymentStore>,
}

impl PaymentStore for FaultyPayments {
    fn reserve<'a>(
        &'a self,
        key: &'a PaymentKey,
        record: &'a PaymentRecord,
        now: u64,
    ) -> BoxFuture<'a, Result<Reservation, PaymentStoreError>> {
        self.faults.reserve(key, record, now)
    }
    fn get<'a>(
        &'a self,
        key: &'a PaymentKey,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<PaymentRecord>, PaymentStoreError>> {
        self.faults.get(key, now)
    }
    fn update<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
        record: &'a PaymentRecord,
    ) -> BoxFuture<'a, Result<bool, PaymentStoreError>> {
        self.faults.update(key, expected, record)
    }
    fn release<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
    ) -> BoxFuture<'a, Result<bool, PaymentStoreError>> {
        self.faults.release(key, expected)
    }
    fn unresolved<'a>(
        &'a self,
        now: u64,
        stale_before: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(PaymentKey, PaymentRecord)>, PaymentStoreError>> {
        self.faults.unresolved(now, stale_before, limit)
    }
    fn bind_id<'a>(
        &'a self,
        id: &'a str,
        binding: &'a IdBinding,
        now: u64,
    ) -> BoxFuture<'a, Result<IdClaim, PaymentStoreError>> {
        self.faults.bind_id(id, binding, now)
    }
    fn use_nonce<'a>(
        &'a self,
        nonce: &'a alloy_primitives::B256,
        expires_at: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<bool, PaymentStoreError>> {
        self.faults.use_nonce(nonce, expires_at, now)
    }
}

impl ExpiringPaymentStore for FaultyPayments {
    fn purge_expired(&self, before: u64) -> StoreFuture<'_, usize> {
        self.inner.purge_expired(before)
    }
}

use std::sync::Arc;

use reference_server::store::{ExpiringPaymentStore, StoreFuture};
use x402_tower::layer::faults::{Fault, FaultyStore, StoreOp};
use x402_tower::pricing::BoxFuture;
use x402_tower::store::{
    IdBinding, IdClaim, PaymentKey, PaymentRecord, PaymentStore, Reservation,
    StoreError as PaymentStoreError,
};

#[tokio::test]
async fn a_payment_record_the_database_will_not_write_after_the_settlement_is_reconciled_once() {
    let dir = Arc::new(TempDir::new());
    let mut config = reference_server::Config::for_tests();
    config.registry.database = Some(fresh_database(dir.path(), "db.sqlite3").await);
    config.registry.media_dir = Some(dir.path().join("media"));
    config.payment.payment_stale_after_secs = 10;
    let mut faults = None;
    let server = TestServer::start_wrapping(config, Some(dir), |mut stores| {
        let inner = stores.payments.clone();
        let faulty = FaultyStore::new(inner.clone());
        faults = Some(faulty.clone());
        stores.payments = Arc::new(FaultyPayments {
            faults: faulty,
            inner,
        });
        stores
    })
    .await;
    let faults = faults.expect("the wrapped store");
    let (required, _) = offer(&server, ARTICLE).await;
    let header = Payer::new().pay_v2(&required);
    let url = server.url(&format!("/x402Article?articleId={ARTICLE}"));

    // Every write of the payment record fails: the settled state is never saved. The buyer still gets the
    // article (the money moved, the receipt is stored).
    faults.always(StoreOp::Update, Fault::Fail);
    let first = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
    assert_eq!(first.status(), 200);
    let tx = decode_header(&first, "payment-response")["transaction"].clone();
    assert!(faults.calls(StoreOp::Update) >= 3, "tried again");
    faults.heal();

    // Its resend waits for the record, left in flight, to turn stale, then is reconciled and delivered:
    // the same receipt, one settlement in the log, one receipt.
    let started = std::time::Instant::now();
    let again = loop {
        let resp = server.get_with(&url, "PAYMENT-SIGNATURE", &header).await;
        if resp.status() == 200 {
            break resp;
        }
        assert_eq!(resp.status(), 402);
        assert_eq!(
            decode_header(&resp, "payment-response")["errorReason"],
            "settlement_pending"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(90),
            "not delivered within 90 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    assert_eq!(decode_header(&again, "payment-response")["transaction"], tx);
    assert_eq!(server.state.licensing.count_receipts().await.unwrap(), 1);
    assert_eq!(settled(&server).await, 1, "one settlement in the log");
}
