//! The floor of a durable purchase (issue #15, session 21): the least a server can do per purchase for what
//! the reference server's verify-only mode does, to compare the issue's targets with. It sells
//! `GET /x402Article` for 0.01 USDC on Base Sepolia and does, per paid request:
//!
//! 1. Base64 and JSON decode of `PAYMENT-SIGNATURE` (x402-tower's `payload_from_str`), `accepted` compared
//!    with its one offer;
//! 2. x402-tower's `check_authorization`: recipient, amount, time window, and the signature recovered under
//!    USDC's rules (libsecp256k1);
//! 3. unless `FLOOR_RECEIPT=0`, a receipt signed with a key of its own (an EIP-712-like digest, two Keccaks,
//!    and a recoverable ECDSA signature with an RFC 6979 nonce, as the reference server signs its receipts);
//! 4. unless `FLOOR_STORE=none`, one row per purchase (the authorization and the receipt) in SQLite under a
//!    unique random key (the replay check), written by one writer thread that commits what has arrived
//!    (WAL, 8 KiB pages, `synchronous = FULL`, `fdatasync`, SQLite's own checkpoints every 1,000 pages),
//!    the client answered after its commit. `FLOOR_WRITES` writes more, to price the reference server's
//!    pattern piece by piece: `receipt` adds a receipts row under a second random key (its token id) in the
//!    same commit (`receipt-ordered`: under a token id that sorts by issue time); `2` reserves the payment in a table with the reference server's two more indexes,
//!    commits, then marks it settled in a second commit; `4` is `2` plus a settlements row and the receipts
//!    row in the second commit (the reference server's four writes);
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

use alloy_primitives::{Address, B256, address, keccak256};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use secp256k1::{Message, Secp256k1, SecretKey, SignOnly};
use serde_json::json;
use tokio::sync::oneshot;
use x402_tower::network::{Network, Token};
use x402_tower::offer::PaymentOffer;
use x402_tower::price::Price;
use x402_tower::proto::{PaymentPayload, PaymentRequirementsV2};
use x402_tower::verify::{check_authorization, domain_separator, payload_from_str};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PAY_TO: Address = address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
const USDC: Address = address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e");
const CHAIN_ID: u64 = 84532;
const AMOUNT: u64 = 10_000;
/// A fixed receipt key (a well-known anvil development key; this binary signs nothing of value).
const RECEIPT_KEY: [u8; 32] = [
    0x59, 0xc6, 0x99, 0x5e, 0x99, 0x8f, 0x97, 0xa5, 0xa0, 0x04, 0x49, 0x66, 0xf0, 0x94, 0x53, 0x89,
    0xdc, 0x9e, 0x86, 0xda, 0xe8, 0x8c, 0x7a, 0x84, 0x12, 0xf4, 0x60, 0x3b, 0x6b, 0x78, 0x69, 0x0d,
];
/// The reference server's paid answer is 3.6 KB (its article, links and `PAYMENT-RESPONSE`).
const BODY_LEN: usize = 2_600;
/// The reference server's 402 declares 3.6 KB of extensions, which a client echoes in its payment: the
/// same size is declared here so that requests are as large.
const ECHOED_LEN: usize = 3_600;

/// A write and where to say whether it took (`false`: the authorization was used).
type Job = (Write, oneshot::Sender<Result<bool, String>>);

/// The writes of a purchase.
enum Write {
    /// `FLOOR_WRITES=1` (default): the purchase's one row, under its key.
    Purchase {
        key: String,
        payment: String,
        receipt: String,
    },
    /// `FLOOR_WRITES=2` or `4` (the reference server's pattern), first commit: the payment reserved (its row in a
    /// table with two more indexes) before it is settled.
    Reserve {
        key: String,
        payment: String,
        requirements: String,
    },
    /// `FLOOR_WRITES=2` or `4`, second commit: the row marked settled with the settlement; with `4` (`rows`)
    /// also a settlements row and a receipts row under a second random key.
    Settle {
        key: String,
        settlement: String,
        token: String,
        receipt: String,
        rows: bool,
    },
    /// `FLOOR_WRITES=receipt`: the one row and a receipts row (a second random key), one commit;
    /// `receipt-ordered`: the same with a token id that sorts by issue time.
    Receipt {
        key: String,
        token: String,
        receipt: String,
    },
}

