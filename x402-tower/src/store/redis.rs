//! [`RedisPaymentStore`]: the payment records of any number of processes in one Redis (feature `redis`).
//!
//! For tower services that scale out without a SQL database: every instance given the same Redis (and
//! prefix) shares one record per authorization, so one authorization settles at most once whichever
//! instance it reaches, and a lost-response resend to another instance is answered from the record.
//!
//! # Layout and atomicity
//!
//! - A payment: hash `{prefix}:pay:<chain>:<asset>:<payer>:<nonce>` with fields `rev` (the compare-and-set
//!   revision), `rec` (the record as JSON) and `exp` (its expiry, unix seconds). Redis deletes it one second
//!   after it expires (a TTL computed from the caller's clock, so the store never trusts two clocks).
//! - The records to reconcile: sorted sets `{prefix}:pending` and `{prefix}:in_flight`, scored by the last
//!   change; members whose hash expired are dropped when met.
//! - A payment identifier: hash `{prefix}:id:<id>` with the binding and its expiry.
//!
//! Every change is one Lua script (`EVALSHA`), which Redis runs atomically: `reserve` is insert-if-absent
//! (or expired), `update` and `release` compare the revision. All keys share the hash tag `{prefix}`, so the
//! scripts also run on Redis Cluster (in one slot).
//!
//! ```no_run
//! use std::sync::Arc;
//! use x402_tower::store::redis::RedisPaymentStore;
//! use x402_tower::{settle::VerifyOnlySettler, PaymentEngine};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedisPaymentStore::connect("redis://127.0.0.1:6379", "shop").await?;
//! let engine = PaymentEngine::builder()
//!     .settler(Arc::new(VerifyOnlySettler::default()))
//!     .store(Arc::new(store))
//!     .build();
//! # Ok(()) }
//! ```

use std::sync::{Arc, LazyLock};

use alloy_primitives::{Address, B256};
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Script};
use serde::{Deserialize, Serialize};

use super::{
    IdBinding, IdClaim, PaymentKey, PaymentRecord, PaymentState, PaymentStore, Reservation,
    StoreError, StoredPayment,
};
use crate::boxed::BoxFuture;
use crate::proto::SettleResponse;

/// Moves `KEYS[1]`'s member between the two reconciliation indexes by state (`ARGV` positions given).
const INDEX: &str = r"
local function index(state, updated, member)
  redis.call('ZREM', KEYS[2], member)
  redis.call('ZREM', KEYS[3], member)
  if state == 'pending' then redis.call('ZADD', KEYS[2], updated, member)
  elseif state == 'in_flight' then redis.call('ZADD', KEYS[3], updated, member) end
end
";

/// KEYS: record, pending, in_flight. ARGV: now, rec, exp, updated, state. Returns {rev, rec}: rev "0" when
/// reserved, else the unexpired record that holds the key.
static RESERVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{INDEX}
local cur = redis.call('HMGET', KEYS[1], 'rev', 'rec', 'exp')
local now = tonumber(ARGV[1])
if cur[1] and tonumber(cur[3]) >= now then return {{cur[1], cur[2]}} end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'rev', '1', 'rec', ARGV[2], 'exp', ARGV[3])
redis.call('EXPIRE', KEYS[1], math.max(1, tonumber(ARGV[3]) - now + 1))
index(ARGV[5], ARGV[4], KEYS[1])
return {{'0', ''}}"
    ))
});

/// KEYS: record, pending, in_flight. ARGV: expected, rec, exp, updated, state. Returns 1 when replaced.
static UPDATE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{INDEX}
local cur = redis.call('HMGET', KEYS[1], 'rev', 'exp')
if cur[1] ~= ARGV[1] then return 0 end
local ttl = redis.call('TTL', KEYS[1])
redis.call('HSET', KEYS[1], 'rev', tostring(tonumber(ARGV[1]) + 1), 'rec', ARGV[2], 'exp', ARGV[3])
if ttl > 0 then
  redis.call('EXPIRE', KEYS[1], math.max(1, ttl + tonumber(ARGV[3]) - tonumber(cur[2])))
end
index(ARGV[5], ARGV[4], KEYS[1])
return 1"
    ))
});

/// KEYS: record, pending, in_flight. ARGV: expected. Returns 1 when deleted.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('HGET', KEYS[1], 'rev') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], KEYS[1])
redis.call('ZREM', KEYS[3], KEYS[1])
return 1",
    )
});

/// KEYS: id. ARGV: now, binding, exp. Returns 0 new, 1 same, 2 conflict.
static BIND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local cur = redis.call('HMGET', KEYS[1], 'b', 'exp')
local now = tonumber(ARGV[1])
if cur[1] and tonumber(cur[2]) >= now then
  if cur[1] == ARGV[2] then return 1 else return 2 end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'b', ARGV[2], 'exp', ARGV[3])
redis.call('EXPIRE', KEYS[1], math.max(1, tonumber(ARGV[3]) - now + 1))
return 0",
    )
});

