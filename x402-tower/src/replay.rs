//! The replay guard: one use per `(chainId, asset, from, nonce)`.
//!
//! # The keep/release rule
//!
//! The layer reserves the key before the inner service runs. Afterwards:
//!
//! | what happened | reservation | why |
//! |---|---|---|
//! | settled (including verify-only "settlement") | kept (`mark_used`) until `validBefore` | the nonce is spent |
//! | settle-after, inner service answered >= 400 or failed | released | nothing was settled: the authorization is still usable, the payer was not charged |
//! | settler's verify said invalid, or a settler/facilitator error before settling | released | nothing was broadcast |
//! | settlement failed and the settler says `authorization_still_usable` | released | e.g. insufficient funds: it may succeed later |
//! | settlement failed otherwise, or outcome unknown (timeout after broadcast) | kept | it may be (or may become) spent on chain |
//! | the response future was dropped (client went away) mid-flight | kept until `validBefore` | conservative: never two uses |
//!
//! With `SettleTiming::BeforeHandler` the payer is charged before the inner service runs; if that service then
//! fails, the money has moved: the key stays used and the failure is the application's to remedy.
//!
//! A shared store (a database table with a unique key, for several instances) implements [`ReplayStore`]; the
//! in-memory one is for a single process.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use alloy_primitives::{Address, B256};

use crate::pricing::BoxFuture;

/// The identity of one EIP-3009 authorization on chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReplayKey {
    /// Chain id.
    pub chain_id: u64,
    /// Token contract.
    pub asset: Address,
    /// Payer.
    pub from: Address,
    /// Authorization nonce.
    pub nonce: B256,
}

/// Result of [`ReplayStore::reserve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// The key was free and is now reserved for this request.
    Reserved,
    /// The key is reserved or used by another request.
    AlreadyUsed,
}

/// A replay store failed (the layer answers 503).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store is full of unexpired entries.
    #[error("replay store is full ({0} unexpired entries)")]
    Full(usize),
    /// Any other failure of a custom store (database down, ...).
    #[error("replay store failed: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Where used and in-flight authorizations are remembered. Must be atomic: two concurrent `reserve` of one
/// key give one `Reserved` and one `AlreadyUsed`.
pub trait ReplayStore: Send + Sync + 'static {
    /// Reserves `key` until `expires_at` (unix seconds, the authorization's `validBefore`); `now` is the
    /// layer's clock, so a store can drop expired entries.
    fn reserve<'a>(
        &'a self,
        key: &'a ReplayKey,
        expires_at: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<Reservation, StoreError>>;
    /// Forgets a reservation: the authorization may be presented again.
    fn release<'a>(&'a self, key: &'a ReplayKey) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Marks a reservation as used for good (kept until it expires).
    fn mark_used<'a>(&'a self, key: &'a ReplayKey) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// Default capacity of [`InMemoryReplayStore::default`].
pub const DEFAULT_CAPACITY: usize = 100_000;

#[derive(Debug, Clone, Copy)]
struct Entry {
    expires_at: u64,
    used: bool,
}

/// A bounded in-memory [`ReplayStore`] for one process. When full, expired entries are purged; if none
/// expired, `reserve` fails with [`StoreError::Full`] (the layer answers 503) rather than forget a live key.
#[derive(Debug)]
pub struct InMemoryReplayStore {
    capacity: usize,
    map: Mutex<HashMap<ReplayKey, Entry>>,
    /// `now + 1` of the last full purge (0: never), written under the map's lock. A second purge within the
    /// same second would find nothing more to drop (new entries expire at `validBefore >= now + 6`), so a
    /// store full of live keys scans its entries at most once per second instead of on every request.
    purged_at: AtomicU64,
}

impl Default for InMemoryReplayStore {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_CAPACITY)
    }
}

impl InMemoryReplayStore {
    /// A store holding at most `capacity` unexpired keys.
    pub fn with_capacity(capacity: usize) -> Self {
        InMemoryReplayStore {
            capacity: capacity.max(1),
            map: Mutex::new(HashMap::new()),
            purged_at: AtomicU64::new(0),
        }
    }

