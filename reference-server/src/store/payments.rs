//! The payment engine's durable state on this database: [`SqlitePaymentStore`] implements x402-tower's
//! [`ReplayStore`] over the `payment_states` and `payment_ids` tables of `0004_payments.sql`.
//!
//! Every instance that opens the same database file shares it, so one authorization is settled at most once
//! whichever instance or door (a paid route, `/facilitator/settle`) it comes through, and survives a restart:
//! the record is written (and fsync'd) **before** any settlement is attempted. A reservation is one write of
//! the group commit ([`Db::write`]: its own savepoint inside the writer's `BEGIN IMMEDIATE`), so its select and
//! insert are one atomic step, across processes too; every later change is a compare-and-set on the row's
//! `revision`.

use std::sync::Arc;

use alloy_primitives::{Address, B256};
use rusqlite::{OptionalExtension, Row, params};
use x402_tower::BoxFuture;
use x402_tower::proto::SettleResponse;
use x402_tower::replay::{
    IdBinding, IdClaim, PaymentRecord, PaymentState, ReplayKey, ReplayStore, Reservation,
    StoreError as ReplayError, StoredPayment,
};

use super::{Db, StoreError};

/// [`ReplayStore`] on the server's database.
#[derive(Debug, Clone)]
pub struct SqlitePaymentStore {
    db: Db,
}

const COLUMNS: &str = "state, resource, fingerprint, settlement, payload, requirements, expires_at, \
     updated_at, revision";

fn chain(key: &ReplayKey) -> Result<i64, StoreError> {
    i64::try_from(key.chain_id)
        .map_err(|_| StoreError::Invalid(format!("chain id {} too large", key.chain_id)))
}

/// `key` as the four stored columns (chain_id, asset, payer, nonce), in that order.
fn key_columns(key: &ReplayKey) -> Result<(i64, String, String, String), StoreError> {
    Ok((
        chain(key)?,
        key.asset.to_string(),
        key.from.to_string(),
        key.nonce.to_string(),
    ))
}

fn invalid(what: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Text,
        format!("payment_states: {what}").into(),
    )
}

fn record_from_row(r: &Row<'_>) -> rusqlite::Result<PaymentRecord> {
    record_at(r, 0)
}

/// The record whose columns ([`COLUMNS`]) start at index `at`.
fn record_at(r: &Row<'_>, at: usize) -> rusqlite::Result<PaymentRecord> {
    let state: String = r.get(at)?;
    let fingerprint: String = r.get(at + 2)?;
    let settlement: Option<String> = r.get(at + 3)?;
    let requirements: String = r.get(at + 5)?;
    Ok(PaymentRecord {
        state: PaymentState::parse(&state).ok_or_else(|| invalid("unknown state"))?,
        resource: r.get(at + 1)?,
        fingerprint: fingerprint
            .parse::<B256>()
            .map_err(|_| invalid("fingerprint"))?,
        settlement: settlement
            .map(|s| serde_json::from_str::<SettleResponse>(&s))
            .transpose()
            .map_err(|_| invalid("settlement"))?,
        payment: Arc::new(StoredPayment {
            payload: r.get(at + 4)?,
            requirements: requirements.into(),
        }),
        expires_at: u64::try_from(r.get::<_, i64>(at + 6)?).unwrap_or(0),
        updated_at: u64::try_from(r.get::<_, i64>(at + 7)?).unwrap_or(0),
        revision: u64::try_from(r.get::<_, i64>(at + 8)?).unwrap_or(0),
    })
}

fn secs(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn json(v: &impl serde::Serialize) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Invalid(e.to_string()))
}

fn settlement_json(record: &PaymentRecord) -> Result<Option<String>, StoreError> {
    record.settlement.as_ref().map(json).transpose()
}

fn backend(e: StoreError) -> ReplayError {
    ReplayError::Backend(Box::new(e))
}

impl SqlitePaymentStore {
    /// The store over `db` (migrated).
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Deletes records and ids that expired before `before` (unix seconds); returns how many.
    pub async fn purge_expired(&self, before: u64) -> Result<usize, StoreError> {
        self.db
            .write(move |c| {
                let n = c.execute(
                    "DELETE FROM payment_states WHERE expires_at < ?1",
                    [secs(before)],
                )?;
                let m = c.execute(
                    "DELETE FROM payment_ids WHERE expires_at < ?1",
                    [secs(before)],
                )?;
                Ok(n + m)
            })
            .await
    }
}