/// Uses a single-use nonce (`KEYS[1]`) at `ARGV[1]` (now) until `ARGV[2]`: 1 when new or over an expired use,
/// 0 while an unexpired use is kept. Expiry compared in the store's clock, like the payment records'.
static USE_NONCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local kept = redis.call('GET', KEYS[1])
local now = tonumber(ARGV[1])
if kept and tonumber(kept) >= now then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'EX', math.max(1, tonumber(ARGV[2]) - now + 1))
return 1",
    )
});

/// A [`PaymentStore`] in Redis, shared by every process given the same server and prefix.
#[derive(Clone)]
pub struct RedisPaymentStore {
    conn: ConnectionManager,
    prefix: Arc<str>,
}

impl std::fmt::Debug for RedisPaymentStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisPaymentStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// The record as stored (`rec`); the revision lives beside it.
#[derive(Serialize, Deserialize)]
struct Stored {
    state: String,
    resource: String,
    fingerprint: B256,
    settlement: Option<SettleResponse>,
    payload: String,
    requirements: String,
    expires_at: u64,
    updated_at: u64,
}

fn backend(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend(Box::new(e))
}

#[derive(Debug, thiserror::Error)]
#[error("redis payment store: {0}")]
struct Corrupt(String);

fn encode(record: &PaymentRecord) -> Result<String, StoreError> {
    serde_json::to_string(&Stored {
        state: record.state.as_str().to_owned(),
        resource: record.resource.clone(),
        fingerprint: record.fingerprint,
        settlement: record.settlement.clone(),
        payload: record.payment.payload.to_string(),
        requirements: record.payment.requirements.to_string(),
        expires_at: record.expires_at,
        updated_at: record.updated_at,
    })
    .map_err(backend)
}

fn decode(rev: &str, rec: &str) -> Result<PaymentRecord, StoreError> {
    let s: Stored = serde_json::from_str(rec).map_err(backend)?;
    Ok(PaymentRecord {
        state: PaymentState::parse(&s.state)
            .ok_or_else(|| backend(Corrupt(format!("unknown state {:?}", s.state))))?,
        resource: s.resource,
        fingerprint: s.fingerprint,
        settlement: s.settlement,
        payment: Arc::new(StoredPayment {
            payload: s.payload.into(),
            requirements: s.requirements.into(),
        }),
        expires_at: s.expires_at,
        updated_at: s.updated_at,
        revision: rev
            .parse()
            .map_err(|_| backend(Corrupt(format!("revision {rev:?}"))))?,
    })
}

impl RedisPaymentStore {
    /// Connects to `url` (`redis://[user:pass@]host:port[/db]`, `rediss://` is not built in); keys start
    /// with `{prefix}:`. The connection reconnects by itself after a failure.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(backend)?;
        let conn = ConnectionManager::new(client).await.map_err(backend)?;
        Ok(Self::with_connection(conn, prefix))
    }

    /// A store over an existing connection manager.
    pub fn with_connection(conn: ConnectionManager, prefix: &str) -> Self {
        Self {
            conn,
            prefix: Arc::from(prefix),
        }
    }

    fn record_key(&self, key: &PaymentKey) -> String {
        format!(
            "{{{}}}:pay:{}:{}:{}:{}",
            self.prefix, key.chain_id, key.nonce_space, key.from, key.nonce
        )
    }

    fn index_keys(&self) -> (String, String) {
        (
            format!("{{{}}}:pending", self.prefix),
            format!("{{{}}}:in_flight", self.prefix),
        )
    }

    fn parse_record_key(member: &str) -> Option<PaymentKey> {
        let mut parts = member.rsplitn(5, ':');
        let nonce = parts.next()?.parse::<B256>().ok()?;
        let from = parts.next()?.parse::<Address>().ok()?;
        let asset = parts.next()?.parse::<Address>().ok()?;
        let chain_id = parts.next()?.parse::<u64>().ok()?;
        Some(PaymentKey {
            chain_id,
            nonce_space: asset,
            from,
            nonce,
        })
    }

    async fn read(&self, member: &str) -> Result<Option<PaymentRecord>, StoreError> {
        let mut conn = self.conn.clone();
        let (rev, rec): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(member)
            .arg("rev")
            .arg("rec")
            .query_async(&mut conn)
            .await
            .map_err(backend)?;
        match (rev, rec) {
            (Some(rev), Some(rec)) => decode(&rev, &rec).map(Some),
            _ => Ok(None),
        }
    }

    async fn run_change(
        &self,
        script: &Script,
        key: &PaymentKey,
        args: &[String],
    ) -> Result<redis::Value, StoreError> {
        let (pending, in_flight) = self.index_keys();
        let mut invocation = script.prepare_invoke();
        invocation
            .key(self.record_key(key))
            .key(pending)
            .key(in_flight);
        for a in args {
            invocation.arg(a);
        }
        let mut conn = self.conn.clone();
        invocation.invoke_async(&mut conn).await.map_err(backend)
    }
}

