//! [`PaymentEngineBuilder`]: how an engine is configured, and what it refuses.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{
    Clock, DEFAULT_IN_FLIGHT_WAIT, DEFAULT_KEEP_AFTER_EXPIRY, DEFAULT_MAX_HEADER_LEN,
    DEFAULT_STALE_AFTER, DEFAULT_STORE_TIMEOUT, PaymentEngine, STALE_MARGIN, X402Metrics,
    system_now,
};
use crate::boxed::BoxFuture;
use crate::scheme::{Scheme, Schemes};
use crate::settle::{SettlementObserver, Settler};
use crate::store::{
    IdBinding, IdClaim, InMemoryPaymentStore, PaymentKey, PaymentRecord, PaymentStore, Reservation,
    StoreError,
};

/// Why a [`PaymentEngineBuilder`] refused its configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineConfigError {
    /// No settler was given. Choose one explicitly; [`VerifyOnlySettler`](crate::settle::VerifyOnlySettler) moves no
    /// money and must be written out.
    #[error(
        "no settler: choose one (VerifyOnlySettler moves no money and must be chosen explicitly)"
    )]
    NoSettler,
    /// `max_header_len` is too small to hold any payment.
    #[error("max_header_len {0} is too small (at least 512)")]
    HeaderLimitTooSmall(usize),
}

/// Configuration of a [`PaymentEngine`].
///
/// ```
/// use std::sync::Arc;
/// use x402_tower::engine::PaymentEngine;
/// use x402_tower::{settle::VerifyOnlySettler, store::InMemoryPaymentStore};
///
/// let engine = PaymentEngine::builder()
///     .settler(Arc::new(VerifyOnlySettler))
///     .store(Arc::new(InMemoryPaymentStore::default()))
///     .build()
///     .unwrap();
/// ```
#[must_use]
pub struct PaymentEngineBuilder {
    settler: Option<Arc<dyn Settler>>,
    verify_only: bool,
    observer: Option<Arc<dyn SettlementObserver>>,
    store: Option<Arc<dyn PaymentStore>>,
    max_header_len: usize,
    in_flight_wait: Duration,
    stale_after: Duration,
    keep_after_expiry: Duration,
    store_timeout: Duration,
    clock: Option<Clock>,
    schemes: Vec<Arc<dyn Scheme>>,
    task_context: Option<Arc<super::TaskContext>>,
}

impl std::fmt::Debug for PaymentEngineBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentEngineBuilder")
            .field("settler", &self.settler.is_some())
            .field("observer", &self.observer.is_some())
            .field("max_header_len", &self.max_header_len)
            .finish_non_exhaustive()
    }
}

impl PaymentEngineBuilder {
    /// Sells with `scheme` too (`exact` over EIP-3009 is built in): an offer whose
    /// [`PaymentOffer::scheme`](crate::PaymentOffer::scheme) it [sells](Scheme::sells) is read and checked
    /// by it, under every money rule of the engine. Schemes are asked in the order added, the built-in
    /// ones last. See [`crate::scheme`].
    pub fn scheme(mut self, scheme: Arc<dyn Scheme>) -> Self {
        self.schemes.push(scheme);
        self
    }

    /// The settler (required).
    pub fn settler(mut self, settler: Arc<dyn Settler>) -> Self {
        self.settler = Some(settler);
        self
    }

    pub(crate) fn verify_only_default(mut self) -> Self {
        if self.settler.is_none() {
            self.settler = Some(Arc::new(crate::settle::VerifyOnlySettler));
            self.verify_only = true;
        }
        self
    }

