//! The payment engine's records on SQLite: [`SqlitePaymentStore`].

use crate::store::payments::{
    COLUMNS, ExpiringPaymentStore, RawRecord, USE_NONCE, backend, decode_key, key_columns, secs,
    settlement_json, unresolved_sql,
};
use crate::store::{Db, StoreError, StoreFuture};
use alloy_primitives::B256;
use rusqlite::{OptionalExtension, Row, params};
use x402_tower::pricing::BoxFuture;
use x402_tower::store::{
    IdBinding, IdClaim, PaymentKey, PaymentRecord, PaymentStore, Reservation,
    StoreError as PaymentStoreError,
};

/// [`ExpiringPaymentStore`] on SQLite.
#[derive(Debug, Clone)]
pub struct SqlitePaymentStore {
    db: Db,
}

/// The raw record whose columns ([`COLUMNS`]) start at index `at`.
fn raw_at(r: &Row<'_>, at: usize) -> rusqlite::Result<RawRecord> {
    Ok(RawRecord {
        state: r.get(at)?,
        resource: r.get(at + 1)?,
        fingerprint: r.get(at + 2)?,
        settlement: r.get(at + 3)?,
        payload: r.get(at + 4)?,
        requirements: r.get(at + 5)?,
        expires_at: r.get(at + 6)?,
        updated_at: r.get(at + 7)?,
        revision: r.get(at + 8)?,
    })
}

impl SqlitePaymentStore {
    /// The store over `db` (migrated).
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

impl ExpiringPaymentStore for SqlitePaymentStore {
    fn purge_expired(&self, before: u64) -> StoreFuture<'_, usize> {
        Box::pin(self.db.write(move |c| {
            let n = c.execute(
                "DELETE FROM payment_states WHERE expires_at < ?1",
                [secs(before)],
            )?;
            let m = c.execute(
                "DELETE FROM payment_ids WHERE expires_at < ?1",
                [secs(before)],
            )?;
            let u = c.execute(
                "DELETE FROM used_nonces WHERE expires_at < ?1",
                [secs(before)],
            )?;
            Ok(n + m + u)
        }))
    }
}

impl PaymentStore for SqlitePaymentStore {
    fn reserve<'a>(
        &'a self,
        key: &'a PaymentKey,
        record: &'a PaymentRecord,
        now: u64,
    ) -> BoxFuture<'a, Result<Reservation, PaymentStoreError>> {
        let key = *key;
        let record = record.clone();
        Box::pin(async move {
            let settlement = settlement_json(&record).map_err(backend)?;
            self.db
                .write_statement(move |c| {
                    let (chain_id, asset, payer, nonce) = key_columns(&key)?;
                    let existing = c
                        .prepare_cached(&SELECT_BY_KEY)?
                        .query_row(params![chain_id, asset, payer, nonce], |r| raw_at(r, 0))
                        .optional()?
                        .map(RawRecord::decode)
                        .transpose()?;
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
        key: &'a PaymentKey,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<PaymentRecord>, PaymentStoreError>> {
        let key = *key;
        Box::pin(async move {
            self.db
                .read(move |c| {
                    let (chain_id, asset, payer, nonce) = key_columns(&key)?;
                    c.prepare_cached(&SELECT_LIVE_BY_KEY)?
                        .query_row(params![chain_id, asset, payer, nonce, secs(now)], |r| {
                            raw_at(r, 0)
                        })
                        .optional()?
                        .map(RawRecord::decode)
                        .transpose()
                })
                .await
                .map_err(backend)
        })
    }

    fn update<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
        record: &'a PaymentRecord,
    ) -> BoxFuture<'a, Result<bool, PaymentStoreError>> {
        let key = *key;
        let record = record.clone();
        Box::pin(async move {
            let settlement = settlement_json(&record).map_err(backend)?;
            self.db
                .write_statement(move |c| {
                    let (chain_id, asset, payer, nonce) = key_columns(&key)?;
                    let n = c
                        .prepare_cached(
                            "UPDATE payment_states SET state = ?5, resource = ?6, fingerprint = ?7, \
                             settlement = ?8, expires_at = ?9, updated_at = ?10, revision = revision + 1, \
                             payload = ?12, requirements = ?13 \
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
                            &*record.payment.payload,
                            &*record.payment.requirements,
                        ])?;
                    Ok(n == 1)
                })
                .await
                .map_err(backend)
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
    ) -> BoxFuture<'a, Result<bool, PaymentStoreError>> {
        let key = *key;
        Box::pin(async move {
            self.db
                .write_statement(move |c| {
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
    ) -> BoxFuture<'a, Result<Vec<(PaymentKey, PaymentRecord)>, PaymentStoreError>> {
        Box::pin(async move {
            self.db
                .read(move |c| {
                    let mut stmt = c.prepare_cached(&unresolved_sql("?1", "?2", "?3"))?;
                    let rows = stmt.query_map(
                        params![
                            secs(now),
                            secs(stale_before),
                            i64::try_from(limit).unwrap_or(i64::MAX)
                        ],
                        |r| {
                            let key: (i64, String, String, String) =
                                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
                            // The record's columns follow the key's four.
                            Ok((key, raw_at(r, 4)?))
                        },
                    )?;
                    rows.map(|row| {
                        let ((chain_id, asset, payer, nonce), raw) = row?;
                        Ok((decode_key(chain_id, &asset, &payer, &nonce)?, raw.decode()?))
                    })
                    .collect::<Result<Vec<_>, StoreError>>()
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
    ) -> BoxFuture<'a, Result<IdClaim, PaymentStoreError>> {
        let id = id.to_owned();
        let b = *binding;
        Box::pin(async move {
            self.db
                .write_statement(move |c| {
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

    fn use_nonce<'a>(
        &'a self,
        nonce: &'a B256,
        expires_at: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<bool, PaymentStoreError>> {
        let nonce = nonce.to_string();
        Box::pin(async move {
            self.db
                .write_statement(move |c| {
                    // New, or over an expired use: one row changed. An unexpired use: none.
                    let changed = c.prepare_cached(USE_NONCE)?.execute(params![
                        nonce,
                        secs(expires_at),
                        secs(now)
                    ])?;
                    Ok(changed == 1)
                })
                .await
                .map_err(backend)
        })
    }
}

/// A record by its key, and the same if it has not expired (`?5`: now): the text is the statement cache's
/// key, built once rather than per purchase.
static SELECT_BY_KEY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {COLUMNS} FROM payment_states \
         WHERE chain_id = ?1 AND asset = ?2 AND payer = ?3 AND nonce = ?4"
    )
});

static SELECT_LIVE_BY_KEY: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("{} AND expires_at >= ?5", *SELECT_BY_KEY));
