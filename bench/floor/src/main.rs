//! The floor of a durable purchase (issue #15): the least a server can do per purchase for what
//! the reference server's verify-only mode does, to compare the issue's targets with. It sells
//! `GET /x402Article` for 0.01 USDC on Base Sepolia and does, per paid request:
//!
//! 1. Base64 and JSON decode of `PAYMENT-SIGNATURE` (x402-tower's `payload_from_str`), `accepted` compared
//!    with its one offer;
//! 2. x402-tower's `check_authorization`: recipient, amount, time window, and the signature recovered under
//!    USDC's rules (libsecp256k1);
//! 3. unless `FLOOR_RECEIPT=0`, a receipt signed with a key of its own by x402-tower's `OfferReceipt`
//!    (`sign_receipt`: the reference server's own EIP-712 receipt signer, libsecp256k1);
//! 4. unless `FLOOR_STORE=none`, one row per purchase (the authorization and the receipt) in SQLite under a
//!    unique random key (the replay check), written by one writer thread that commits what has arrived
//!    (WAL, 8 KiB pages, `synchronous = FULL`, `fdatasync`, SQLite's own checkpoints every 1,000 pages),
//!    the client answered after its commit. `FLOOR_WRITES` writes more, to price the reference server's
//!    pattern piece by piece: `receipt` adds a receipts row under a second random key (its token id) in the
//!    same commit (`receipt-ordered`: under a token id that sorts by issue time); `2` reserves the payment
//!    in a table with the reference server's two more indexes, commits, then marks it settled in a second
//!    commit; `4` is `2` plus a settlements row and the receipts row in the second commit (the reference
//!    server's four writes);
//! 5. the answer: an article body and `PAYMENT-RESPONSE`, 3.6 KB in all like the reference server's.
//!
//! It has no tracing, no metrics, no CORS or compression layers, no request ids, no settlement records
//! apart from the one row, no reservation before settling, no reconciliation, no payment identifiers, no
//! bazaar or terms. It is not a server anyone should run: it is the measuring stick.
//!
//! Started by the load tool like a reference server (`LOAD_SERVER_BIN=<this binary>`): it takes `--listen`
//! and `--database` (a path; `:memory:` is taken as no store), ignores the rest, and prints its URL on the
//! first line.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{SystemTime, UNIX_EPOCH};

use alloy_primitives::{Address, B256, U256, address, b256, keccak256};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;
use tokio::sync::oneshot;
use x402_tower::network::{Network, Token};
use x402_tower::PaymentOffer;
use x402_tower::extensions::offer_receipt::OfferReceipt;
use x402_tower::Price;
use x402_tower::proto::{ExactEvmPayload, PaymentPayload, PaymentRequirementsV2};
use x402_tower::scheme::check_authorization;
use x402_tower::verify::{domain_separator, payload_from_str};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PAY_TO: Address = address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
const USDC: Address = address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e");
const CHAIN_ID: u64 = 84532;
const AMOUNT: u64 = 10_000;
/// A fixed receipt key (a well-known anvil development key; this binary signs nothing of value).
const RECEIPT_KEY: B256 =
    b256!("0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d");
/// The reference server's paid answer is 3.6 KB (its article, links and `PAYMENT-RESPONSE`).
const BODY_LEN: usize = 2_600;
/// The reference server's 402 declares 3.6 KB of extensions, which a client echoes in its payment: the
/// same size is declared here so that requests are as large.
const ECHOED_LEN: usize = 3_600;

/// A write and where to say whether it took (`false`: the authorization was used). Each is one job of
/// the writer, so everything in it is in one commit.
type Job = (Write, oneshot::Sender<Result<bool, String>>);

/// A receipts row: its token id, its payer (for the `(article_id, payer)` index) and the signed receipt.
struct ReceiptRow {
    token: String,
    payer: String,
    receipt: String,
}

/// The writes of a purchase.
enum Write {
    /// The purchase's one row under its key, and with `FLOOR_WRITES=receipt` a receipts row.
    Purchase {
        key: String,
        payment: String,
        settlement: String,
        receipt_row: Option<ReceiptRow>,
    },
    /// `FLOOR_WRITES=2` or `4`, first commit: the payment reserved (its row in a table with two more indexes,
    /// as the reference server's `payment_states`) before it is settled.
    Reserve {
        key: String,
        payment: String,
        requirements: Arc<str>,
    },
    /// `FLOOR_WRITES=2` or `4`, second commit: the row marked settled with the settlement; with `4` also a
    /// settlements row and a receipts row.
    Settle {
        key: String,
        settlement: String,
        rows: Option<ReceiptRow>,
    },
}

