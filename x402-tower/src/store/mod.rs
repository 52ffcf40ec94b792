//! The payment state store: one record per authorization, keyed by the nonce it spends ([`PaymentKey`]: `(chainId, nonce space, from, nonce)`), shared by every
//! door into the [`PaymentEngine`](crate::engine::PaymentEngine) (the layer's routes, a facilitator API) and,
//! with a shared implementation (a database table, Redis), by every instance of a service.
//!
//! It is at once the replay guard (one settlement per authorization) and the delivery memory (a resend of
//! the identical payment for the same resource is answered again from the record, never settled again).
//!
//! # States and the keep/release rule
//!
//! The engine reserves the key ([`PaymentState::InFlight`]) before anything can move money. What becomes of
//! the record afterwards is decided by one function, [`disposition`], from what happened:
//!
//! | what happened ([`Event`]) | record ([`Disposition`]) | why |
//! |---|---|---|
//! | settled (including verify-only "settlement") | `Settled`, with the settlement, until `expires_at` | the nonce is spent; a resend of the identical payment for the same resource gets the same answer |
//! | settle-after, inner service answered >= 400 or failed | released (deleted) | nothing was settled: the payer was not charged |
//! | the settler's verify said invalid, or could not be reached | released | nothing was broadcast |
//! | the settler's verify said the nonce is already used on chain | `Spent` | no door may try it again |
//! | settlement failed and the settler says `authorization_still_usable` | released | e.g. insufficient funds: it may succeed later |
//! | settlement failed otherwise | `Spent` | it is (or may become) spent on chain |
//! | outcome unknown (timeout after broadcast, no answer from a facilitator) | `Pending`, with the transaction when known | reconciled before anything else is done with it (a resend, or the background reconciler) |
//!
//! A record that becomes `Settled` or `Spent` ([`PaymentState::is_final`]) no longer keeps the payment
//! ([`StoredPayment::forgotten`]): only an unresolved record is settled or reconciled again.
//!
//! A request dropped before its payment was settled (the client went away, the protected service
//! panicked) releases its record; once a settlement has begun it runs to its end in a task of its own, the
//! record written whatever became of the request. A request whose process died leaves its record `InFlight`
//! (as does a dropped one outside a Tokio runtime). Before it asks the settler to move money, the engine
//! marks the record (still `InFlight`, holding the `settlement_pending` answer; not for a settler that
//! moves none, [`Settler::moves_money`](crate::Settler::moves_money), whose records are all reconciled). After
//! [`stale_after`](crate::engine::PaymentEngineBuilder::stale_after), a marked record is reconciled like
//! `Pending`; an unmarked one moved nothing (its request died verifying, or inside a settle-after handler
//! whose answer nobody saw) and is released without asking the settler, so nothing is charged for a
//! request that was not served. A reconciliation that finds the payment unsettled and still usable releases
//! it — except on a resend, where the resending request keeps the claim and settles it anew (release and
//! reserve in one step): at once when the payment was marked, after its handler on a settle-after route
//! when it was not.
//!
//! The engine moves records only with compare-and-set updates ([`PaymentStore::update`],
//! [`PaymentStore::release`] on the record's `revision`), so two requests or two instances can never both act
//! on one record. What it answers for a record another request left is decided in
//! `engine::PaymentEngine::on_taken`.
//!
//! # Payment identifiers
//!
//! The `payment-identifier` extension binds a client-chosen id to a fingerprint of the payment and the
//! request ([`PaymentStore::bind_id`]): the same id with another payment is a conflict (409). Ids expire with
//! their payment.
//!
//! # Single-use nonces
//!
//! A nonce that is not a payment's (sign-in-with-x's) is used once until it expires
//! ([`PaymentStore::use_nonce`]), in a record of its own: the payment records and identifiers hold payments
//! only.
//!
//! # Implementing a store
//!
//! Every method must be atomic with respect to the others on the same key: two concurrent `reserve` of one
//! key give one [`Reservation::Reserved`] and one [`Reservation::Taken`]; `update` and `release` succeed only
//! when the stored revision is the expected one. Records whose `expires_at` is before `now` count as absent.
//! [`InMemoryPaymentStore`] is the reference implementation for one process; `conformance` (feature
//! `test-util`) checks a store against this contract, call after call and under contention.

#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod conformance;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use alloy_primitives::{Address, B256};

use crate::boxed::BoxFuture;
use crate::proto::SettleResponse;

/// The identity of one EIP-3009 authorization on chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PaymentKey {
    /// Chain id.
    pub chain_id: u64,
    /// Token contract.
    pub nonce_space: Address,
    /// Payer.
    pub from: Address,
    /// Authorization nonce.
    pub nonce: B256,
}

/// Where one payment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PaymentState {
    /// Reserved by a request that is verifying or settling it now.
    InFlight,
    /// Settled; the record holds the settlement.
    Settled,
    /// Nobody knows yet whether money moved (timeout after broadcast): reconcile before anything else.
    Pending,
    /// Failed and not usable again.
    Spent,
}