impl ReplayStore for SqlitePaymentStore {
    fn reserve<'a>(
        &'a self,
        key: &'a ReplayKey,
        record: &'a PaymentRecord,
        now: u64,
    ) -> BoxFuture<'a, Result<Reservation, ReplayError>> {
        let key = *key;
        let record = record.clone();
        Box::pin(async move {
            let settlement = settlement_json(&record).map_err(backend)?;
            self.db
                .write(move |c| {
                    let (chain_id, asset, payer, nonce) = key_columns(&key)?;
                    let existing = c
                        .prepare_cached(&format!(
                            "SELECT {COLUMNS} FROM payment_states \
                             WHERE chain_id = ?1 AND asset = ?2 AND payer = ?3 AND nonce = ?4"
                        ))?
                        .query_row(params![chain_id, asset, payer, nonce], record_from_row)
                        .optional()?;
                    if let Some(e) = existing
                        && e.expires_at >= now
                    {
                        return Ok(Reservation::Taken(Box::new(e)));
                    }
                    c.prepare_cached(
                        "INSERT OR REPLACE INTO payment_states (chain_id, asset, payer, nonce, state, resource, \
                         fingerprint, settlement, payload, requirements, expires_at, updated_at, revision) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 1)",
                    )?
                    .execute(params![
                        chain_id,
                        asset,
                        payer,
                        nonce,
                        record.state.as_str(),
                        record.resource,
                        record.fingerprint.to_string(),
                        settlement,
                        record.payment.payload,
                        &*record.payment.requirements,
                        secs(record.expires_at),
                        secs(record.updated_at),
                    ])?;
                    Ok(Reservation::Reserved { revision: 1 })
                })
                .await
                .map_err(backend)
        })
    }

    fn get<'a>(
        &'a self,
        key: &'a ReplayKey,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<PaymentRecord>, ReplayError>> {
        let key = *key;
        Box::pin(async move {
            self.db
                .read(move |c| {
                    let (chain_id, asset, payer, nonce) = key_columns(&key)?;
                    Ok(c.prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM payment_states \
                         WHERE chain_id = ?1 AND asset = ?2 AND payer = ?3 AND nonce = ?4 AND expires_at >= ?5"
                    ))?
                    .query_row(
                        params![chain_id, asset, payer, nonce, secs(now)],
                        record_from_row,
                    )
                    .optional()?)
                })
                .await
                .map_err(backend)
        })
    }

    fn update<'a>(
        &'a self,
        key: &'a ReplayKey,
        expected: u64,
        record: &'a PaymentRecord,
    ) -> BoxFuture<'a, Result<bool, ReplayError>> {
        let key = *key;
        let record = record.clone();
        Box::pin(async move {
            let settlement = settlement_json(&record).map_err(backend)?;
            self.db
                .write(move |c| {
                    let (chain_id, asset, payer, nonce) = key_columns(&key)?;
                    let n = c
                        .prepare_cached(
                            "UPDATE payment_states SET state = ?5, resource = ?6, fingerprint = ?7, \
                             settlement = ?8, expires_at = ?9, updated_at = ?10, revision = revision + 1 \
                             WHERE chain_id = ?1 AND asset = ?2 AND payer = ?3 AND nonce = ?4 AND revision = ?11",
                        )?
                        .execute(params![
                            chain_id,
                            asset,
                            payer,
                            nonce,
                            record.state.as_str(),
                            record.resource,
                            record.fingerprint.to_string(),
                            settlement,
                            secs(record.expires_at),
                            secs(record.updated_at),
                            secs(expected),
                        ])?;
                    Ok(n == 1)
                })
                .await
                .map_err(backend)
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a ReplayKey,
        expected: u64,
    ) -> BoxFuture<'a, Result<bool, ReplayError>> {
        let key = *key;
        Box::pin(async move {
            self.db
                .write(move |c| {
                    let (chain_id, asset, payer, nonce) = key_columns(&key)?;
                    let n = c
                        .prepare_cached(
                            "DELETE FROM payment_states \
                             WHERE chain_id = ?1 AND asset = ?2 AND payer = ?3 AND nonce = ?4 AND revision = ?5",
                        )?
                        .execute(params![chain_id, asset, payer, nonce, secs(expected)])?;
                    Ok(n == 1)
                })
                .await
                .map_err(backend)
        })
    }

    fn unresolved<'a>(
        &'a self,
        now: u64,
        stale_before: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(ReplayKey, PaymentRecord)>, ReplayError>> {
        Box::pin(async move {
            self.db
                .read(move |c| {
                    let mut stmt = c.prepare_cached(&format!(
                        "SELECT chain_id, asset, payer, nonce, {COLUMNS} FROM payment_states \
                         WHERE expires_at >= ?1 AND (state = 'pending' OR (state = 'in_flight' AND updated_at < ?2)) \
                         ORDER BY updated_at LIMIT ?3"
                    ))?;
                    let rows = stmt.query_map(
                        params![secs(now), secs(stale_before), i64::try_from(limit).unwrap_or(i64::MAX)],
                        |r| {
                            let asset: String = r.get(1)?;
                            let payer: String = r.get(2)?;
                            let nonce: String = r.get(3)?;
                            let key = ReplayKey {
                                chain_id: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                                asset: asset.parse::<Address>().map_err(|_| invalid("asset"))?,
                                from: payer.parse::<Address>().map_err(|_| invalid("payer"))?,
                                nonce: nonce.parse::<B256>().map_err(|_| invalid("nonce"))?,
                            };
                            // The record's columns follow the key's four.
                            let record = record_at(r, 4)?;
                            Ok((key, record))
                        },
                    )?;
                    Ok(rows.collect::<Result<Vec<_>, _>>()?)
                })
                .await
                .map_err(backend)
        })
    }

    fn bind_id<'a>(
        &'a self,
        id: &'a str,
        binding: &'a IdBinding,
        now: u64,
    ) -> BoxFuture<'a, Result<IdClaim, ReplayError>> {
        let id = id.to_owned();
        let b = *binding;
        Box::pin(async move {
            self.db
                .write(move |c| {
                    let key = key_columns(&b.key)?;
                    let existing: Option<(String, i64, String, String, String, i64)> = c
                        .prepare_cached(
                            "SELECT fingerprint, chain_id, asset, payer, nonce, expires_at FROM payment_ids WHERE id = ?1",
                        )?
                        .query_row([&id], |r| {
                            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
                        })
                        .optional()?;
                    if let Some((fp, chain_id, asset, payer, nonce, expires)) = existing
                        && expires >= secs(now)
                    {
                        let same =
                            fp == b.fingerprint.to_string() && (chain_id, asset, payer, nonce) == key;
                        return Ok(if same { IdClaim::Same } else { IdClaim::Conflict });
                    }
                    c.prepare_cached(
                        "INSERT OR REPLACE INTO payment_ids (id, fingerprint, chain_id, asset, payer, nonce, expires_at) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    )?
                    .execute(params![
                        id,
                        b.fingerprint.to_string(),
                        key.0,
                        key.1,
                        key.2,
                        key.3,
                        secs(b.expires_at)
                    ])?;
                    Ok(IdClaim::New)
                })
                .await
                .map_err(backend)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> ReplayKey {
        ReplayKey {
            chain_id: 84532,
            asset: Address::repeat_byte(1),
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
            payment: Arc::new(StoredPayment {
                payload: "{}".into(),
                requirements: Arc::from("{}"),
            }),
            expires_at: 100,
            updated_at,
            revision: 0,
        }
    }

    #[tokio::test]
    async fn reserve_update_release_unresolved_ids_and_restart() {
        let dir = std::env::temp_dir().join(format!("rs-payments-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.sqlite");
        let s = SqlitePaymentStore::new(Db::open(&path).unwrap());
        let r = record(PaymentState::InFlight, 10);
        assert_eq!(
            s.reserve(&key(1), &r, 10).await.unwrap(),
            Reservation::Reserved { revision: 1 }
        );
        let Reservation::Taken(t) = s.reserve(&key(1), &r, 10).await.unwrap() else {
            panic!("reserved twice")
        };
        assert_eq!((t.state, t.revision), (PaymentState::InFlight, 1));
        let mut settled = r.clone();
        settled.state = PaymentState::Settled;
        settled.settlement = Some(SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            transaction: "0xab".into(),
            network: "eip155:84532".into(),
            payer: None,
        });
        assert!(
            !s.update(&key(1), 5, &settled).await.unwrap(),
            "stale revision"
        );
        assert!(s.update(&key(1), 1, &settled).await.unwrap());
        assert!(!s.release(&key(1), 1).await.unwrap());
        // A restart (a new handle on the same file) remembers it.
        let s = SqlitePaymentStore::new(Db::open(&path).unwrap());
        let got = s.get(&key(1), 10).await.unwrap().unwrap();
        assert_eq!(
            (got.state, got.revision, got.settlement),
            (PaymentState::Settled, 2, settled.settlement)
        );
        assert!(s.get(&key(1), 101).await.unwrap().is_none(), "expired");
        // Unresolved: pending, and in-flight older than the stale mark.
        s.reserve(&key(2), &record(PaymentState::Pending, 10), 10)
            .await
            .unwrap();
        s.reserve(&key(3), &record(PaymentState::InFlight, 10), 10)
            .await
            .unwrap();
        let nonces = |v: Vec<(ReplayKey, PaymentRecord)>| {
            v.into_iter().map(|(k, _)| k.nonce[0]).collect::<Vec<_>>()
        };
        assert_eq!(nonces(s.unresolved(10, 5, 10).await.unwrap()), vec![2]);
        let mut both = nonces(s.unresolved(10, 11, 10).await.unwrap());
        both.sort();
        assert_eq!(both, vec![2, 3]);
        assert!(s.release(&key(3), 1).await.unwrap());
        // Ids.
        let b = IdBinding {
            fingerprint: B256::repeat_byte(4),
            key: key(1),
            expires_at: 100,
        };
        let other = IdBinding {
            fingerprint: B256::repeat_byte(5),
            ..b
        };
        assert_eq!(
            s.bind_id("pay_0123456789abcdef", &b, 10).await.unwrap(),
            IdClaim::New
        );
        assert_eq!(
            s.bind_id("pay_0123456789abcdef", &b, 10).await.unwrap(),
            IdClaim::Same
        );
        assert_eq!(
            s.bind_id("pay_0123456789abcdef", &other, 10).await.unwrap(),
            IdClaim::Conflict
        );
        assert_eq!(
            s.bind_id("pay_0123456789abcdef", &other, 101)
                .await
                .unwrap(),
            IdClaim::New
        );
        assert_eq!(s.purge_expired(200).await.unwrap(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