fn as_int(v: &redis::Value) -> Result<i64, StoreError> {
    redis::from_redis_value_ref(v).map_err(backend)
}

impl PaymentStore for RedisPaymentStore {
    fn reserve<'a>(
        &'a self,
        key: &'a PaymentKey,
        record: &'a PaymentRecord,
        now: u64,
    ) -> BoxFuture<'a, Result<Reservation, StoreError>> {
        Box::pin(async move {
            let args = [
                now.to_string(),
                encode(record)?,
                record.expires_at.to_string(),
                record.updated_at.to_string(),
                record.state.as_str().to_owned(),
            ];
            let answer = self.run_change(&RESERVE, key, &args).await?;
            let (rev, rec): (String, String) =
                redis::from_redis_value_ref(&answer).map_err(backend)?;
            if rev == "0" {
                Ok(Reservation::Reserved { revision: 1 })
            } else {
                Ok(Reservation::Taken(Box::new(decode(&rev, &rec)?)))
            }
        })
    }

    fn get<'a>(
        &'a self,
        key: &'a PaymentKey,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<PaymentRecord>, StoreError>> {
        Box::pin(async move {
            Ok(self
                .read(&self.record_key(key))
                .await?
                .filter(|r| r.expires_at >= now))
        })
    }

    fn update<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
        record: &'a PaymentRecord,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let args = [
                expected.to_string(),
                encode(record)?,
                record.expires_at.to_string(),
                record.updated_at.to_string(),
                record.state.as_str().to_owned(),
            ];
            Ok(as_int(&self.run_change(&UPDATE, key, &args).await?)? == 1)
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let answer = self
                .run_change(&RELEASE, key, &[expected.to_string()])
                .await?;
            Ok(as_int(&answer)? == 1)
        })
    }

    fn unresolved<'a>(
        &'a self,
        now: u64,
        stale_before: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(PaymentKey, PaymentRecord)>, StoreError>> {
        Box::pin(async move {
            let (pending, in_flight) = self.index_keys();
            let mut conn = self.conn.clone();
            let count = isize::try_from(limit).unwrap_or(isize::MAX);
            let pending_members: Vec<String> = conn
                .zrangebyscore_limit(&pending, "-inf", "+inf", 0, count)
                .await
                .map_err(backend)?;
            let mut members: Vec<(String, String)> = pending_members
                .into_iter()
                .map(|m| (pending.clone(), m))
                .collect();
            let stale: Vec<String> = conn
                .zrangebyscore_limit(&in_flight, "-inf", format!("({stale_before}"), 0, count)
                .await
                .map_err(backend)?;
            members.extend(stale.into_iter().map(|m| (in_flight.clone(), m)));
            let mut found = Vec::new();
            for (index, member) in members {
                let record = self.read(&member).await?;
                match (record, Self::parse_record_key(&member)) {
                    (Some(r), Some(key))
                        if r.expires_at >= now && super::needs_reconciling(&r, stale_before) =>
                    {
                        found.push((key, r));
                    }
                    (Some(_), Some(_)) => {}
                    // Expired (Redis deleted the hash) or not ours: drop it from the index.
                    _ => {
                        let _: i64 = conn.zrem(&index, &member).await.map_err(backend)?;
                    }
                }
            }
            found.sort_by_key(|(_, r)| r.updated_at);
            found.truncate(limit);
            Ok(found)
        })
    }

    fn bind_id<'a>(
        &'a self,
        id: &'a str,
        binding: &'a IdBinding,
        now: u64,
    ) -> BoxFuture<'a, Result<IdClaim, StoreError>> {
        Box::pin(async move {
            let bound = format!(
                "{}|{}:{}:{}:{}",
                binding.fingerprint,
                binding.key.chain_id,
                binding.key.nonce_space,
                binding.key.from,
                binding.key.nonce
            );
            let mut invocation = BIND.prepare_invoke();
            invocation
                .key(format!("{{{}}}:id:{id}", self.prefix))
                .arg(now.to_string())
                .arg(bound)
                .arg(binding.expires_at.to_string());
            let mut conn = self.conn.clone();
            let answer: i64 = invocation.invoke_async(&mut conn).await.map_err(backend)?;
            Ok(match answer {
                0 => IdClaim::New,
                1 => IdClaim::Same,
                _ => IdClaim::Conflict,
            })
        })
    }

    fn use_nonce<'a>(
        &'a self,
        nonce: &'a alloy_primitives::B256,
        expires_at: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            // One script: one atomic step, whichever instance asks.
            let mut invocation = USE_NONCE.prepare_invoke();
            invocation
                .key(format!("{{{}}}:nonce:{nonce}", self.prefix))
                .arg(now.to_string())
                .arg(expires_at.to_string());
            let mut conn = self.conn.clone();
            let used: i64 = invocation.invoke_async(&mut conn).await.map_err(backend)?;
            Ok(used == 1)
        })
    }
}