impl PaymentState {
    /// Every state.
    pub const ALL: [PaymentState; 4] = [
        PaymentState::InFlight,
        PaymentState::Settled,
        PaymentState::Pending,
        PaymentState::Spent,
    ];

    /// `in_flight`, `settled`, `pending` or `spent`: the stored form.
    pub const fn as_str(self) -> &'static str {
        match self {
            PaymentState::InFlight => "in_flight",
            PaymentState::Settled => "settled",
            PaymentState::Pending => "pending",
            PaymentState::Spent => "spent",
        }
    }

    /// The state stored as `s`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// `Settled` or `Spent`: nothing will be done with the payment again, only answered from its record (a
    /// resend) or refused (a replay). Such a record keeps no payment ([`StoredPayment::forgotten`]).
    pub const fn is_final(self) -> bool {
        matches!(self, PaymentState::Settled | PaymentState::Spent)
    }
}

/// The payment as the client sent it: enough to settle or reconcile it again without the client. Kept as
/// JSON text (what a database stores), so that remembering a payment copies no JSON tree.
///
/// [`StoredPayment::new`] keeps the client's text less the extensions it echoed from the 402 that nothing
/// after the payment reads (a route's own declarations that keep no echo,
/// [`Extension::keeps_echo`](crate::extensions::Extension::keeps_echo); at the facilitator door,
/// [`FacilitatorPolicy::left_out`](crate::engine::facilitator::FacilitatorPolicy::left_out));
/// every other member, every other extension (the `payment-identifier` id, gas sponsoring, one this crate does
/// not know) and every byte of them is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPayment {
    /// The decoded `PaymentPayload`, JSON text as the client sent it (less the extensions left out when
    /// made by [`StoredPayment::new`]).
    pub payload: Arc<str>,
    /// The `PaymentRequirements` it matched, in the payload's version, JSON text.
    pub requirements: Arc<str>,
}

impl StoredPayment {
    /// What a record keeps of a payment: `payload_text` (the client's JSON text of `payload`) less the
    /// extensions named in `left_out` in its `extensions` (`{}` when nothing else is left; every byte outside that
    /// object is kept as sent), and `requirements`. The text is shared, not copied, when there is nothing
    /// to leave out (v1, no echoes).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use x402_tower::store::StoredPayment;
    ///
    /// let text: Arc<str> = Arc::from(
    ///     r#"{"x402Version":2, "payload":{}, "extensions":{"bazaar":{"info":{}},"payment-identifier":{"info":{"id":"p_1"}}}}"#,
    /// );
    /// let kept = StoredPayment::new(&text, Arc::from("{}"), &["bazaar"]);
    /// assert_eq!(
    ///     &*kept.payload,
    ///     r#"{"x402Version":2, "payload":{}, "extensions":{"payment-identifier":{"info":{"id":"p_1"}}}}"#
    /// );
    /// ```
    pub fn new(
        payload_text: &Arc<str>,
        requirements: Arc<str>,
        left_out: &[impl AsRef<str>],
    ) -> Self {
        StoredPayment::kept(
            payload_text,
            extensions_span(payload_text, left_out),
            requirements,
            left_out,
        )
    }

    /// [`StoredPayment::new`] for a payment whose `extensions` member's value is at `extensions`
    /// (byte range) in `payload_text`, as its decoding found it (`verify::payload_at`): the text is not
    /// read again, only that value.
    pub(crate) fn kept(
        payload_text: &Arc<str>,
        extensions: Option<Range<usize>>,
        requirements: Arc<str>,
        left_out: &[impl AsRef<str>],
    ) -> Self {
        StoredPayment {
            payload: extensions
                .and_then(|at| without_echoes(payload_text, at, left_out))
                .unwrap_or_else(|| payload_text.clone()),
            requirements,
        }
    }

    /// What a record in a final state keeps of its payment ([`PaymentState::is_final`]): nothing, both texts
    /// empty. Only a `Pending` or `InFlight` record is reconciled, which needs the payment; a `Settled`
    /// record is read only for its fingerprint, resource and settlement, a `Spent` one for its state.
    /// Forgetting the payment (1.2 KB of an official client's) when a record becomes final keeps the record
    /// about as large as it was while the settlement is added, so that a database writes fewer pages per
    /// purchase (docs/bench/reference-server-licensing.md).
    ///
    /// ```
    /// use x402_tower::store::StoredPayment;
    ///
    /// let none = StoredPayment::forgotten();
    /// assert!(none.is_forgotten());
    /// assert_eq!((&*none.payload, &*none.requirements), ("", ""));
    /// ```
    pub fn forgotten() -> Arc<StoredPayment> {
        static FORGOTTEN: std::sync::LazyLock<Arc<StoredPayment>> =
            std::sync::LazyLock::new(|| {
                Arc::new(StoredPayment {
                    payload: Arc::from(""),
                    requirements: Arc::from(""),
                })
            });
        FORGOTTEN.clone()
    }

