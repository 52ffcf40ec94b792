//! llms.txt interest that cannot be turned into a write flood.
//!
//! Every `GET /serveLlmsTxt` is counted in memory under its (minute, user agent, client IP) and the counts
//! are written to the database in one batch per [`FLUSH_EVERY`] (rows of the same key add up there too, so
//! instances share one table). A flood of requests costs one small write per second, not one fsync'd row
//! per request. What is kept is bounded: at most [`MAX_PENDING_KEYS`] distinct keys wait in memory (beyond
//! that, new keys are counted under [`OVERFLOW`]), and rows older than the retention period are deleted.
//! The last batch is written on graceful shutdown; a batch whose write fails is kept for the next flush.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use time::OffsetDateTime;

use crate::store::StoreError;
use crate::store::licensing::{LicensingStore, LlmsTxtInterest};

/// How often counted interest is written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Most distinct (minute, agent, client) keys held in memory between flushes.
pub const MAX_PENDING_KEYS: usize = 10_000;

/// User agent and client of interest counted once [`MAX_PENDING_KEYS`] is reached.
pub const OVERFLOW: &str = "(overflow)";

/// Longest user agent kept (longer ones are cut at a character boundary).
pub const MAX_USER_AGENT: usize = 256;

/// How long recorded interest is kept by default.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 86_400);

/// (minute, user agent, client address, verified agent or "").
type Key = (i64, String, String, String);

/// Counts llms.txt requests in memory and writes them in batches.
#[derive(Debug, Default)]
pub struct InterestRecorder {
    pending: Mutex<HashMap<Key, u64>>,
    requests: AtomicU64,
    flushed: AtomicU64,
    overflowed: AtomicU64,
}

impl InterestRecorder {
    /// Counts one request at `at` from `client` with `user_agent`, signed by the verified `agent` if any.
    pub fn record(
        &self,
        at: OffsetDateTime,
        user_agent: &str,
        client: Option<IpAddr>,
        verified_agent: Option<&str>,
    ) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let minute = at.unix_timestamp().div_euclid(60);
        let agent = cap(user_agent);
        let verified = verified_agent.map(cap).unwrap_or_default();
        let client = client.map_or_else(String::new, |ip| ip.to_canonical().to_string());
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let key = (minute, agent, client, verified);
        if let Some(n) = pending.get_mut(&key) {
            *n += 1;
            return;
        }
        let key = if pending.len() < MAX_PENDING_KEYS {
            key
        } else {
            self.overflowed.fetch_add(1, Ordering::Relaxed);
            (
                minute,
                OVERFLOW.to_owned(),
                OVERFLOW.to_owned(),
                String::new(),
            )
        };
        *pending.entry(key).or_insert(0) += 1;
    }

    /// Requests counted since start (the `/metrics` counter).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Requests written to the database since start.
    pub fn flushed(&self) -> u64 {
        self.flushed.load(Ordering::Relaxed)
    }

    /// Requests counted under [`OVERFLOW`] since start.
    pub fn overflowed(&self) -> u64 {
        self.overflowed.load(Ordering::Relaxed)
    }

    /// Records the recorder's counters (with the server's metrics recorder current).
    pub fn record_metrics(&self) {
        crate::metrics::counter(
            "llms_txt_requests_total",
            "GET /serveLlmsTxt requests since start (this instance).",
            self.requests(),
        );
        crate::metrics::counter(
            "llms_txt_requests_flushed_total",
            "Of those, requests written to the database (in per-second batches).",
            self.flushed(),
        );
        crate::metrics::counter(
            "llms_txt_requests_overflowed_total",
            "Of those, requests counted under (overflow) because too many distinct clients came at once.",
            self.overflowed(),
        );
    }

    /// Writes everything counted so far in one batch; returns how many requests it carried. On failure
    /// the counts go back to wait for the next flush.
    pub async fn flush(&self, store: &dyn LicensingStore) -> Result<u64, StoreError> {
        let taken = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        if taken.is_empty() {
            return Ok(0);
        }
        let requests: u64 = taken.values().sum();
        let batch = taken
            .iter()
            .map(|((minute, user_agent, client, agent), n)| LlmsTxtInterest {
                bucket: bucket(*minute),
                user_agent: user_agent.clone(),
                client_addr: client.clone(),
                agent: agent.clone(),
                count: *n,
            })
            .collect();
        match store.add_llms_txt_interest(batch).await {
            Ok(()) => {
                self.flushed.fetch_add(requests, Ordering::Relaxed);
                Ok(requests)
            }
            Err(e) => {
                let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                for (key, n) in taken {
                    *pending.entry(key).or_insert(0) += n;
                }
                Err(e)
            }
        }
    }
}