    /// Reports every settlement outcome (settled, failed, unknown, and reconciliations) to `observer`,
    /// awaited before anybody is answered. See [`SettlementObserver`].
    pub fn settlement_observer(mut self, observer: Arc<dyn SettlementObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Where payments are remembered (default: an [`InMemoryPaymentStore`] of 100 000 entries, for one
    /// process). Several instances of a service need a shared store.
    pub fn store(mut self, store: Arc<dyn PaymentStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Cap on the payment header's length, checked before decoding (default 16 KiB).
    pub fn max_header_len(mut self, len: usize) -> Self {
        self.max_header_len = len;
        self
    }

    /// How long a resend waits for the first request of the same payment to finish before it is answered
    /// `settlement_pending` (default 5 s).
    pub fn in_flight_wait(mut self, wait: Duration) -> Self {
        self.in_flight_wait = wait;
        self
    }

    /// After how long an `InFlight` record is taken for the leftover of a request that died (a crash, a
    /// future dropped outside a Tokio runtime) and reconciled (default 180 s). The engine raises it to the settler's
    /// [`settle_deadline`](Settler::settle_deadline) plus a minute when that is longer, so a slow settlement
    /// still under way is never reconciled underneath itself.
    pub fn stale_after(mut self, after: Duration) -> Self {
        self.stale_after = after;
        self
    }

    /// How long a payment's record is kept after its `validBefore` (default 15 minutes; raised to the stale
    /// time plus a minute). No authorization can be used past its `validBefore`, so a record is no longer
    /// needed against replays then; it is kept so that
    ///
    /// - a payment whose outcome was unknown at `validBefore` (a settlement pending, a request that died) is
    ///   still reconciled ([`PaymentEngine::reconcile_unresolved`]), and
    /// - a buyer who resends a settled payment after its `validBefore` (a response lost near the end of the
    ///   window, a pending settlement reconciled late) gets the content again instead of a refusal. Such a
    ///   payment is checked as of its last valid second and only ever redelivered, never settled.
    ///
    /// Records (and payment identifiers) live `validBefore` plus this (the engine's default in-memory store
    /// gives up settled ones past `validBefore` when it is full:
    /// [`InMemoryPaymentStore::evicting_settled_after`]). As before `validBefore`, whoever holds the identical payment is served
    /// its resource again; a payment settled on chain is public (its calldata), so this is also how long a
    /// chain observer who rebuilds it could be served that one resource again.
    pub fn keep_after_expiry(mut self, keep: Duration) -> Self {
        self.keep_after_expiry = keep;
        self
    }

    /// How long one call of the store may take before it counts as failed (default 10 s): a store that
    /// hangs refuses payments (503) instead of holding requests open, and a write after a settlement is
    /// tried again ([`PaymentStore`] calls are compare-and-set, so a late write is never applied twice).
    /// Inside a Tokio runtime the bound is Tokio's timer, so that runtime needs its time driver
    /// (`enable_time`, or `enable_all` as `#[tokio::main]` does); outside one, store calls are not bounded.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = timeout;
        self
    }

    /// Wraps each task the engine spawns to finish a payment (the settlement and its writes, which run to
    /// their end whatever becomes of the request), called on the request's task: carry the request's
    /// task-locals into it, as the settlement observer may read them. The request's tracing span is carried
    /// already.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use x402_tower::{engine::PaymentEngine, settle::VerifyOnlySettler};
    /// tokio::task_local! { static TENANT: u32; }
    /// let engine = PaymentEngine::builder()
    ///     .settler(Arc::new(VerifyOnlySettler))
    ///     .task_context(|task| {
    ///         let tenant = TENANT.try_with(|t| *t).unwrap_or(0);
    ///         Box::pin(TENANT.scope(tenant, task))
    ///     })
    ///     .build()
    ///     .unwrap();
    /// # let _ = engine;
    /// ```
    pub fn task_context(
        mut self,
        wrap: impl Fn(BoxFuture<'static, ()>) -> BoxFuture<'static, ()> + Send + Sync + 'static,
    ) -> Self {
        self.task_context = Some(Arc::new(wrap));
        self
    }

    /// Replaces the clock (unix seconds). For tests with fixed signatures.
    pub fn clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Checks the configuration and builds the engine.
    pub fn build(self) -> Result<PaymentEngine, EngineConfigError> {
        if self.max_header_len < 512 {
            return Err(EngineConfigError::HeaderLimitTooSmall(self.max_header_len));
        }
        let settler = self.settler.ok_or(EngineConfigError::NoSettler)?;
        let stale_after = match settler.settle_deadline() {
            Some(deadline) => self.stale_after.max(deadline + STALE_MARGIN),
            None => self.stale_after,
        };
        let keep_after_expiry = self.keep_after_expiry.max(stale_after + STALE_MARGIN);
        Ok(PaymentEngine {
            settler,
            observer: self.observer,
            store: Arc::new(Bounded {
                store: self.store.unwrap_or_else(|| {
                    Arc::new(
                        InMemoryPaymentStore::default().evicting_settled_after(keep_after_expiry),
                    )
                }),
                timeout: self.store_timeout,
            }),
            max_header_len: self.max_header_len,
            in_flight_wait: self.in_flight_wait,
            stale_after: stale_after.as_secs().max(1),
            keep_after_expiry: keep_after_expiry.as_secs(),
            verify_only: self.verify_only,
            verify_only_warned: std::sync::atomic::AtomicBool::new(false),
            metrics: Arc::new(X402Metrics::default()),
            clock: self.clock.unwrap_or_else(|| Arc::new(system_now)),
            schemes: Schemes::new(self.schemes),
            compiled: Mutex::new(HashMap::new()),
            task_context: self.task_context,
        })
    }
}

impl PaymentEngine {
    /// Starts a configuration.
    pub fn builder() -> PaymentEngineBuilder {
        PaymentEngineBuilder {
            settler: None,
            verify_only: false,
            observer: None,
            store: None,
            max_header_len: DEFAULT_MAX_HEADER_LEN,
            in_flight_wait: DEFAULT_IN_FLIGHT_WAIT,
            stale_after: DEFAULT_STALE_AFTER,
            keep_after_expiry: DEFAULT_KEEP_AFTER_EXPIRY,
            store_timeout: DEFAULT_STORE_TIMEOUT,
            clock: None,
            schemes: Vec::new(),
            task_context: None,
        }
    }
}

/// The engine's store: each call bounded by [`PaymentEngineBuilder::store_timeout`].
struct Bounded {
    store: Arc<dyn PaymentStore>,
    timeout: Duration,
}

impl Bounded {
    fn bound<'a, T: Send + 'a>(
        &self,
        call: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        // Bounded with Tokio's timer; a caller outside a Tokio runtime (a layer driven by another executor)
        // gets the store's own answer.
        if tokio::runtime::Handle::try_current().is_err() {
            return call;
        }
        let timeout = self.timeout;
        Box::pin(async move {
            tokio::time::timeout(timeout, call)
                .await
                .unwrap_or(Err(StoreError::TimedOut(timeout)))
        })
    }
}

impl PaymentStore for Bounded {
    fn reserve<'a>(
        &'a self,
        key: &'a PaymentKey,
        record: &'a PaymentRecord,
        now: u64,
    ) -> BoxFuture<'a, Result<Reservation, StoreError>> {
        self.bound(self.store.reserve(key, record, now))
    }
    fn get<'a>(
        &'a self,
        key: &'a PaymentKey,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<PaymentRecord>, StoreError>> {
        self.bound(self.store.get(key, now))
    }
    fn update<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
        record: &'a PaymentRecord,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.bound(self.store.update(key, expected, record))
    }
    fn release<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.bound(self.store.release(key, expected))
    }
    fn unresolved<'a>(
        &'a self,
        now: u64,
        stale_before: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(PaymentKey, PaymentRecord)>, StoreError>> {
        self.bound(self.store.unresolved(now, stale_before, limit))
    }
    fn bind_id<'a>(
        &'a self,
        id: &'a str,
        binding: &'a IdBinding,
        now: u64,
    ) -> BoxFuture<'a, Result<IdClaim, StoreError>> {
        self.bound(self.store.bind_id(id, binding, now))
    }
    fn use_nonce<'a>(
        &'a self,
        nonce: &'a alloy_primitives::B256,
        expires_at: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.bound(self.store.use_nonce(nonce, expires_at, now))
    }
}