    /// Whether this is [`StoredPayment::forgotten`] (a payment's JSON text is never empty).
    pub fn is_forgotten(&self) -> bool {
        self.payload.is_empty()
    }
}

/// Where the value of the single `extensions` member of the JSON object `text` is, or `None` (no such
/// member, several, or `text` is not a JSON object: then it is kept as it is).
fn extensions_span(text: &str, left_out: &[impl AsRef<str>]) -> Option<Range<usize>> {
    use crate::proto::object_members;

    // Cheap refusal first: a payment that echoes nothing says none of these keys anywhere (a key could
    // also be written with escapes).
    if !may_echo(text, left_out) {
        return None;
    }
    let members = object_members(text)?;
    let mut named = members.iter().filter(|(k, _)| k == "extensions");
    let (_, extensions) = named.next()?;
    if named.next().is_some() {
        return None; // Not a payment any door accepts: kept as it came.
    }
    crate::proto::span_in(text, extensions.get())
}

/// Whether `text` may hold one of `left_out` (by name, or by a name written with escapes).
fn may_echo(text: &str, left_out: &[impl AsRef<str>]) -> bool {
    text.contains('\\') || left_out.iter().any(|k| text.contains(k.as_ref()))
}

/// `text` less the extensions named in `left_out` in its `extensions` object at `at` (replaced by the object of the
/// entries left, `{}` when none is), or `None` when there are none to leave out (or the value at `at` is
/// not a JSON object). Everything outside that object stays byte for byte.
fn without_echoes(text: &str, at: Range<usize>, left_out: &[impl AsRef<str>]) -> Option<Arc<str>> {
    use crate::proto::object_members;

    let extensions = text.get(at.clone())?;
    if !may_echo(extensions, left_out) {
        return None;
    }
    let entries = object_members(extensions)?;
    let kept: Vec<(&str, &str)> = entries
        .iter()
        .filter(|(k, _)| !left_out.iter().any(|l| l.as_ref() == k.as_ref()))
        .map(|(k, v)| (k.as_ref(), v.get()))
        .collect();
    if kept.len() == entries.len() {
        return None;
    }
    let kept = json_object(kept);
    let mut out = String::with_capacity(text.len() - extensions.len() + kept.len());
    out.push_str(&text[..at.start]);
    out.push_str(&kept);
    out.push_str(&text[at.end..]);
    Some(out.into())
}

/// A JSON object of `members`, each value the JSON text given; keys are written with the escapes they need.
fn json_object<'a>(members: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    use std::fmt::Write as _;

    let mut out = String::from("{");
    for (i, (k, v)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}:{v}", serde_json::Value::from(k));
    }
    out.push('}');
    out
}

/// What a store remembers about one payment.
#[derive(Debug, Clone, PartialEq)]
pub struct PaymentRecord {
    /// Where it stands.
    pub state: PaymentState,
    /// What it paid for: the absolute resource URL (or a facilitator's label for payments it settled).
    pub resource: String,
    /// The EIP-712 digest of the authorization: identical payments have the same one.
    pub fingerprint: B256,
    /// `Settled`: the settlement. `Pending`: the `settlement_pending` answer (with the transaction when one is
    /// known). `Spent`: the failure. `InFlight`: none while the request verifies or serves; the
    /// `settlement_pending` answer once the engine has begun to settle it (or claimed it from `Pending`), so
    /// that a record whose process died is known to have moved money or not.
    pub settlement: Option<SettleResponse>,
    /// The payment itself, for reconciliation; [`StoredPayment::forgotten`] once the state is final.
    pub payment: Arc<StoredPayment>,
    /// Unix seconds after which the record may be forgotten (the authorization's `validBefore`).
    pub expires_at: u64,
    /// Unix seconds of the last change.
    pub updated_at: u64,
    /// Incremented by the store on every change; the compare-and-set token of `update` and `release`.
    pub revision: u64,
}

impl PaymentRecord {
    /// Whether this record is of the identical payment (same authorization digest) for the same resource:
    /// the only case in which a second presentation is answered from the record rather than refused as a
    /// replay.
    pub fn is_same_payment(&self, fingerprint: &B256, resource: &str) -> bool {
        self.fingerprint == *fingerprint && self.resource == resource
    }
}

/// Result of [`PaymentStore::reserve`].
#[derive(Debug, Clone, PartialEq)]
pub enum Reservation {
    /// The key was free and is now `InFlight` for this request, at this revision.
    Reserved {
        /// The record's revision.
        revision: u64,
    },
    /// Another request holds (or held) the key: its record.
    Taken(Box<PaymentRecord>),
}