/// `FLOOR_WRITES`, read once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writes {
    /// `1` (default): one row per purchase.
    One,
    /// `receipt`: also a receipts row under a second random key (its token id), in the same commit;
    /// `receipt-ordered`: under a token id that sorts by issue time.
    Receipt { ordered: bool },
    /// `2`: reserved, committed, then marked settled; `4`: and a settlements and a receipts row with it (the
    /// reference server's four writes).
    Reserved { rows: bool },
}

impl Writes {
    fn from_env() -> Result<Self, String> {
        match std::env::var("FLOOR_WRITES").as_deref() {
            Err(_) | Ok("1") => Ok(Writes::One),
            Ok("receipt") => Ok(Writes::Receipt { ordered: false }),
            Ok("receipt-ordered") => Ok(Writes::Receipt { ordered: true }),
            Ok("2") => Ok(Writes::Reserved { rows: false }),
            Ok("4") => Ok(Writes::Reserved { rows: true }),
            Ok(other) => Err(format!(
                "FLOOR_WRITES={other:?}: expected 1, receipt, receipt-ordered, 2 or 4"
            )),
        }
    }
}

/// Whether an on/off variable is on: unset is `default`; anything but the two spellings is an error, so
/// a typo never measures the wrong server.
fn switch(name: &str, on: &str, off: &str, default: bool) -> Result<bool, String> {
    match std::env::var(name).as_deref() {
        Err(_) => Ok(default),
        Ok(v) if v == on => Ok(true),
        Ok(v) if v == off => Ok(false),
        Ok(v) => Err(format!("{name}={v:?}: expected {on} or {off}")),
    }
}

struct App {
    required: HeaderValue,
    requirements: PaymentRequirementsV2,
    /// `requirements` as JSON, for a reservation's row.
    requirements_json: Arc<str>,
    offer: PaymentOffer,
    domain: B256,
    /// The article's URL and CAIP-2 network, as a receipt names them.
    resource_url: String,
    network: String,
    receipt: Option<OfferReceipt>,
    store: Option<mpsc::Sender<Job>>,
    writes: Writes,
    body: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut listen: SocketAddr = "127.0.0.1:0".parse()?;
    let mut database = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => listen = args.next().ok_or("--listen needs an address")?.parse()?,
            "--database" => database = args.next(),
            _ => {}
        }
    }
    let writes = Writes::from_env()?;
    let store = match (switch("FLOOR_STORE", "sqlite", "none", true)?, database) {
        (true, Some(path)) if path != ":memory:" => Some(writer(path)?),
        _ => None,
    };
    let receipt = switch("FLOOR_RECEIPT", "1", "0", true)?
        .then(|| OfferReceipt::from_secret(RECEIPT_KEY))
        .transpose()?;

    let listener = tokio::net::TcpListener::bind(listen).await?;
    let url = format!("http://{}", listener.local_addr()?);
    let requirements: PaymentRequirementsV2 = serde_json::from_value(json!({
        "scheme": "exact",
        "network": format!("eip155:{CHAIN_ID}"),
        "amount": AMOUNT.to_string(),
        "asset": USDC.to_checksum(None),
        "payTo": PAY_TO.to_checksum(None),
        "maxTimeoutSeconds": 300,
        "extra": {"name": "USDC", "version": "2"},
    }))?;
    let resource_url = format!("{url}/x402Article");
    let required = json!({
        "x402Version": 2,
        "error": "PAYMENT-SIGNATURE header is required",
        "resource": {"url": resource_url, "description": "", "mimeType": "application/json"},
        "accepts": [requirements],
        "extensions": {"echoed": {"info": "x".repeat(ECHOED_LEN)}},
    });
    let token = Token::new(USDC, "USDC", "2", 6);
    let network = Network::from_chain_id(CHAIN_ID);
    let app = Arc::new(App {
        required: HeaderValue::from_str(&STANDARD.encode(required.to_string()))?,
        domain: domain_separator(CHAIN_ID, &token),
        offer: PaymentOffer::new(network, token, PAY_TO, Price::from(U256::from(AMOUNT))),
        requirements_json: serde_json::to_string(&requirements)?.into(),
        requirements,
        resource_url,
        network: format!("eip155:{CHAIN_ID}"),
        receipt,
        store,
        writes,
        body: format!(
            r#"{{"id":"c2pa-explained","content":"{}"}}"#,
            "x".repeat(BODY_LEN)
        ),
    });
    let router = Router::new()
        .route("/x402Article", get(article))
        .with_state(app);
    println!("purchase floor on {url}");
    axum::serve(listener, router).await?;
    Ok(())
}

