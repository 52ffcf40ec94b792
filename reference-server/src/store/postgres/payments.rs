//! [`ExpiringPaymentStore`] (x402-tower's `PaymentStore`) on PostgreSQL.
//!
//! A reservation is one statement, `INSERT … ON CONFLICT DO UPDATE … WHERE the stored record expired
//! RETURNING`: PostgreSQL takes the row lock, so of any number of concurrent reservations of one
//! authorization, from any number of instances, exactly one gets a row back. Every later change is a
//! compare-and-set on `revision` (`UPDATE … WHERE revision = $expected`).

use std::sync::LazyLock;

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use x402_tower::pricing::BoxFuture;
use x402_tower::store::{
    IdBinding, IdClaim, PaymentKey, PaymentRecord, PaymentStore, Reservation,
    StoreError as PaymentStoreError,
};

use super::{Param, Pg, Statement, changed, param};
use crate::store::payments::{
    COLUMNS, ExpiringPaymentStore, RawRecord, USE_NONCE, backend, decode_key, key_columns, secs,
    settlement_json, unresolved_sql,
};
use crate::store::{StoreError, StoreFuture};

/// [`ExpiringPaymentStore`] on PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgPaymentStore {
    pg: Pg,
}

impl PgPaymentStore {
    /// The store over `pg` (migrated).
    pub fn new(pg: Pg) -> Self {
        Self { pg }
    }
}

const WHERE_KEY: &str = "chain_id = $1 AND asset = $2 AND payer = $3 AND nonce = $4";

/// A record's compare-and-set update (every purchase runs it): the SQL built once.
static UPDATE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE payment_states SET state = $5, resource = $6, fingerprint = $7, settlement = $8, \
         expires_at = $9, updated_at = $10, revision = revision + 1, payload = $12, requirements = $13 \
         WHERE {WHERE_KEY} AND revision = $11 RETURNING 1"
    )
});

/// A record's compare-and-set release: the SQL built once.
static DELETE: LazyLock<String> = LazyLock::new(|| {
    format!("DELETE FROM payment_states WHERE {WHERE_KEY} AND revision = $5 RETURNING 1")
});

/// The parameters `$1` to `$8` of a record's insert and update (its key, state, resource, fingerprint and
/// settlement), then `rest`.
fn with_record(
    key: &PaymentKey,
    record: &PaymentRecord,
    rest: impl IntoIterator<Item = Param>,
) -> Result<Vec<Param>, StoreError> {
    let (chain_id, asset, payer, nonce) = key_columns(key)?;
    let mut params = vec![
        param(chain_id),
        param(asset),
        param(payer),
        param(nonce),
        param(record.state.as_str()),
        param(record.resource.clone()),
        param(record.fingerprint.to_string()),
        param(settlement_json(record)?),
    ];
    params.extend(rest);
    Ok(params)
}

/// The record whose columns ([`COLUMNS`]) start at index `at`.
fn raw_at(r: &Row, at: usize) -> Result<RawRecord, StoreError> {
    Ok(RawRecord {
        state: r.try_get(at)?,
        resource: r.try_get(at + 1)?,
        fingerprint: r.try_get(at + 2)?,
        settlement: r.try_get(at + 3)?,
        payload: r.try_get(at + 4)?,
        requirements: r.try_get(at + 5)?,
        expires_at: r.try_get(at + 6)?,
        updated_at: r.try_get(at + 7)?,
        revision: r.try_get(at + 8)?,
    })
}