/// What happened to a reserved payment: the input of [`disposition`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The settler's verify refused the payment (`nonce_used`: because the nonce is spent on chain).
    SettlerRefused {
        /// The settler said the nonce is already used.
        nonce_used: bool,
    },
    /// The settler's verify did not answer.
    SettlerUnreachable,
    /// Settle-after: the protected service failed or answered >= 400; nothing was settled.
    NotServed,
    /// The payment settled.
    Settled,
    /// The settlement failed.
    SettlementFailed {
        /// The settler says nothing moved and the authorization can still be used.
        still_usable: bool,
    },
    /// Nobody knows yet whether money moved.
    OutcomeUnknown,
}

/// What to do with a reserved payment's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Delete it: nothing was charged, the authorization may be presented again.
    Release,
    /// Keep it in this state until it expires.
    Keep(PaymentState),
}

/// The keep/release rule (the table in the [module docs](self)): the one place it is decided.
///
/// ```
/// use x402_tower::store::{Disposition, Event, PaymentState, disposition};
///
/// assert_eq!(disposition(Event::OutcomeUnknown), Disposition::Keep(PaymentState::Pending));
/// assert_eq!(disposition(Event::NotServed), Disposition::Release);
/// ```
pub const fn disposition(event: Event) -> Disposition {
    match event {
        Event::Settled => Disposition::Keep(PaymentState::Settled),
        Event::OutcomeUnknown => Disposition::Keep(PaymentState::Pending),
        Event::SettlerRefused { nonce_used: true }
        | Event::SettlementFailed {
            still_usable: false,
        } => Disposition::Keep(PaymentState::Spent),
        Event::SettlerRefused { nonce_used: false }
        | Event::SettlerUnreachable
        | Event::NotServed
        | Event::SettlementFailed { still_usable: true } => Disposition::Release,
    }
}

/// A payment identifier's binding ([`PaymentStore::bind_id`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdBinding {
    /// Fingerprint of the payment and the request it came with.
    pub fingerprint: B256,
    /// The payment.
    pub key: PaymentKey,
    /// When the binding may be forgotten.
    pub expires_at: u64,
}

/// Result of [`PaymentStore::bind_id`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdClaim {
    /// The id was unknown and is now bound.
    New,
    /// The id is bound to the same payment and request.
    Same,
    /// The id is bound to another payment or request.
    Conflict,
}

/// A store failed (the layer answers 503).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store is full of unexpired entries.
    #[error("payment store is full ({0} unexpired entries)")]
    Full(usize),
    /// The store did not answer within the engine's bound
    /// ([`store_timeout`](crate::engine::PaymentEngineBuilder::store_timeout)).
    #[error("payment store did not answer within {0:?}")]
    TimedOut(std::time::Duration),
    /// Any other failure of a custom store (database down, ...).
    #[error("payment store failed: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Where payments and their outcomes are remembered. See the [module docs](self) for the contract.
pub trait PaymentStore: Send + Sync + 'static {
    /// Inserts `record` (state `InFlight`) for `key` unless an unexpired record exists; returns that record.
    fn reserve<'a>(
        &'a self,
        key: &'a PaymentKey,
        record: &'a PaymentRecord,
        now: u64,
    ) -> BoxFuture<'a, Result<Reservation, StoreError>>;
    /// The unexpired record of `key`.
    fn get<'a>(
        &'a self,
        key: &'a PaymentKey,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<PaymentRecord>, StoreError>>;
    /// Replaces the record of `key` if its revision is `expected`; the stored revision becomes `expected + 1`.
    /// `false` when another request changed (or removed) it first. Every field is replaced, the payment
    /// too: the engine writes a final record with the payment [forgotten](StoredPayment::forgotten).
    fn update<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
        record: &'a PaymentRecord,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
    /// Deletes the record of `key` if its revision is `expected`: the authorization may be presented again.
    fn release<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
    /// Up to `limit` unexpired records that need reconciling: `Pending` ones, and `InFlight` ones last
    /// changed before `stale_before` (their request died).
    fn unresolved<'a>(
        &'a self,
        now: u64,
        stale_before: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(PaymentKey, PaymentRecord)>, StoreError>>;
    /// Binds a payment identifier, or tells how it is bound already.
    fn bind_id<'a>(
        &'a self,
        id: &'a str,
        binding: &'a IdBinding,
        now: u64,
    ) -> BoxFuture<'a, Result<IdClaim, StoreError>>;
    /// Uses a single-use nonce that is not a payment's (sign-in-with-x's): `true` the first time, `false`
    /// while an unexpired use of it is remembered. Kept until `expires_at`, apart from the payment records
    /// and identifiers. Atomic like the rest: of two concurrent uses of one nonce, one gets `true`.
    fn use_nonce<'a>(
        &'a self,
        nonce: &'a B256,
        expires_at: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