async fn article(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let Some(header) = headers.get("payment-signature") else {
        return refused(&app, "PAYMENT-SIGNATURE header is required");
    };
    let Some(text) = STANDARD
        .decode(header.as_bytes())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
    else {
        return refused(&app, "invalid_payload");
    };
    let payload = match payload_from_str(&text) {
        Ok(PaymentPayload::V2(p)) if p.accepted == app.requirements => PaymentPayload::V2(p),
        _ => return refused(&app, "No matching payment requirements"),
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if check_authorization(&payload, &app.offer, &app.domain, now).is_err() {
        return refused(&app, "invalid_exact_evm_payload_signature");
    }
    let Ok(exact) = serde_json::from_str::<ExactEvmPayload>(payload.scheme_payload().get()) else {
        return refused(&app, "invalid_payload");
    };
    let auth = &exact.authorization;
    let payer = auth.from.to_checksum(None);

    // The receipt, signed by x402-tower's issuer as the reference server signs its receipts.
    let receipt = match &app.receipt {
        Some(issuer) => {
            match issuer.sign_receipt(&app.resource_url, &payer, &app.network, "verify-only", now) {
                Ok(signed) => Some(json!(signed)),
                Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
        None => None,
    };
    let mut settlement = json!({
        "success": true,
        "transaction": "verify-only",
        "network": app.network,
        "payer": payer,
    });
    if let Some(receipt) = &receipt {
        settlement["extensions"] = json!({"offer-receipt": {"info": {"receipt": receipt}}});
    }
    let settlement = settlement.to_string();
    let Ok(response) = HeaderValue::from_str(&STANDARD.encode(&settlement)) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };

    if let Some(store) = &app.store {
        let key = format!("{CHAIN_ID}:{USDC}:{payer}:{}", auth.nonce);
        let Ok(payment) = serde_json::to_string(&exact) else {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        };
        let receipt_row = |ordered: bool| ReceiptRow {
            token: token_id(&key, ordered),
            payer: payer.clone(),
            receipt: receipt
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
        };
        let writes = match app.writes {
            Writes::One => vec![Write::Purchase {
                receipt_row: None,
                key,
                payment,
                settlement,
            }],
            Writes::Receipt { ordered } => vec![Write::Purchase {
                receipt_row: Some(receipt_row(ordered)),
                key,
                payment,
                settlement,
            }],
            Writes::Reserved { rows } => vec![
                Write::Reserve {
                    key: key.clone(),
                    payment,
                    requirements: app.requirements_json.clone(),
                },
                Write::Settle {
                    rows: rows.then(|| receipt_row(false)),
                    key,
                    settlement,
                },
            ],
        };
        // In order (a reservation's commit before the settlement's), each answered before the next.
        for write in writes {
            let (tx, rx) = oneshot::channel();
            if store.send((write, tx)).is_err() {
                return StatusCode::SERVICE_UNAVAILABLE.into_response();
            }
            match rx.await {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => {
                    return refused(&app, "invalid_exact_evm_payload_authorization_nonce_used");
                }
                _ => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
            }
        }
    }
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (
                header::HeaderName::from_static("payment-response"),
                response,
            ),
        ],
        app.body.clone(),
    )
        .into_response()
}

/// A receipt's token id: today's shape (a hash of the payment identity as a decimal number; Keccak here,
/// SHA-256 in the reference server, equally random), or one that sorts by issue time (nanoseconds, then the
/// hash), whose index grows at one end.
fn token_id(key: &str, ordered: bool) -> String {
    let hash = keccak256(key.as_bytes());
    if ordered {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{nanos:020}{hash}")
    } else {
        U256::from_be_bytes(hash.0).to_string()
    }
}

fn refused(app: &App, error: &'static str) -> Response {
    (
        StatusCode::PAYMENT_REQUIRED,
        [(
            header::HeaderName::from_static("payment-required"),
            app.required.clone(),
        )],
        error,
    )
        .into_response()
}