struct App {
    required: HeaderValue,
    requirements: PaymentRequirementsV2,
    offer: PaymentOffer,
    domain: B256,
    receipt: Option<(Secp256k1<SignOnly>, SecretKey)>,
    store: Option<mpsc::Sender<Job>>,
    /// `FLOOR_WRITES`: `1` (default), `receipt`, `2` (reserve, then mark settled) or `4` (the reference
    /// server's four writes).
    writes: String,
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
    let store = match (std::env::var("FLOOR_STORE").as_deref(), database) {
        (Ok("none"), _) | (_, None) => None,
        (_, Some(d)) if d == ":memory:" => None,
        (_, Some(path)) => Some(writer(path)?),
    };
    let receipt = (std::env::var("FLOOR_RECEIPT").as_deref() != Ok("0"))
        .then(|| {
            Ok::<_, secp256k1::Error>((
                Secp256k1::signing_only(),
                SecretKey::from_byte_array(RECEIPT_KEY)?,
            ))
        })
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
    let required = json!({
        "x402Version": 2,
        "error": "PAYMENT-SIGNATURE header is required",
        "resource": {"url": format!("{url}/x402Article"), "description": "", "mimeType": "application/json"},
        "accepts": [requirements],
        "extensions": {"echoed": {"info": "x".repeat(ECHOED_LEN)}},
    });
    let token = Token::new(USDC, "USDC", "2", 6);
    let network = Network::from_chain_id(CHAIN_ID);
    let app = Arc::new(App {
        required: HeaderValue::from_str(&STANDARD.encode(required.to_string()))?,
        domain: domain_separator(CHAIN_ID, &token),
        offer: PaymentOffer::new(
            network,
            token,
            PAY_TO,
            Price::from(alloy_primitives::U256::from(AMOUNT)),
        ),
        requirements,
        receipt,
        store,
        writes: std::env::var("FLOOR_WRITES").unwrap_or_else(|_| "1".into()),
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
    let Ok(text) = STANDARD.decode(header.as_bytes()).map(String::from_utf8) else {
        return refused(&app, "invalid_payload");
    };
    let Ok(text) = text else {
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
    let auth = &payload.exact().authorization;
    let payer = auth.from.to_checksum(None);

    // The receipt: a typed-data digest (struct hash, then domain and struct), signed recoverably.
    let mut receipt = json!({
        "payer": payer,
        "payTo": PAY_TO.to_checksum(None),
        "amount": auth.value.to_string(),
        "network": format!("eip155:{CHAIN_ID}"),
        "nonce": auth.nonce.to_string(),
        "issuedAt": now,
    });
    if let Some((secp, key)) = &app.receipt {
        let mut data = Vec::with_capacity(160);
        data.extend_from_slice(auth.from.as_slice());
        data.extend_from_slice(&auth.value.to_be_bytes::<32>());
        data.extend_from_slice(auth.nonce.as_slice());
        data.extend_from_slice(&now.to_be_bytes());
        let mut typed = [0u8; 66];
        typed[..2].copy_from_slice(&[0x19, 0x01]);
        typed[2..34].copy_from_slice(app.domain.as_slice());
        typed[34..].copy_from_slice(keccak256(&data).as_slice());
        let digest = Message::from_digest(keccak256(typed).0);
        let (id, sig) = secp.sign_ecdsa_recoverable(digest, key).serialize_compact();
        let mut bytes = sig.to_vec();
        bytes.push(27 + i32::from(id) as u8);
        receipt["signature"] = json!(alloy_primitives::hex::encode_prefixed(bytes));
    }
    let settlement = json!({
        "success": true,
        "transaction": "verify-only",
        "network": format!("eip155:{CHAIN_ID}"),
        "payer": payer,
        "extensions": {"offer-receipt": {"receipt": receipt}},
    })
    .to_string();

    if let Some(store) = &app.store {
        let key = format!("84532:{USDC}:{payer}:{}", auth.nonce);
        let Ok(record) = serde_json::to_string(payload.exact()) else {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        };
        let token = if app.writes == "receipt-ordered" {
            // A token id that sorts by issue time (nanoseconds, then the hash): its index grows at one end.
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            format!("{nanos:020}{}", keccak256(key.as_bytes()))
        } else {
            alloy_primitives::U256::from_be_bytes(keccak256(key.as_bytes()).0).to_string()
        };
        let writes = match app.writes.as_str() {
            "2" | "4" => {
                let Ok(requirements) = serde_json::to_string(&app.requirements) else {
                    return StatusCode::INTERNAL_SERVER_ERROR.into_response();
                };
                vec![
                    Write::Reserve {
                        key: key.clone(),
                        payment: record,
                        requirements,
                    },
                    Write::Settle {
                        key,
                        settlement: settlement.clone(),
                        token,
                        receipt: receipt.to_string(),
                        rows: app.writes == "4",
                    },
                ]
            }
            "receipt" | "receipt-ordered" => vec![
                Write::Purchase {
                    key: key.clone(),
                    payment: record,
                    receipt: settlement.clone(),
                },
                Write::Receipt {
                    key,
                    token,
                    receipt: receipt.to_string(),
                },
            ],
            _ => vec![Write::Purchase {
                key,
                payment: record,
                receipt: settlement.clone(),
            }],
        };
        // Writes of one commit go together; a reservation is committed before the settlement is written.
        let batches: Vec<Vec<Write>> = if app.writes.starts_with("receipt") {
            vec![writes]
        } else {
            writes.into_iter().map(|w| vec![w]).collect()
        };
        for batch in batches {
            let mut replies = Vec::new();
            for write in batch {
                let (tx, rx) = oneshot::channel();
                if store.send((write, tx)).is_err() {
                    return StatusCode::SERVICE_UNAVAILABLE.into_response();
                }
                replies.push(rx);
            }
            for rx in replies {
                match rx.await {
                    Ok(Ok(true)) => {}
                    Ok(Ok(false)) => {
                        return refused(&app, "invalid_exact_evm_payload_authorization_nonce_used");
                    }
                    _ => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
                }
            }
        }
    }
    let Ok(response) = HeaderValue::from_str(&STANDARD.encode(settlement)) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
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
/// (`INSERT OR IGNORE`), so one refused purchase never rolls back the others of its commit.
fn writer(path: String) -> Result<mpsc::Sender<Job>, rusqlite::Error> {
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
                // Let the other tasks of this instant reach the queue, as the reference server's writer does.
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
        })
        .map_err(|_| rusqlite::Error::InvalidQuery)?;
    Ok(tx)
}

fn commit(conn: &rusqlite::Connection, batch: &[Job]) -> Vec<Result<bool, String>> {
    let run = || -> Result<Vec<bool>, rusqlite::Error> {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let mut inserted = Vec::with_capacity(batch.len());
        for (write, _) in batch {
            inserted.push(match write {
                Write::Purchase { key, payment, receipt } => {
                    conn.prepare_cached(
                        "INSERT OR IGNORE INTO purchases (key, payment, receipt, at) \
                         VALUES (?1, ?2, ?3, unixepoch())",
                    )?
                    .execute((key, payment, receipt))?
                        == 1
                }
                Write::Reserve { key, payment, requirements } => {
                    conn.prepare_cached(
                        "INSERT OR IGNORE INTO payments (key, state, payment, requirements, expires_at, \
                         updated_at) VALUES (?1, 'in_flight', ?2, ?3, unixepoch() + 300, unixepoch())",
                    )?
                    .execute((key, payment, requirements))?
                        == 1
                }
                Write::Settle { key, settlement, token, receipt, rows } => {
                    let updated = conn
                        .prepare_cached(
                            "UPDATE payments SET state = 'settled', settlement = ?2, updated_at = unixepoch() \
                             WHERE key = ?1 AND state = 'in_flight'",
                        )?
                        .execute((key, settlement))?;
                    if *rows {
                        conn.prepare_cached(
                            "INSERT INTO settlements (at, outcome, key) \
                             VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'settled', ?1)",
                        )?
                        .execute([key])?;
                        insert_receipt(conn, token, key, receipt)?;
                    }
                    updated == 1
                }
                Write::Receipt { key, token, receipt } => insert_receipt(conn, token, key, receipt)? == 1,
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

fn insert_receipt(
    conn: &rusqlite::Connection,
    token: &str,
    key: &str,
    receipt: &str,
) -> Result<usize, rusqlite::Error> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO receipts (token_id, article_id, payer, receipt, created_at) \
         VALUES (?1, 'c2pa-explained', substr(?2, 1, 42), ?3, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
    )?
    .execute((token, key, receipt))
}