impl<T: PaymentStore + ?Sized> PaymentStore for Arc<T> {
    fn reserve<'a>(
        &'a self,
        key: &'a PaymentKey,
        record: &'a PaymentRecord,
        now: u64,
    ) -> BoxFuture<'a, Result<Reservation, StoreError>> {
        (**self).reserve(key, record, now)
    }
    fn get<'a>(
        &'a self,
        key: &'a PaymentKey,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<PaymentRecord>, StoreError>> {
        (**self).get(key, now)
    }
    fn update<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
        record: &'a PaymentRecord,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).update(key, expected, record)
    }
    fn release<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).release(key, expected)
    }
    fn unresolved<'a>(
        &'a self,
        now: u64,
        stale_before: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(PaymentKey, PaymentRecord)>, StoreError>> {
        (**self).unresolved(now, stale_before, limit)
    }
    fn bind_id<'a>(
        &'a self,
        id: &'a str,
        binding: &'a IdBinding,
        now: u64,
    ) -> BoxFuture<'a, Result<IdClaim, StoreError>> {
        (**self).bind_id(id, binding, now)
    }
    fn use_nonce<'a>(
        &'a self,
        nonce: &'a B256,
        expires_at: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).use_nonce(nonce, expires_at, now)
    }
}

/// Default capacity of [`InMemoryPaymentStore::default`].
pub const DEFAULT_CAPACITY: usize = 100_000;

#[derive(Debug, Default)]
struct Maps {
    payments: HashMap<PaymentKey, PaymentRecord>,
    ids: HashMap<String, IdBinding>,
    /// Single-use nonces ([`PaymentStore::use_nonce`]), until when they are kept.
    nonces: HashMap<B256, u64>,
}

/// A bounded in-memory [`PaymentStore`] for one process. When full, expired entries are purged; if none
/// expired, `reserve` fails with [`StoreError::Full`] (the layer answers 503) rather than forget a live key.
///
/// A record lives until its payment's `validBefore` plus the engine's
/// [`keep_after_expiry`](crate::engine::PaymentEngineBuilder::keep_after_expiry) (15 minutes by default).
/// That extra time serves only a late resend or a late reconciliation, so a store told about it
/// ([`InMemoryPaymentStore::evicting_settled_after`]; the engine's own default store is) gives up, when
/// full, the `Settled` records (and payment identifiers) already past their payment's `validBefore` before
/// it refuses anything: its sustained rate stays about `capacity / maxTimeoutSeconds` (333 payments a
/// second for the default 100,000 entries and 300 s). Records still needed against replays, and unresolved
/// ones, are never given up.
#[derive(Debug)]
pub struct InMemoryPaymentStore {
    capacity: usize,
    maps: Mutex<Maps>,
    /// `now + 1` of the last full purge (0: never), written under the lock. A second purge within the same
    /// second would find nothing more to drop (new entries expire at `validBefore >= now + 6`), so a store
    /// full of live keys scans its entries at most once per second instead of on every request.
    purged_at: AtomicU64,
    /// [`InMemoryPaymentStore::evicting_settled_after`], in seconds (0: never).
    grace: u64,
}

impl Default for InMemoryPaymentStore {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_CAPACITY)
    }
}

impl InMemoryPaymentStore {
    /// A store holding at most `capacity` unexpired payments (and as many payment identifiers).
    pub fn with_capacity(capacity: usize) -> Self {
        InMemoryPaymentStore {
            capacity: capacity.max(1),
            maps: Mutex::new(Maps::default()),
            purged_at: AtomicU64::new(0),
            grace: 0,
        }
    }

    /// When full, gives up `Settled` records, and payment identifiers, whose payment's `validBefore` has
    /// passed, records being kept `grace` past it (the engine's
    /// [`keep_after_expiry`](crate::engine::PaymentEngineBuilder::keep_after_expiry)), before refusing a
    /// new payment. No authorization can be used past its `validBefore`, so nothing can be settled twice for
    /// it; what is lost is only the late redelivery of such a payment (then refused as expired).
    pub fn evicting_settled_after(mut self, grace: std::time::Duration) -> Self {
        self.grace = grace.as_secs();
        self
    }

    /// Number of payments held (expired ones included until purged).
    pub fn len(&self) -> usize {
        self.lock().payments.len()
    }