/// The bucket (start of the minute, RFC 3339 UTC) that `retention` before `now` falls in.
pub fn retention_cutoff(now: OffsetDateTime, retention: Duration) -> String {
    let secs = i64::try_from(retention.as_secs()).unwrap_or(i64::MAX);
    bucket(now.unix_timestamp().saturating_sub(secs).div_euclid(60))
}

fn bucket(minute: i64) -> String {
    let at = OffsetDateTime::from_unix_timestamp(minute.saturating_mul(60))
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:00Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute()
    )
}

fn cap(user_agent: &str) -> String {
    if user_agent.len() <= MAX_USER_AGENT {
        return user_agent.to_owned();
    }
    let mut end = MAX_USER_AGENT;
    while !user_agent.is_char_boundary(end) {
        end -= 1;
    }
    user_agent[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Db, SqliteLicensingStore};

    #[tokio::test]
    async fn counts_in_memory_and_flushes_one_row_per_minute_agent_and_client() {
        let store = SqliteLicensingStore::new(Db::open_in_memory().unwrap());
        let r = InterestRecorder::default();
        let t = time::macros::datetime!(2026-11-23 05:19:42 UTC);
        let ip: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        for _ in 0..1000 {
            r.record(t, "GPTBot/1.0", Some(ip), None);
        }
        r.record(t + Duration::from_secs(60), "GPTBot/1.0", Some(ip), None);
        r.record(t, &"é".repeat(300), None, None);
        assert_eq!(r.flush(&store).await.unwrap(), 1002);
        assert_eq!(r.flush(&store).await.unwrap(), 0, "nothing twice");
        let stats = store.llms_txt_stats().await.unwrap();
        assert_eq!(stats.total, 1002);
        assert_eq!(stats.distinct_clients, 2);
        let row = stats
            .recent
            .iter()
            .find(|i| i.bucket == "2026-11-23T05:19:00Z" && i.user_agent == "GPTBot/1.0")
            .unwrap();
        assert_eq!((row.count, row.client_addr.as_str()), (1000, "10.0.0.7"));
        assert!(
            stats
                .recent
                .iter()
                .any(|i| i.user_agent.len() <= MAX_USER_AGENT && i.user_agent.starts_with('é'))
        );
        assert_eq!((r.requests(), r.flushed()), (1002, 1002));
    }

    #[tokio::test]
    async fn distinct_keys_are_bounded() {
        let r = InterestRecorder::default();
        let t = time::macros::datetime!(2026-11-23 05:19:42 UTC);
        for i in 0..(MAX_PENDING_KEYS + 500) {
            r.record(t, &format!("agent {i}"), None, None);
        }
        assert_eq!(r.overflowed(), 500);
        let pending = r.pending.lock().unwrap();
        assert_eq!(pending.len(), MAX_PENDING_KEYS + 1);
        assert_eq!(
            pending[&(
                t.unix_timestamp() / 60,
                OVERFLOW.into(),
                OVERFLOW.into(),
                String::new()
            )],
            500
        );
    }

    #[tokio::test]
    async fn a_failed_flush_keeps_the_counts() {
        let r = InterestRecorder::default();
        let t = time::macros::datetime!(2026-11-23 05:19:42 UTC);
        r.record(t, "a", None, None);
        r.record(t, "b", None, None);
        let broken = Db::open_in_memory().unwrap();
        broken
            .write(|c| Ok(c.execute_batch("DROP TABLE llms_txt_interest")?))
            .await
            .unwrap();
        assert!(r.flush(&SqliteLicensingStore::new(broken)).await.is_err());
        assert_eq!(r.flushed(), 0);
        r.record(t, "a", None, None);
        let store = SqliteLicensingStore::new(Db::open_in_memory().unwrap());
        assert_eq!(r.flush(&store).await.unwrap(), 3, "kept and added up");
        assert_eq!(
            store.llms_txt_stats().await.unwrap().by_user_agent[0].count,
            2
        );
    }

    #[test]
    fn retention_cutoff_is_a_minute_bucket() {
        let t = time::macros::datetime!(2026-11-23 05:19:42 UTC);
        assert_eq!(
            retention_cutoff(t, Duration::from_secs(86_400)),
            "2026-11-22T05:19:00Z"
        );
    }
}
