//! The payment engine's durable state: [`ExpiringPaymentStore`] is x402-tower's [`PaymentStore`] plus the
//! housekeeping the server does; [`SqlitePaymentStore`](super::SqlitePaymentStore) implements it over the `payment_states` and
//! `payment_ids` tables of `migrations/sqlite/0004_payments.sql` (`payment_states` rebuilt by `0013`),
//! `PgPaymentStore` over PostgreSQL's.
//!
//! Every instance that opens the same database file shares it, so one authorization is settled at most once
//! whichever instance or door (a paid route, `/facilitator/settle`) it comes through, and survives a restart:
//! the record is written (and fsync'd) **before** any settlement is attempted. A reservation is one write of
//! the group commit ([`Db::write`](super::Db::write): its own savepoint inside the writer's `BEGIN IMMEDIATE`), so its select and
//! insert are one atomic step, across processes too; every later change is a compare-and-set on the row's
//! `revision`.

use std::sync::Arc;

use alloy_primitives::{Address, B256};

use x402_tower::proto::SettleResponse;

use x402_tower::proto::checksum;

use x402_tower::store::{
    PaymentKey, PaymentRecord, PaymentState, PaymentStore, StoreError as PaymentStoreError,
    StoredPayment,
};

use super::{StoreError, StoreFuture};

/// The payment engine's records, on the server's database.
pub trait ExpiringPaymentStore: PaymentStore + std::fmt::Debug {
    /// Deletes records and ids that expired before `before` (unix seconds); returns how many.
    fn purge_expired(&self, before: u64) -> StoreFuture<'_, usize>;
}

/// Uses a single-use nonce (`?1` the nonce, `?2` until when, `?3` now) on both backends (their placeholders
/// swapped in): inserted, or written over an expired use; an unexpired use changes no row.
pub(crate) const USE_NONCE: &str = "INSERT INTO used_nonces (nonce, expires_at) VALUES (?1, ?2) \
     ON CONFLICT (nonce) DO UPDATE SET expires_at = excluded.expires_at WHERE used_nonces.expires_at < ?3";

pub(crate) const COLUMNS: &str = "state, resource, fingerprint, settlement, payload, requirements, expires_at, \
     updated_at, revision";

/// The reconciler's query, on both backends (their placeholders given): unexpired `pending` records, and
/// `in_flight` ones not touched since `stale_before`, oldest first, at most `limit`. It names the states of
/// the partial index `payment_states_unresolved` (SQLite migration 0011, PostgreSQL 0007), which holds only
/// those records, so that it reads through it.
pub(crate) fn unresolved_sql(now: &str, stale_before: &str, limit: &str) -> String {
    format!(
        "SELECT chain_id, asset, payer, nonce, {COLUMNS} FROM payment_states \
         WHERE state IN ('in_flight', 'pending') AND expires_at >= {now} \
         AND (state = 'pending' OR updated_at < {stale_before}) \
         ORDER BY updated_at LIMIT {limit}"
    )
}

fn chain(key: &PaymentKey) -> Result<i64, StoreError> {
    i64::try_from(key.chain_id)
        .map_err(|_| StoreError::Invalid(format!("chain id {} too large", key.chain_id)))
}

/// `key` as the four stored columns (chain_id, asset, payer, nonce), in that order.
pub(crate) fn key_columns(key: &PaymentKey) -> Result<(i64, String, String, String), StoreError> {
    Ok((
        chain(key)?,
        checksum(&key.nonce_space),
        checksum(&key.from),
        key.nonce.to_string(),
    ))
}

/// A record's stored columns ([`COLUMNS`]), before decoding: the same on both backends.
pub(crate) struct RawRecord {
    pub(crate) state: String,
    pub(crate) resource: String,
    pub(crate) fingerprint: String,
    pub(crate) settlement: Option<String>,
    pub(crate) payload: String,
    pub(crate) requirements: String,
    pub(crate) expires_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) revision: i64,
}

fn invalid(what: &str) -> StoreError {
    StoreError::Invalid(format!("payment_states: {what}"))
}

impl RawRecord {
    pub(crate) fn decode(self) -> Result<PaymentRecord, StoreError> {
        Ok(PaymentRecord {
            state: PaymentState::parse(&self.state).ok_or_else(|| invalid("unknown state"))?,
            resource: self.resource,
            fingerprint: self
                .fingerprint
                .parse::<B256>()
                .map_err(|_| invalid("fingerprint"))?,
            settlement: self
                .settlement
                .map(|s| serde_json::from_str::<SettleResponse>(&s))
                .transpose()
                .map_err(|_| invalid("settlement"))?,
            payment: Arc::new(StoredPayment {
                payload: self.payload.into(),
                requirements: self.requirements.into(),
            }),
            expires_at: u64::try_from(self.expires_at).unwrap_or(0),
            updated_at: u64::try_from(self.updated_at).unwrap_or(0),
            revision: u64::try_from(self.revision).unwrap_or(0),
        })
    }
}

/// A key's stored columns (chain_id, asset, payer, nonce), decoded.
pub(crate) fn decode_key(
    chain_id: i64,
    asset: &str,
    payer: &str,
    nonce: &str,
) -> Result<PaymentKey, StoreError> {
    Ok(PaymentKey {
        chain_id: u64::try_from(chain_id).map_err(|_| invalid("chain id"))?,
        nonce_space: asset.parse::<Address>().map_err(|_| invalid("asset"))?,
        from: payer.parse::<Address>().map_err(|_| invalid("payer"))?,
        nonce: nonce.parse::<B256>().map_err(|_| invalid("nonce"))?,
    })
}

pub(crate) fn secs(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(crate) fn settlement_json(record: &PaymentRecord) -> Result<Option<String>, StoreError> {
    record
        .settlement
        .as_ref()
        .map(|s| {
            let json = s
                .to_json()
                .map_err(|e| StoreError::Invalid(e.to_string()))?;
            // serde_json writes UTF-8: taken as it is, not copied.
            String::from_utf8(json).map_err(|e| StoreError::Invalid(e.to_string()))
        })
        .transpose()
}

pub(crate) fn backend(e: StoreError) -> PaymentStoreError {
    PaymentStoreError::Backend(Box::new(e))
}