    /// Whether no payment is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` is held (and not expired at `now`).
    pub fn contains(&self, key: &PaymentKey, now: u64) -> bool {
        self.lock()
            .payments
            .get(key)
            .is_some_and(|e| e.expires_at >= now)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Maps> {
        // A panic while holding this lock cannot leave the maps inconsistent: recover the guard.
        self.maps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes room for one more entry, purging expired ones at most once per second.
    fn room(&self, maps: &mut Maps, now: u64) -> Result<(), StoreError> {
        let len = maps
            .payments
            .len()
            .max(maps.ids.len())
            .max(maps.nonces.len());
        if len < self.capacity {
            return Ok(());
        }
        let stamp = now.wrapping_add(1);
        if self.purged_at.load(Ordering::Relaxed) != stamp {
            maps.payments.retain(|_, e| e.expires_at >= now);
            maps.ids.retain(|_, e| e.expires_at >= now);
            maps.nonces.retain(|_, expires_at| *expires_at >= now);
            if self.grace > 0 && maps.payments.len().max(maps.ids.len()) >= self.capacity {
                // Past `validBefore` (records live `grace` beyond it): a settled one serves only a late
                // resend, an identifier nothing at all.
                let expired = |expires_at: u64| expires_at.saturating_sub(self.grace) < now;
                maps.payments
                    .retain(|_, e| !(e.state == PaymentState::Settled && expired(e.expires_at)));
                maps.ids.retain(|_, e| !expired(e.expires_at));
            }
            self.purged_at.store(stamp, Ordering::Relaxed);
        }
        let len = maps
            .payments
            .len()
            .max(maps.ids.len())
            .max(maps.nonces.len());
        if len >= self.capacity {
            return Err(StoreError::Full(len));
        }
        Ok(())
    }

    fn use_nonce_now(&self, nonce: &B256, expires_at: u64, now: u64) -> Result<bool, StoreError> {
        let mut maps = self.lock();
        match maps.nonces.get(nonce) {
            Some(kept) if *kept >= now => return Ok(false),
            Some(_) => {}
            None => self.room(&mut maps, now)?,
        }
        maps.nonces.insert(*nonce, expires_at);
        Ok(true)
    }

    fn reserve_now(
        &self,
        key: &PaymentKey,
        record: &PaymentRecord,
        now: u64,
    ) -> Result<Reservation, StoreError> {
        let mut maps = self.lock();
        if let Some(e) = maps.payments.get(key) {
            if e.expires_at >= now {
                return Ok(Reservation::Taken(Box::new(e.clone())));
            }
        } else {
            self.room(&mut maps, now)?;
        }
        let mut record = record.clone();
        record.revision = 1;
        maps.payments.insert(*key, record);
        Ok(Reservation::Reserved { revision: 1 })
    }

    fn update_now(&self, key: &PaymentKey, expected: u64, record: &PaymentRecord) -> bool {
        let mut maps = self.lock();
        match maps.payments.get_mut(key) {
            Some(e) if e.revision == expected => {
                *e = record.clone();
                e.revision = expected + 1;
                true
            }
            _ => false,
        }
    }

    fn release_now(&self, key: &PaymentKey, expected: u64) -> bool {
        let mut maps = self.lock();
        if maps
            .payments
            .get(key)
            .is_some_and(|e| e.revision == expected)
        {
            maps.payments.remove(key);
            true
        } else {
            false
        }
    }

    fn bind_now(&self, id: &str, binding: &IdBinding, now: u64) -> Result<IdClaim, StoreError> {
        let mut maps = self.lock();
        match maps.ids.get(id) {
            Some(b) if b.expires_at >= now => {
                return Ok(
                    if b.fingerprint == binding.fingerprint && b.key == binding.key {
                        IdClaim::Same
                    } else {
                        IdClaim::Conflict
                    },
                );
            }
            Some(_) => {}
            None => self.room(&mut maps, now)?,
        }
        maps.ids.insert(id.to_owned(), *binding);
        Ok(IdClaim::New)
    }
}

impl PaymentStore for InMemoryPaymentStore {
    fn reserve<'a>(
        &'a self,
        key: &'a PaymentKey,
        record: &'a PaymentRecord,
        now: u64,
    ) -> BoxFuture<'a, Result<Reservation, StoreError>> {
        Box::pin(std::future::ready(self.reserve_now(key, record, now)))
    }

    fn get<'a>(
        &'a self,
        key: &'a PaymentKey,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<PaymentRecord>, StoreError>> {
        let r = self
            .lock()
            .payments
            .get(key)
            .filter(|e| e.expires_at >= now)
            .cloned();
        Box::pin(std::future::ready(Ok(r)))
    }

    fn update<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
        record: &'a PaymentRecord,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(
            self.update_now(key, expected, record)
        )))
    }

    fn release<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(self.release_now(key, expected))))
    }

    fn unresolved<'a>(
        &'a self,
        now: u64,
        stale_before: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(PaymentKey, PaymentRecord)>, StoreError>> {
        let found = self
            .lock()
            .payments
            .iter()
            .filter(|(_, e)| e.expires_at >= now && needs_reconciling(e, stale_before))
            .take(limit)
            .map(|(k, e)| (*k, e.clone()))
            .collect();
        Box::pin(std::future::ready(Ok(found)))
    }

    fn bind_id<'a>(
        &'a self,
        id: &'a str,
        binding: &'a IdBinding,
        now: u64,
    ) -> BoxFuture<'a, Result<IdClaim, StoreError>> {
        Box::pin(std::future::ready(self.bind_now(id, binding, now)))
    }

    fn use_nonce<'a>(
        &'a self,
        nonce: &'a B256,
        expires_at: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(
            self.use_nonce_now(nonce, expires_at, now),
        ))
    }
}