impl PgPaymentStore {
    async fn reserve_once(
        &self,
        key: &PaymentKey,
        record: &PaymentRecord,
        now: u64,
    ) -> Result<Option<Reservation>, StoreError> {
        let insert = Statement::new(
            "INSERT INTO payment_states (chain_id, asset, payer, nonce, state, resource, fingerprint, \
             settlement, payload, requirements, expires_at, updated_at, revision) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 1) \
             ON CONFLICT (chain_id, asset, payer, nonce) DO UPDATE SET state = EXCLUDED.state, \
             resource = EXCLUDED.resource, fingerprint = EXCLUDED.fingerprint, \
             settlement = EXCLUDED.settlement, payload = EXCLUDED.payload, \
             requirements = EXCLUDED.requirements, expires_at = EXCLUDED.expires_at, \
             updated_at = EXCLUDED.updated_at, revision = 1 \
             WHERE payment_states.expires_at < $13 \
             RETURNING revision",
            with_record(
                key,
                record,
                [
                    param(record.payment.payload.to_string()),
                    param(record.payment.requirements.to_string()),
                    param(secs(record.expires_at)),
                    param(secs(record.updated_at)),
                    param(secs(now)),
                ],
            )?,
        );
        if changed(self.pg.write(insert).await?) {
            return Ok(Some(Reservation::Reserved { revision: 1 }));
        }
        // Someone else's unexpired record: read it. `None` when it went (released) in between: try again.
        Ok(self
            .read(key, secs(now))
            .await?
            .map(|r| Reservation::Taken(Box::new(r))))
    }

    /// The unexpired record of `key`.
    async fn read(&self, key: &PaymentKey, now: i64) -> Result<Option<PaymentRecord>, StoreError> {
        let (chain_id, asset, payer, nonce) = key_columns(key)?;
        let c = self.pg.client().await?;
        let stmt = c
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM payment_states WHERE {WHERE_KEY} AND expires_at >= $5"
            ))
            .await?;
        c.query_opt(&stmt, &[&chain_id, &asset, &payer, &nonce, &now])
            .await?
            .map(|row| raw_at(&row, 0)?.decode())
            .transpose()
    }
}

/// A record can be released between a refused insert and the read of what refused it; a reservation tries
/// again this many times before it reports the churn.
const RESERVE_ATTEMPTS: usize = 8;

