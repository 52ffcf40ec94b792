//! `reference-server migrate-sqlite-to-postgres`: a SQLite deployment moved to PostgreSQL keeps its
//! receipts, payment records, registry and llms.txt interest. Needs PostgreSQL: it runs in the suite's
//! PostgreSQL pass (`REFERENCE_SERVER_TEST_POSTGRES`, set by the test command).

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use crate::common::*;
use crate::licensing::{ARTICLE, json, offer, wait_for_llms_txt_total};

fn migrate(from: &std::path::Path, to: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_reference-server"))
        .arg("migrate-sqlite-to-postgres")
        .arg("--from")
        .arg(from)
        .args(["--to", to])
        .output()
        .expect("run binary")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_deployment_moves_to_postgres_with_its_receipts_records_assets_and_interest() {
    if !in_postgres_pass() {
        return;
    }
    let dir = Arc::new(TempDir::new());
    let sqlite = dir.path().join("old.sqlite3");
    let mut config = reference_server::Config::for_tests();
    config.registry.database = Some(sqlite.display().to_string());
    config.registry.media_dir = Some(dir.path().join("media"));
    config.registry.seed_assets = 30;
    let server = TestServer::start_config(config.clone(), Some(dir.clone())).await;
    let (required, _) = offer(&server, ARTICLE).await;
    let header = Payer::new().pay_v2(&required);
    let path = format!("/x402Article?articleId={ARTICLE}");
    let paid = server
        .get_with(server.url(&path), "PAYMENT-SIGNATURE", &header)
        .await;
    assert_eq!(paid.status(), 200);
    let token = json(paid).await["receipt"]["nft"]["tokenId"]
        .as_str()
        .unwrap()
        .to_owned();
    for _ in 0..3 {
        assert_eq!(server.get("/serveLlmsTxt").await.status(), 200);
    }
    let listing = json(server.get("/api/v3/assets/?limit=100").await).await;
    server.stop().await; // flushes the llms.txt interest

    let target = fresh_database(dir.path(), "unused").await;
    // Payment records arrive whole. The purchase's is settled, so it keeps no payment; a payment whose
    // request died mid-settlement (in flight: the reconciler's, on PostgreSQL next) keeps the payment as
    // the client sent it.
    let sent = String::from_utf8(B64.decode(Payer::new().pay_v2(&required)).unwrap()).unwrap();
    let authorization =
        serde_json::from_str::<serde_json::Value>(&sent).unwrap()["payload"]["authorization"]
            .clone();
    let requirements = required["accepts"][0].to_string();
    let old = rusqlite::Connection::open(&sqlite).unwrap();
    old.execute(
        "INSERT INTO payment_states (chain_id, asset, payer, nonce, state, resource, fingerprint, \
         settlement, payload, requirements, expires_at, updated_at, revision) \
         SELECT chain_id, asset, ?1, ?2, 'in_flight', resource, fingerprint, NULL, ?3, ?4, expires_at, \
         updated_at, 1 FROM payment_states",
        rusqlite::params![
            authorization["from"].as_str().unwrap(),
            authorization["nonce"].as_str().unwrap(),
            sent,
            requirements
        ],
    )
    .unwrap();
    let records_on_sqlite: Vec<(String, String, String, String)> = old
        .prepare("SELECT state, nonce, payload, requirements FROM payment_states ORDER BY state")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    drop(old);
    assert_eq!(records_on_sqlite.len(), 2);
    assert_eq!(records_on_sqlite[0].0, "in_flight");
    assert!(records_on_sqlite[0].2.contains("\"signature\""));
    assert_eq!(records_on_sqlite[1].0, "settled");
    assert_eq!(
        (&*records_on_sqlite[1].2, &*records_on_sqlite[1].3),
        ("", ""),
        "a settled record keeps no payment"
    );
    let out = migrate(&sqlite, &target);
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("receipts: 1 rows"), "{printed}");
    assert!(printed.contains("assets: 30 rows"), "{printed}");
    let (pg, connection) = tokio_postgres::connect(&target, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let records_on_pg: Vec<(String, String, String, String)> = pg
        .query(
            "SELECT state, nonce, payload, requirements FROM payment_states ORDER BY state",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(records_on_pg, records_on_sqlite);
    drop(pg);
    // A second copy into the same database is refused and writes nothing.
    let again = migrate(&sqlite, &target);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));

    config.registry.database = Some(target);
    let server = TestServer::start_config(config, Some(dir)).await;
    assert_eq!(
        server.get(&format!("/receipts/{token}")).await.status(),
        200
    );
    let moved = json(server.get("/api/v3/assets/?limit=100").await).await;
    let cids = |v: &serde_json::Value| {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["cid"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(moved["count"], listing["count"]);
    assert_eq!(cids(&moved), cids(&listing));
    wait_for_llms_txt_total(&server, 3).await;
    // The payment record came along: the same authorization is not taken again.
    let (required, _) = offer(&server, ARTICLE).await;
    let replay = Payer::new().pay_v2_with_nonce_of(&required, &header);
    let resp = server
        .get_with(server.url(&path), "PAYMENT-SIGNATURE", &replay)
        .await;
    assert_eq!(resp.status(), 402, "the migrated record refuses the nonce");
    assert_eq!(server.state.licensing.count_receipts().await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_that_fails_half_way_writes_nothing() {
    if !in_postgres_pass() {
        return;
    }
    let dir = TempDir::new();
    let sqlite = dir.path().join("bad.sqlite3");
    reference_server::store::Db::open(&sqlite).unwrap();
    // Articles copy fine; a receipt whose x402 version does not fit PostgreSQL's SMALLINT fails the copy
    // after them.
    let conn = rusqlite::Connection::open(&sqlite).unwrap();
    conn.execute_batch(
        "INSERT INTO articles (id, title, excerpt, content, author_name, published_date, price_atomic, published)
             VALUES ('a', 't', 'e', 'c', 'n', '2025-01-01', 10000, 1);
         INSERT INTO receipts (token_id, article_id, payer, pay_to, amount_atomic, network, asset, nonce,
             x402_version, settlement, created_at)
             VALUES ('1', 'a', '0x1', '0x2', '10000', 'eip155:84532', '0x3', '0xaa', 70000, 'verify-only', 't');",
    )
    .unwrap();
    drop(conn);
    let target = fresh_database(dir.path(), "unused").await;
    let out = migrate(&sqlite, &target);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing was written"));
    let (client, connection) = tokio_postgres::connect(&target, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    for table in reference_server::store::migrate::TABLES {
        let n: i64 = client
            .query_one(&format!("SELECT COUNT(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "{table} kept rows of a failed migration");
    }
    // And the same file, once fixed, migrates.
    let conn = rusqlite::Connection::open(&sqlite).unwrap();
    conn.execute("UPDATE receipts SET x402_version = 2", [])
        .unwrap();
    drop(conn);
    assert!(migrate(&sqlite, &target).status.success());
}