/// Whether a record is for the reconciler: `Pending`, or `InFlight` and untouched since before `stale_before`.
pub fn needs_reconciling(record: &PaymentRecord, stale_before: u64) -> bool {
    match record.state {
        PaymentState::Pending => true,
        PaymentState::InFlight => record.updated_at < stale_before,
        PaymentState::Settled | PaymentState::Spent => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(text: &str) -> Arc<str> {
        StoredPayment::new(
            &Arc::from(text),
            Arc::from("{}"),
            &crate::extensions::SERVER_DECLARATIONS,
        )
        .payload
    }

    #[test]
    fn a_stored_payment_leaves_out_only_the_echoed_declarations() {
        // Members and kept extensions stay in their order, written exactly as sent (spaces, escapes).
        assert_eq!(
            &*stored(
                r#"{"x402Version": 2, "accepted": {"a" : 1}, "extensions": {"bazaar": {"x": [1]}, "payment-identifier": {"info": {"id": "p\u0031"}}, "terms": {}, "b": null}, "payload": {"s": "0x"}}"#
            ),
            r#"{"x402Version": 2, "accepted": {"a" : 1}, "extensions": {"payment-identifier":{"info": {"id": "p\u0031"}},"b":null}, "payload": {"s": "0x"}}"#
        );
        // Nothing left: an empty object.
        assert_eq!(
            &*stored(
                r#"{"extensions":{"bazaar":1,"offer-receipt":2,"sign-in-with-x":3,"terms":4},"x402Version":2}"#
            ),
            r#"{"extensions":{},"x402Version":2}"#
        );
        // A key written with an escape is the same key; a key needing one is written with it.
        assert_eq!(
            &*stored(r#"{"extensions":{"baz\u0061ar":1,"q\"k":2}}"#),
            r#"{"extensions":{"q\"k":2}}"#
        );
    }

    #[test]
    fn a_stored_payment_with_nothing_to_leave_out_is_the_same_text() {
        for text in [
            r#"{"x402Version":1,"scheme":"exact","payload":{}}"#,
            r#"{"x402Version":2,"extensions":{"payment-identifier":{}},"resource":{"description":"bazaar terms"}}"#,
            r#"{"x402Version":2,"extensions":"bazaar"}"#,
            r#"{"x402Version":2,"extensions":{"bazaar":1},"extensions":{"bazaar":2}}"#,
            r#"{"extensions":{"bazaar":1}} trailing"#,
            r#"["bazaar"]"#,
            "bazaar",
            "",
        ] {
            let arc: Arc<str> = Arc::from(text);
            let kept = StoredPayment::new(
                &arc,
                Arc::from("{}"),
                &crate::extensions::SERVER_DECLARATIONS,
            )
            .payload;
            assert!(Arc::ptr_eq(&kept, &arc), "{text}");
        }
    }

    fn key(n: u8) -> PaymentKey {
        PaymentKey {
            chain_id: 1,
            nonce_space: Address::ZERO,
            from: Address::ZERO,
            nonce: B256::repeat_byte(n),
        }
    }

    fn record(expires_at: u64) -> PaymentRecord {
        PaymentRecord {
            state: PaymentState::InFlight,
            resource: "https://example.org/a".into(),
            fingerprint: B256::repeat_byte(7),
            settlement: None,
            payment: Arc::new(StoredPayment {
                payload: Arc::from(""),
                requirements: Arc::from(""),
            }),
            expires_at,
            updated_at: 10,
            revision: 0,
        }
    }

    fn reserved(r: Result<Reservation, StoreError>) -> bool {
        matches!(r, Ok(Reservation::Reserved { .. }))
    }

    /// Full, a store told the engine's grace gives up settled records past their payment's `validBefore`
    /// (records live `validBefore + grace`), and only those: not one still within `validBefore`, not an
    /// unresolved one. Without the grace it refuses.
    #[test]
    fn a_full_store_gives_up_only_settled_records_past_valid_before() {
        let now = 1_000;
        let grace = std::time::Duration::from_secs(900);
        let settled = |valid_before: u64| PaymentRecord {
            state: PaymentState::Settled,
            ..record(valid_before + 900)
        };
        for (evicting, room) in [(true, true), (false, false)] {
            let s = InMemoryPaymentStore::with_capacity(3);
            let s = if evicting {
                s.evicting_settled_after(grace)
            } else {
                s
            };
            // Settled, validBefore passed; settled, validBefore to come; in flight, validBefore passed.
            assert!(reserved(s.reserve_now(&key(1), &settled(now - 1), 0)));
            assert!(reserved(s.reserve_now(&key(2), &settled(now + 60), 0)));
            assert!(reserved(s.reserve_now(&key(3), &record(now - 1 + 900), 0)));
            let fourth = s.reserve_now(&key(4), &record(now + 60 + 900), now);
            assert_eq!(reserved(fourth), room, "evicting: {evicting}");
            assert_eq!(s.contains(&key(1), now), !evicting);
            assert!(s.contains(&key(2), now), "still needed against replays");
            assert!(
                s.contains(&key(3), now),
                "unresolved: kept for the reconciler"
            );
        }
    }

    #[test]
    fn reserve_release_update_expire_capacity() {
        let s = InMemoryPaymentStore::with_capacity(2);
        assert!(reserved(s.reserve_now(&key(1), &record(100), 10)));
        assert!(matches!(
            s.reserve_now(&key(1), &record(100), 10),
            Ok(Reservation::Taken(r)) if r.state == PaymentState::InFlight && r.revision == 1
        ));
        // Compare-and-set: a stale revision changes nothing.
        assert!(!s.release_now(&key(1), 7));
        assert!(s.release_now(&key(1), 1));
        assert!(reserved(s.reserve_now(&key(1), &record(100), 10)));
        let mut settled = record(100);
        settled.state = PaymentState::Settled;
        assert!(s.update_now(&key(1), 1, &settled));
        assert!(!s.update_now(&key(1), 1, &settled), "revision moved on");
        assert!(!s.release_now(&key(1), 1));
        assert!(matches!(
            s.reserve_now(&key(1), &record(100), 10),
            Ok(Reservation::Taken(r)) if r.state == PaymentState::Settled && r.revision == 2
        ));
        assert!(reserved(s.reserve_now(&key(2), &record(50), 10)));
        assert!(matches!(
            s.reserve_now(&key(3), &record(100), 10),
            Err(StoreError::Full(2))
        ));
        // Once key 2 expired, there is room again; key 1 is still live.
        assert!(reserved(s.reserve_now(&key(3), &record(100), 60)));
        assert!(s.contains(&key(1), 60));
        assert!(!s.contains(&key(2), 60));
        // Full of live keys: refused again within the same second, room again once a key is released, and an
        // expiry is noticed in a later second.
        assert!(matches!(
            s.reserve_now(&key(4), &record(100), 60),
            Err(StoreError::Full(2))
        ));
        assert!(s.release_now(&key(3), 1));
        assert!(reserved(s.reserve_now(&key(4), &record(70), 60)));
        assert!(matches!(
            s.reserve_now(&key(5), &record(100), 65),
            Err(StoreError::Full(2))
        ));
        assert!(reserved(s.reserve_now(&key(5), &record(100), 71)));
    }

    #[test]
    fn unresolved_lists_pending_and_stale_in_flight() {
        let s = InMemoryPaymentStore::default();
        assert!(reserved(s.reserve_now(&key(1), &record(100), 10)));
        let mut pending = record(100);
        pending.state = PaymentState::Pending;
        assert!(reserved(s.reserve_now(&key(2), &pending, 10)));
        let mut settled = record(100);
        settled.state = PaymentState::Settled;
        assert!(reserved(s.reserve_now(&key(3), &settled, 10)));
        let list = |stale_before| {
            let mut keys: Vec<u8> = futures_now(s.unresolved(20, stale_before, 10))
                .into_iter()
                .map(|(k, _)| k.nonce[0])
                .collect();
            keys.sort();
            keys
        };
        assert_eq!(list(5), vec![2], "in-flight since 10 is not stale before 5");
        assert_eq!(list(11), vec![1, 2]);
    }

    #[test]
    fn one_rule_for_every_row_of_the_table() {
        use Disposition::{Keep, Release};
        let rows = [
            (Event::Settled, Keep(PaymentState::Settled)),
            (Event::NotServed, Release),
            (Event::SettlerRefused { nonce_used: false }, Release),
            (Event::SettlerUnreachable, Release),
            (
                Event::SettlerRefused { nonce_used: true },
                Keep(PaymentState::Spent),
            ),
            (Event::SettlementFailed { still_usable: true }, Release),
            (
                Event::SettlementFailed {
                    still_usable: false,
                },
                Keep(PaymentState::Spent),
            ),
            (Event::OutcomeUnknown, Keep(PaymentState::Pending)),
        ];
        for (event, expected) in rows {
            assert_eq!(disposition(event), expected, "{event:?}");
        }
    }

    #[test]
    fn ids_bind_once_and_expire() {
        let s = InMemoryPaymentStore::default();
        let b = IdBinding {
            fingerprint: B256::repeat_byte(1),
            key: key(1),
            expires_at: 100,
        };
        let other = IdBinding {
            fingerprint: B256::repeat_byte(2),
            ..b
        };
        assert_eq!(s.bind_now("pay_x", &b, 10).unwrap(), IdClaim::New);
        assert_eq!(s.bind_now("pay_x", &b, 10).unwrap(), IdClaim::Same);
        assert_eq!(s.bind_now("pay_x", &other, 10).unwrap(), IdClaim::Conflict);
        assert_eq!(s.bind_now("pay_x", &other, 101).unwrap(), IdClaim::New);
    }

    fn futures_now<T>(f: BoxFuture<'_, Result<T, StoreError>>) -> T {
        // The in-memory store's futures are always ready.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut f = f;
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(r) => r.unwrap(),
            std::task::Poll::Pending => panic!("in-memory store future not ready"),
        }
    }
}