impl PaymentStore for PgPaymentStore {
    fn reserve<'a>(
        &'a self,
        key: &'a PaymentKey,
        record: &'a PaymentRecord,
        now: u64,
    ) -> BoxFuture<'a, Result<Reservation, PaymentStoreError>> {
        Box::pin(async move {
            for _ in 0..RESERVE_ATTEMPTS {
                if let Some(r) = self.reserve_once(key, record, now).await.map_err(backend)? {
                    return Ok(r);
                }
            }
            Err(backend(StoreError::Conflict(
                "the payment record kept changing under the reservation".into(),
            )))
        })
    }

    fn get<'a>(
        &'a self,
        key: &'a PaymentKey,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<PaymentRecord>, PaymentStoreError>> {
        Box::pin(async move { self.read(key, secs(now)).await.map_err(backend) })
    }

    fn update<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
        record: &'a PaymentRecord,
    ) -> BoxFuture<'a, Result<bool, PaymentStoreError>> {
        Box::pin(async move {
            let updated = async {
                let update = Statement::new(
                    UPDATE.as_str(),
                    with_record(
                        key,
                        record,
                        [
                            param(secs(record.expires_at)),
                            param(secs(record.updated_at)),
                            param(secs(expected)),
                            param(record.payment.payload.to_string()),
                            param(record.payment.requirements.to_string()),
                        ],
                    )?,
                );
                Ok::<_, StoreError>(changed(self.pg.write(update).await?))
            };
            updated.await.map_err(backend)
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
    ) -> BoxFuture<'a, Result<bool, PaymentStoreError>> {
        Box::pin(async move {
            let released = async {
                let (chain_id, asset, payer, nonce) = key_columns(key)?;
                let delete = Statement::new(
                    DELETE.as_str(),
                    vec![
                        param(chain_id),
                        param(asset),
                        param(payer),
                        param(nonce),
                        param(secs(expected)),
                    ],
                );
                Ok::<_, StoreError>(changed(self.pg.write(delete).await?))
            };
            released.await.map_err(backend)
        })
    }

    fn unresolved<'a>(
        &'a self,
        now: u64,
        stale_before: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(PaymentKey, PaymentRecord)>, PaymentStoreError>> {
        Box::pin(async move {
            let found = async {
                let c = self.pg.client().await?;
                let stmt = c.prepare_cached(&unresolved_sql("$1", "$2", "$3")).await?;
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                c.query(&stmt, &[&secs(now), &secs(stale_before), &limit])
                    .await?
                    .iter()
                    .map(|r| {
                        let (asset, payer, nonce): (String, String, String) =
                            (r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
                        let key = decode_key(r.try_get(0)?, &asset, &payer, &nonce)?;
                        // The record's columns follow the key's four.
                        Ok((key, raw_at(r, 4)?.decode()?))
                    })
                    .collect::<Result<Vec<_>, StoreError>>()
            };
            found.await.map_err(backend)
        })
    }

    fn bind_id<'a>(
        &'a self,
        id: &'a str,
        binding: &'a IdBinding,
        now: u64,
    ) -> BoxFuture<'a, Result<IdClaim, PaymentStoreError>> {
        Box::pin(async move {
            let claimed = async {
                let (chain_id, asset, payer, nonce) = key_columns(&binding.key)?;
                let fingerprint = binding.fingerprint.to_string();
                let c = self.pg.client().await?;
                for _ in 0..RESERVE_ATTEMPTS {
                    let insert = c
                        .prepare_cached(
                            "INSERT INTO payment_ids (id, fingerprint, chain_id, asset, payer, nonce, expires_at) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7) \
                             ON CONFLICT (id) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, \
                             chain_id = EXCLUDED.chain_id, asset = EXCLUDED.asset, payer = EXCLUDED.payer, \
                             nonce = EXCLUDED.nonce, expires_at = EXCLUDED.expires_at \
                             WHERE payment_ids.expires_at < $8 RETURNING 1",
                        )
                        .await?;
                    let params: [&(dyn ToSql + Sync); 8] = [
                        &id,
                        &fingerprint,
                        &chain_id,
                        &asset,
                        &payer,
                        &nonce,
                        &secs(binding.expires_at),
                        &secs(now),
                    ];
                    if c.query_opt(&insert, &params).await?.is_some() {
                        return Ok(IdClaim::New);
                    }
                    let select = c
                        .prepare_cached(
                            "SELECT fingerprint, chain_id, asset, payer, nonce FROM payment_ids \
                             WHERE id = $1 AND expires_at >= $2",
                        )
                        .await?;
                    if let Some(r) = c.query_opt(&select, &[&id, &secs(now)]).await? {
                        let stored: (String, i64, String, String, String) = (
                            r.try_get(0)?,
                            r.try_get(1)?,
                            r.try_get(2)?,
                            r.try_get(3)?,
                            r.try_get(4)?,
                        );
                        let same = stored == (fingerprint, chain_id, asset, payer, nonce);
                        return Ok(if same {
                            IdClaim::Same
                        } else {
                            IdClaim::Conflict
                        });
                    }
                }
                Err(StoreError::Conflict(
                    "the payment identifier kept changing under the claim".into(),
                ))
            };
            claimed.await.map_err(backend)
        })
    }

    fn use_nonce<'a>(
        &'a self,
        nonce: &'a alloy_primitives::B256,
        expires_at: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<bool, PaymentStoreError>> {
        Box::pin(async move {
            let used = async {
                let c = self.pg.client().await?;
                let statement = c.prepare_cached(&USE_NONCE.replace('?', "$")).await?;
                let changed = c
                    .execute(
                        &statement,
                        &[&nonce.to_string(), &secs(expires_at), &secs(now)],
                    )
                    .await?;
                Ok::<_, StoreError>(changed == 1)
            };
            used.await.map_err(backend)
        })
    }
}

impl ExpiringPaymentStore for PgPaymentStore {
    fn purge_expired(&self, before: u64) -> StoreFuture<'_, usize> {
        Box::pin(async move {
            let c = self.pg.client().await?;
            let n = c
                .execute(
                    "DELETE FROM payment_states WHERE expires_at < $1",
                    &[&secs(before)],
                )
                .await?;
            let m = c
                .execute(
                    "DELETE FROM payment_ids WHERE expires_at < $1",
                    &[&secs(before)],
                )
                .await?;
            let u = c
                .execute(
                    "DELETE FROM used_nonces WHERE expires_at < $1",
                    &[&secs(before)],
                )
                .await?;
            Ok((n + m + u) as usize)
        })
    }
}