    /// Number of entries held (expired ones included until purged).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` is reserved or used (and not expired at `now`).
    pub fn contains(&self, key: &ReplayKey, now: u64) -> bool {
        self.lock().get(key).is_some_and(|e| e.expires_at >= now)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ReplayKey, Entry>> {
        // A panic while holding this lock cannot leave the map inconsistent: recover the guard.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn reserve_now(
        &self,
        key: &ReplayKey,
        expires_at: u64,
        now: u64,
    ) -> Result<Reservation, StoreError> {
        let mut map = self.lock();
        if let Some(e) = map.get(key)
            && e.expires_at >= now
        {
            return Ok(Reservation::AlreadyUsed);
        }
        if map.len() >= self.capacity && !map.contains_key(key) {
            let stamp = now.wrapping_add(1);
            if self.purged_at.load(Ordering::Relaxed) != stamp {
                map.retain(|_, e| e.expires_at >= now);
                self.purged_at.store(stamp, Ordering::Relaxed);
            }
            if map.len() >= self.capacity {
                return Err(StoreError::Full(map.len()));
            }
        }
        map.insert(
            *key,
            Entry {
                expires_at,
                used: false,
            },
        );
        Ok(Reservation::Reserved)
    }
}

impl ReplayStore for InMemoryReplayStore {
    fn reserve<'a>(
        &'a self,
        key: &'a ReplayKey,
        expires_at: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<Reservation, StoreError>> {
        let r = self.reserve_now(key, expires_at, now);
        Box::pin(std::future::ready(r))
    }

    fn release<'a>(&'a self, key: &'a ReplayKey) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut map = self.lock();
        if map.get(key).is_some_and(|e| !e.used) {
            map.remove(key);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn mark_used<'a>(&'a self, key: &'a ReplayKey) -> BoxFuture<'a, Result<(), StoreError>> {
        if let Some(e) = self.lock().get_mut(key) {
            e.used = true;
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> ReplayKey {
        ReplayKey {
            chain_id: 1,
            asset: Address::ZERO,
            from: Address::ZERO,
            nonce: B256::repeat_byte(n),
        }
    }

    #[test]
    fn reserve_release_use_expire_capacity() {
        let s = InMemoryReplayStore::with_capacity(2);
        assert_eq!(
            s.reserve_now(&key(1), 100, 10).unwrap(),
            Reservation::Reserved
        );
        assert_eq!(
            s.reserve_now(&key(1), 100, 10).unwrap(),
            Reservation::AlreadyUsed
        );
        drop(s.release(&key(1)));
        assert_eq!(
            s.reserve_now(&key(1), 100, 10).unwrap(),
            Reservation::Reserved
        );
        drop(s.mark_used(&key(1)));
        drop(s.release(&key(1))); // used keys are not released
        assert_eq!(
            s.reserve_now(&key(1), 100, 10).unwrap(),
            Reservation::AlreadyUsed
        );
        assert_eq!(
            s.reserve_now(&key(2), 50, 10).unwrap(),
            Reservation::Reserved
        );
        assert!(matches!(
            s.reserve_now(&key(3), 100, 10),
            Err(StoreError::Full(2))
        ));
        // Once key 2 expired, there is room again; key 1 is still live.
        assert_eq!(
            s.reserve_now(&key(3), 100, 60).unwrap(),
            Reservation::Reserved
        );
        assert!(s.contains(&key(1), 60));
        assert!(!s.contains(&key(2), 60));
        // Full of live keys: refused again within the same second (no second scan needed), room again once
        // a key is released, and an expiry is noticed in a later second.
        assert!(matches!(
            s.reserve_now(&key(4), 100, 60),
            Err(StoreError::Full(2))
        ));
        assert!(matches!(
            s.reserve_now(&key(4), 100, 60),
            Err(StoreError::Full(2))
        ));
        drop(s.release(&key(3)));
        assert_eq!(
            s.reserve_now(&key(4), 70, 60).unwrap(),
            Reservation::Reserved
        );
        assert!(matches!(
            s.reserve_now(&key(5), 100, 65),
            Err(StoreError::Full(2))
        ));
        assert_eq!(
            s.reserve_now(&key(5), 100, 71).unwrap(),
            Reservation::Reserved
        );
    }
}