/// The one writer: commits whatever has arrived, then answers each purchase. A used key is not inserted
/// (`INSERT OR IGNORE`), so one refused purchase never rolls back the others of its commit. It is its own
/// minimal copy of the reference server's group commit (`store::sqlite`, whose yields it repeats), without
/// its savepoints, boxed jobs, metrics, checkpoint thread and reads: the floor measures the least a
/// durable row costs, not that writer.
fn writer(path: String) -> Result<mpsc::Sender<Job>, Box<dyn std::error::Error>> {
    let conn = rusqlite::Connection::open(path)?;
    conn.pragma_update(None, "page_size", 8192)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS purchases (
             id      INTEGER PRIMARY KEY,
             key     TEXT NOT NULL UNIQUE,
             payment TEXT NOT NULL,
             receipt TEXT NOT NULL,
             at      INTEGER NOT NULL
         );
         CREATE TABLE IF NOT EXISTS payments (
             id           INTEGER PRIMARY KEY,
             key          TEXT NOT NULL UNIQUE,
             state        TEXT NOT NULL,
             payment      TEXT NOT NULL,
             requirements TEXT NOT NULL,
             settlement   TEXT,
             expires_at   INTEGER NOT NULL,
             updated_at   INTEGER NOT NULL
         );
         CREATE INDEX IF NOT EXISTS payments_unresolved ON payments (updated_at) WHERE state = 'in_flight';
         CREATE INDEX IF NOT EXISTS payments_expiry ON payments (expires_at);
         CREATE TABLE IF NOT EXISTS settlements (
             id      INTEGER PRIMARY KEY AUTOINCREMENT,
             at      TEXT NOT NULL,
             outcome TEXT NOT NULL,
             key     TEXT NOT NULL
         );
         CREATE INDEX IF NOT EXISTS settlements_outcome ON settlements (outcome, id);
         CREATE TABLE IF NOT EXISTS receipts (
             token_id   TEXT PRIMARY KEY,
             article_id TEXT NOT NULL,
             payer      TEXT NOT NULL,
             receipt    TEXT NOT NULL,
             created_at TEXT NOT NULL
         );
         CREATE INDEX IF NOT EXISTS receipts_article_payer ON receipts (article_id, payer);",
    )?;
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("floor-writer".into())
        .spawn(move || {
            while let Ok(first) = rx.recv() {
                let mut batch = vec![first];
                // Let the other tasks of this instant reach the queue, as the reference server's writer does
                // (its `MAX_YIELDS`).
                for _ in 0..4 {
                    let before = batch.len();
                    std::thread::yield_now();
                    batch.extend(rx.try_iter());
                    if batch.len() == before {
                        break;
                    }
                }
                let result = commit(&conn, &batch);
                for ((_, reply), r) in batch.into_iter().zip(result) {
                    let _ = reply.send(r);
                }
            }
        })?;
    Ok(tx)
}

fn commit(conn: &rusqlite::Connection, batch: &[Job]) -> Vec<Result<bool, String>> {
    let run = || -> Result<Vec<bool>, rusqlite::Error> {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let mut inserted = Vec::with_capacity(batch.len());
        for (write, _) in batch {
            inserted.push(match write {
                Write::Purchase {
                    key,
                    payment,
                    settlement,
                    receipt_row,
                } => {
                    let new = conn
                        .prepare_cached(
                            "INSERT OR IGNORE INTO purchases (key, payment, receipt, at) \
                             VALUES (?1, ?2, ?3, unixepoch())",
                        )?
                        .execute((key, payment, settlement))?
                        == 1;
                    if new && let Some(row) = receipt_row {
                        insert_receipt(conn, row)?;
                    }
                    new
                }
                Write::Reserve {
                    key,
                    payment,
                    requirements,
                } => {
                    conn.prepare_cached(
                        "INSERT OR IGNORE INTO payments (key, state, payment, requirements, expires_at, \
                         updated_at) VALUES (?1, 'in_flight', ?2, ?3, unixepoch() + 300, unixepoch())",
                    )?
                    .execute((key, payment, &**requirements))?
                        == 1
                }
                Write::Settle {
                    key,
                    settlement,
                    rows,
                } => {
                    let settled = conn
                        .prepare_cached(
                            "UPDATE payments SET state = 'settled', settlement = ?2, updated_at = unixepoch() \
                             WHERE key = ?1 AND state = 'in_flight'",
                        )?
                        .execute((key, settlement))?
                        == 1;
                    if settled && let Some(row) = rows {
                        conn.prepare_cached(
                            "INSERT INTO settlements (at, outcome, key) \
                             VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'settled', ?1)",
                        )?
                        .execute([key])?;
                        insert_receipt(conn, row)?;
                    }
                    settled
                }
            });
        }
        conn.execute_batch("COMMIT")?;
        Ok(inserted)
    };
    match run() {
        Ok(inserted) => inserted.into_iter().map(Ok).collect(),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            batch.iter().map(|_| Err(e.to_string())).collect()
        }
    }
}

fn insert_receipt(conn: &rusqlite::Connection, row: &ReceiptRow) -> Result<usize, rusqlite::Error> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO receipts (token_id, article_id, payer, receipt, created_at) \
         VALUES (?1, 'c2pa-explained', ?2, ?3, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
    )?
    .execute((&row.token, &row.payer, &row.receipt))
}
