//! The payment engine: every decision about one payment, in one place, without Tower or HTTP requests.
//!
//! [`PaymentEngine`] owns the whole life of a payment: decode, match an offer, verify, remember
//! ([`ReplayStore`]), ask the settler, settle (before or after the protected service runs), keep or release
//! the authorization, report to the [`SettlementObserver`], and say what to answer. Its doors are thin
//! adapters:
//!
//! - [`X402Layer`](crate::X402Layer) (the Tower middleware) calls it for every paid request;
//! - a facilitator API calls [`PaymentEngine::facilitator_verify`] and [`PaymentEngine::facilitator_settle`]
//!   (see [`facilitator`]);
//! - a background task calls [`PaymentEngine::reconcile_unresolved`].
//!
//! Doors that share one engine (and so one store) share its guarantees: **one authorization settles at most
//! once**, whichever door it comes through, and **a resend of the identical payment for the same resource is
//! answered again** (the same settlement, no second one) instead of being refused as a replay.
//!
//! # The rules, in order
//!
//! 1. A payment that fails local verification is refused (402 with the spec's reason); nothing is stored.
//!    One exception: a payment refused only because its `validBefore` has passed, which passes every check
//!    as of its last valid second, is looked up instead (never reserved, never settled): its own record
//!    answers it (settled: delivered again; unresolved: reconciled, and released and refused if nothing
//!    moved), else it is refused. Records are kept [`PaymentEngineBuilder::keep_after_expiry`] past
//!    `validBefore` for this and for the reconciler.
//! 2. With the `payment-identifier` extension declared, the id is bound to the payment and the request:
//!    another payment under the same id is a conflict (409); a missing id where required is a 400.
//! 3. The authorization's record is reserved (`InFlight`). If a record exists ([`PaymentEngine`]'s
//!    `on_taken`, the one function that reads records):
//!    - another payment with the same nonce, or the same payment for another resource: 402
//!      `invalid_exact_evm_nonce_already_used`;
//!    - `Settled`: delivered again with the stored settlement, nothing settled;
//!    - `InFlight`: wait for it (bounded, [`PaymentEngineBuilder::in_flight_wait`]), then answer
//!      `settlement_pending` (the client resends later);
//!    - `Pending`, or `InFlight` left by a request that died ([`PaymentEngineBuilder::stale_after`]):
//!      claimed and reconciled ([`Settler::reconcile`]) — settled → delivered; still usable → settled anew;
//!      failed → refused; unknown → `settlement_pending` again;
//!    - `Spent`: refused.
//! 4. The settler verifies (the chain's view); invalid → released and refused; no answer → released, 502.
//! 5. Settlement; what is kept or released is decided by [`disposition`], the
//!    one function of the keep/release rule, in [`crate::replay`] beside its table: settled → `Settled`;
//!    failed and still usable → released; failed → `Spent`; unknown → `Pending`, answered 402 with a
//!    `settlement_pending` receipt carrying the transaction when there is one.
//!
//! Every settlement attempt (and every reconciliation) is reported to the observer before anybody is
//! answered.

pub mod facilitator;
pub mod identifier;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloy_primitives::{B256, keccak256};
use tracing::{Instrument, debug, debug_span, error, warn};

use crate::metrics::X402Metrics;
use crate::network::Token;
use crate::offer::PaymentOffer;
use crate::payment::{SettleTiming, VerifiedPayment};
use crate::proto::{PaymentPayload, PaymentRequirements, SettleResponse};
use crate::replay::{
    Disposition, Event, IdBinding, IdClaim, InMemoryReplayStore, PaymentRecord, PaymentState,
    ReplayKey, ReplayStore, Reservation, StoreError, StoredPayment, disposition,
};
use crate::settle::{
    ObservedOutcome, SETTLEMENT_PENDING, SettleOutcome, SettleRequest, SettlementEvent,
    SettlementObserver, Settler, VerifyOutcome,
};
use crate::verify::{self, CompiledOffer, RejectReason, Rejection, domain_separator};

pub use identifier::PaymentIdentifier;

/// Default cap on the length of a payment header (bytes, before decoding).
pub const DEFAULT_MAX_HEADER_LEN: usize = 16 * 1024;
/// Default of [`PaymentEngineBuilder::in_flight_wait`].
pub const DEFAULT_IN_FLIGHT_WAIT: Duration = Duration::from_secs(5);
/// Default of [`PaymentEngineBuilder::stale_after`].
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(180);
/// What a door answers (502) when the settler cannot verify a payment now (unreachable, or the chain cannot
/// say yet): send it again.
const VERIFY_UNAVAILABLE: &str = "payment verification unavailable";
/// Default of [`PaymentEngineBuilder::keep_after_expiry`].
pub const DEFAULT_KEEP_AFTER_EXPIRY: Duration = Duration::from_secs(15 * 60);
/// How much longer than a settler's [`settle_deadline`](Settler::settle_deadline) an in-flight payment must
/// be left untouched before it counts as abandoned.
pub const STALE_MARGIN: Duration = Duration::from_secs(60);

/// Unix seconds, replaceable for tests.
pub(crate) type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// What to answer instead of serving: the doors render it (a 402 response, a facilitator JSON body).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Answer {
    /// Pay (again): 402 with the offers and `error`, and the `success:false` receipt when a settlement was
    /// attempted (or is pending).
    PaymentRequired {
        /// The spec's error string (or the settler's own).
        error: Cow<'static, str>,
        /// The receipt to send in `PAYMENT-RESPONSE` / `X-PAYMENT-RESPONSE`.
        receipt: Option<SettleResponse>,
        /// The x402 version of the payment (decides the receipt header), 2 when unknown.
        version: u8,
    },
    /// The request is malformed for the payment's extensions: 400.
    BadRequest {
        /// A stable code.
        error: &'static str,
        /// What is wrong, in words.
        message: String,
    },
    /// The payment identifier is bound to another payment or request: 409.
    Conflict {
        /// What is wrong, in words.
        message: String,
    },
    /// The server side failed: 502 (settler) or 503 (store).
    Unavailable {
        /// 502 or 503.
        status: u16,
        /// What failed, in words.
        message: &'static str,
    },
}

/// Per-route options of a door: when to settle, and the extensions it declares.
#[derive(Debug, Clone, Default)]
pub(crate) struct Route {
    pub(crate) timing: SettleTiming,
    pub(crate) identifier: Option<PaymentIdentifier>,
    /// Skip the settler's verify when settling before the handler (the settlement checks the same).
    pub(crate) settle_without_verify: bool,
    /// Adds to a successful settlement before it is recorded (the signed receipt of offer-receipt), so a
    /// redelivery answers exactly what the first delivery did; and completes a recorded settlement that
    /// lacks it (recorded by a door without the hook), the same way on every delivery.
    pub(crate) on_settled: Option<SettledHook>,
}

/// A function completing a successful [`SettleResponse`] for a resource URL.
#[derive(Clone)]
pub(crate) struct SettledHook(pub(crate) Arc<SettledFn>);

/// The function of a [`SettledHook`]: the settlement, its resource URL, and how it was settled.
pub(crate) type SettledFn = dyn Fn(&mut SettleResponse, &str, Settled) + Send + Sync;

/// How a successful settlement reaches a [`SettledHook`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Settled for this request at these unix seconds, not recorded yet: the hook writes what it adds to
    /// the settlement the engine built from the settler's outcome (a transaction, a payer, a network:
    /// nothing a settler's answer carried besides).
    Now(u64),
    /// Read from the payment's record, settled at these unix seconds (the record's last change). The hook
    /// adds only what is missing: a record written without the hook (by the background reconciler, which
    /// serves no route, or by a build or configuration without it) is completed from the record alone, so
    /// every delivery of it answers the same.
    Recorded(u64),
}

impl std::fmt::Debug for SettledHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SettledHook")
    }
}

/// A payment admitted for the protected service.
#[derive(Debug)]
pub(crate) struct Attempt {
    pub(crate) request: SettleRequest,
    pub(crate) key: ReplayKey,
    /// The record as this attempt last wrote it (its `revision` is the compare-and-set token).
    pub(crate) record: PaymentRecord,
    pub(crate) verified: VerifiedPayment,
    /// The route's [`Route::on_settled`].
    pub(crate) on_settled: Option<SettledHook>,
}

/// The outcome of [`PaymentEngine::begin`].
pub(crate) enum Begin {
    /// Answer this, do not serve.
    Answer(Answer),
    /// Serve (the payment is in `verified`; settled already with [`SettleTiming::BeforeHandler`] or on a
    /// redelivery), then call [`PaymentEngine::finish`]. With a [`Recording`], the settlement is being
    /// written: the door runs the protected service meanwhile and answers only once it is done.
    Serve(Box<Attempt>, Option<Recording>),
}

impl std::fmt::Debug for Begin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Begin::Answer(a) => f.debug_tuple("Answer").field(a).finish(),
            Begin::Serve(a, r) => f
                .debug_tuple("Serve")
                .field(a)
                .field(&r.as_ref().map(|_| "Recording"))
                .finish(),
        }
    }
}

/// The durable writes of a settlement made before the handler (the payment record as `Settled` and the
/// observer's report), still under way. They are issued as soon as the settler answered and awaited by the
/// door **before the client is answered**; meanwhile the protected service runs, so its own writes (the
/// reference server's receipt) can share their commit instead of waiting for a commit of their own.
pub(crate) type Recording = crate::pricing::BoxFuture<'static, ()>;

/// The outcome of [`PaymentEngine::finish`].
#[derive(Debug)]
pub(crate) enum Finish {
    /// Send the served response, with this receipt (in the header of this x402 version) if any.
    Pass(Option<SettleResponse>, u8),
    /// Drop the served response, answer this.
    Replace(Answer),
}

/// The settler's refusal of a payment at verification ([`PaymentEngine::settler_verify`]).
struct VerifyRefusal {
    /// What the client is answered.
    answer: Answer,
    /// The refusal as a settlement response (reason and the settler's message), when the settler refused
    /// (not when it could not be reached).
    failure: Option<SettleResponse>,
}

/// What [`PaymentEngine::admit`] decided.
enum Admitted {
    /// Newly reserved (or claimed to be settled anew): verify with the settler, then settle.
    Fresh(Box<Attempt>),
    /// Settled before: deliver again.
    Redeliver(Box<Attempt>),
    Answer(Answer),
}

/// A cached domain separator of a (chain, token contract): the token's EIP-712 name and version it was
/// computed for, and the separator.
type DomainEntry = (String, String, B256);

/// The one engine behind every door. Build it with [`PaymentEngine::builder`]; share it with `Arc`.
pub struct PaymentEngine {
    settler: Arc<dyn Settler>,
    observer: Option<Arc<dyn SettlementObserver>>,
    store: Arc<dyn ReplayStore>,
    max_header_len: usize,
    in_flight_wait: Duration,
    stale_after: u64,
    keep_after_expiry: u64,
    verify_only: bool,
    verify_only_warned: std::sync::atomic::AtomicBool,
    pub(crate) metrics: Arc<X402Metrics>,
    clock: Clock,
    domains: Mutex<HashMap<(u64, alloy_primitives::Address), DomainEntry>>,
    /// Offers compiled once per distinct list (a price source returns the same few lists again and again).
    compiled: Mutex<HashMap<Vec<PaymentOffer>, Arc<[CompiledOffer]>>>,
}

impl std::fmt::Debug for PaymentEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentEngine")
            .field("in_flight_wait", &self.in_flight_wait)
            .field("stale_after", &self.stale_after)
            .field("observer", &self.observer.is_some())
            .finish_non_exhaustive()
    }
}

/// Why a [`PaymentEngineBuilder`] refused its configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineConfigError {
    /// No settler was given. Choose one explicitly; [`VerifyOnlySettler`](crate::VerifyOnlySettler) moves no
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
/// use x402_tower::{InMemoryReplayStore, VerifyOnlySettler};
///
/// let engine = PaymentEngine::builder()
///     .settler(Arc::new(VerifyOnlySettler))
///     .replay_store(Arc::new(InMemoryReplayStore::default()))
///     .build()
///     .unwrap();
/// ```
#[must_use]
pub struct PaymentEngineBuilder {
    settler: Option<Arc<dyn Settler>>,
    verify_only: bool,
    observer: Option<Arc<dyn SettlementObserver>>,
    store: Option<Arc<dyn ReplayStore>>,
    max_header_len: usize,
    in_flight_wait: Duration,
    stale_after: Duration,
    keep_after_expiry: Duration,
    clock: Option<Clock>,
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

    /// Where payments are remembered (default: an [`InMemoryReplayStore`] of 100 000 entries, for one
    /// process). Several instances of a service need a shared store.
    pub fn replay_store(mut self, store: Arc<dyn ReplayStore>) -> Self {
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
    /// dropped future) and reconciled (default 180 s). The engine raises it to the settler's
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
    /// [`InMemoryReplayStore::evicting_settled_after`]). As before `validBefore`, whoever holds the identical payment is served
    /// its resource again; a payment settled on chain is public (its calldata), so this is also how long a
    /// chain observer who rebuilds it could be served that one resource again.
    pub fn keep_after_expiry(mut self, keep: Duration) -> Self {
        self.keep_after_expiry = keep;
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
            store: self.store.unwrap_or_else(|| {
                Arc::new(InMemoryReplayStore::default().evicting_settled_after(keep_after_expiry))
            }),
            max_header_len: self.max_header_len,
            in_flight_wait: self.in_flight_wait,
            stale_after: stale_after.as_secs().max(1),
            keep_after_expiry: keep_after_expiry.as_secs(),
            verify_only: self.verify_only,
            verify_only_warned: std::sync::atomic::AtomicBool::new(false),
            metrics: Arc::new(X402Metrics::default()),
            clock: self.clock.unwrap_or_else(|| Arc::new(system_now)),
            domains: Mutex::new(HashMap::new()),
            compiled: Mutex::new(HashMap::new()),
        })
    }
}

const DOMAIN_CACHE: usize = 256;
/// Distinct offer lists kept compiled; past it the cache starts over (a bounded memory, whatever prices do).
const COMPILED_CACHE: usize = 4096;

/// What a background reconciliation pass did ([`PaymentEngine::reconcile_unresolved`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Records looked at.
    pub examined: usize,
    /// Found settled.
    pub settled: usize,
    /// Found failed for good.
    pub failed: usize,
    /// Found unsettled and still usable: released (nothing was charged; the payer may pay with it again).
    pub released: usize,
    /// Still unknown.
    pub pending: usize,
    /// Claimed by someone else first, or unreadable.
    pub skipped: usize,
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
            clock: None,
        }
    }

    /// How long a record is kept after its `validBefore` ([`PaymentEngineBuilder::keep_after_expiry`], as
    /// raised).
    pub fn keep_after_expiry(&self) -> Duration {
        Duration::from_secs(self.keep_after_expiry)
    }

    /// Until when the record of a payment valid before `valid_before` is kept (unix seconds).
    pub(crate) fn kept_until(&self, valid_before: u64) -> u64 {
        valid_before.saturating_add(self.keep_after_expiry)
    }

    /// The engine's counters.
    pub fn metrics(&self) -> Arc<X402Metrics> {
        self.metrics.clone()
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ReplayStore> {
        &self.store
    }

    /// After how long a payment left in flight counts as abandoned (see
    /// [`PaymentEngineBuilder::stale_after`]).
    pub fn stale_after(&self) -> Duration {
        Duration::from_secs(self.stale_after)
    }

    /// The settler.
    pub fn settler(&self) -> &Arc<dyn Settler> {
        &self.settler
    }

    /// Whether the settler was defaulted to verify-only (nobody chose it).
    pub(crate) fn defaulted_to_verify_only(&self) -> bool {
        self.verify_only
    }

    pub(crate) fn now(&self) -> u64 {
        (self.clock)()
    }

    /// The compiled form of `offers`: the same `Arc` for the same list while it is cached.
    pub(crate) fn compile(&self, offers: Vec<PaymentOffer>) -> Arc<[CompiledOffer]> {
        let lock = || self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = lock().get(&offers) {
            return c.clone();
        }
        let compiled = self.compile_uncached(offers.clone());
        let mut cache = lock();
        if cache.len() >= COMPILED_CACHE {
            cache.clear();
        }
        cache.insert(offers, compiled.clone());
        compiled
    }

    /// Compiles offers, reusing cached domain separators.
    fn compile_uncached(&self, offers: Vec<PaymentOffer>) -> Arc<[CompiledOffer]> {
        offers
            .into_iter()
            .map(|o| {
                let sep = self.separator(o.network.chain_id(), &o.token, true);
                CompiledOffer::new(o, sep)
            })
            .collect()
    }

    /// The EIP-712 domain separator of `token` on `chain_id`, from the cache when it is there. A new one is
    /// remembered (up to [`DOMAIN_CACHE`]) when `remember`: the offers of the protected routes (the
    /// operator's), not the terms a facilitator caller chooses, so that callers cannot fill the cache.
    pub(crate) fn separator(&self, chain_id: u64, token: &Token, remember: bool) -> B256 {
        let key = (chain_id, token.address);
        let lock = || self.domains.lock().unwrap_or_else(|e| e.into_inner());
        // Looked up by reference: nothing is cloned or allocated for a separator already there.
        let cached = lock().get(&key).and_then(|(name, version, s)| {
            (*name == token.name && *version == token.version).then_some(*s)
        });
        cached.unwrap_or_else(|| {
            let s = domain_separator(chain_id, token);
            let mut cache = lock();
            if remember && cache.len() < DOMAIN_CACHE {
                cache
                    .entry(key)
                    .or_insert_with(|| (token.name.clone(), token.version.clone(), s));
            }
            s
        })
    }

    fn refuse(&self, reason: RejectReason, version: u8) -> Answer {
        self.metrics.rejected(reason);
        Answer::PaymentRequired {
            error: Cow::Borrowed(reason.as_str()),
            receipt: None,
            version,
        }
    }

    fn store_failed(&self, e: &StoreError) -> Answer {
        error!(error = %e, "payment store failed");
        self.metrics.upstream_error();
        Answer::Unavailable {
            status: 503,
            message: "payment store unavailable",
        }
    }

    /// A payment header for `resource_url` sold with `offers`: decode, verify, remember, maybe settle.
    pub(crate) async fn begin(
        &self,
        route: &Route,
        offers: &[CompiledOffer],
        resource_url: &str,
        header: &[u8],
    ) -> Begin {
        let now = self.now();
        let local = {
            let _span = debug_span!("x402.verify", header_len = header.len()).entered();
            if header.len() > self.max_header_len {
                Err(Rejection {
                    reason: RejectReason::InvalidPayload,
                    detail: "payment header too long",
                })
            } else {
                let decoded = {
                    let _d = debug_span!("x402.decode").entered();
                    verify::decode(header)
                };
                decoded.and_then(|decoded| verify::verify(decoded, offers, now))
            }
        };
        let (local, expired) = match local {
            Ok(v) => (v, false),
            Err(r) => match self.verify_expired(r, offers, header, now) {
                Ok(v) => (v, true),
                Err(r) => {
                    debug!(
                        reason = r.reason.as_str(),
                        detail = r.detail,
                        "payment rejected"
                    );
                    return Begin::Answer(self.refuse(r.reason, 2));
                }
            },
        };
        let offer_index = local.offer_index;
        let compiled = &offers[offer_index];
        let decoded = local.decoded;
        let (requirements, requirements_json) = match &decoded.payload {
            PaymentPayload::V1(_) => match compiled.v1_requirements(resource_url) {
                Some(r) => {
                    let json: Arc<str> = serde_json::to_string(&r).unwrap_or_default().into();
                    (PaymentRequirements::V1(r), json)
                }
                None => (
                    PaymentRequirements::V2(compiled.v2.clone()),
                    compiled.v2_json.clone(),
                ),
            },
            PaymentPayload::V2(_) => (
                PaymentRequirements::V2(compiled.v2.clone()),
                compiled.v2_json.clone(),
            ),
        };
        let fingerprint = local.digest;
        let stored = Arc::new(StoredPayment::kept(
            &decoded.text,
            decoded.extensions_at,
            requirements_json,
        ));
        let request = SettleRequest {
            payload: decoded.payload,
            payload_text: decoded.text,
            requirements,
            offer: compiled.offer.clone(),
            signature: local.signature,
        };
        if let Some(policy) = &route.identifier
            && !expired
            && let Err(answer) = self
                .bind_identifier(policy, &request, fingerprint, resource_url, now)
                .await
        {
            return Begin::Answer(answer);
        }
        let mut attempt = match self
            .admit(
                request,
                stored,
                fingerprint,
                resource_url,
                Some(route.timing),
                route.on_settled.as_ref(),
                expired,
            )
            .await
        {
            Admitted::Answer(a) => return Begin::Answer(a),
            Admitted::Redeliver(mut a) => {
                a.verified.offer_index = offer_index;
                self.metrics.accepted();
                return Begin::Serve(a, None);
            }
            Admitted::Fresh(a) => a,
        };
        attempt.verified.offer_index = offer_index;
        let settling_now = route.timing == SettleTiming::BeforeHandler;
        if !(settling_now && route.settle_without_verify)
            && let Err(refused) = self.settler_verify(&mut attempt).await
        {
            return Begin::Answer(refused.answer);
        }
        let mut recording = None;
        if settling_now {
            let timing = Some(route.timing);
            match self.settle_outcome(&attempt).await {
                SettleOutcome::Settled {
                    transaction,
                    payer,
                    network,
                } => {
                    let sr = self.settled_response(&attempt, transaction, payer, network);
                    recording = Some(self.record_settled(&attempt, &sr, timing));
                    attempt.verified.settlement = Some(sr);
                }
                outcome => match self.conclude(&mut attempt, outcome, timing).await {
                    Ok(sr) => attempt.verified.settlement = Some(sr),
                    Err(a) => return Begin::Answer(a),
                },
            }
        }
        self.metrics.accepted();
        Begin::Serve(attempt, recording)
    }

    /// After the protected service answered, when nothing is left to do: the receipt to add (settled before
    /// the handler, or a redelivery). `None`: call [`PaymentEngine::finish`].
    pub(crate) fn finish_now(
        &self,
        route: &Route,
        attempt: &mut Attempt,
        served: bool,
    ) -> Option<Option<SettleResponse>> {
        (attempt.verified.redelivered || route.timing == SettleTiming::BeforeHandler)
            .then(|| attempt.verified.settlement.take().filter(|_| served))
    }

    /// After the protected service answered (`served`: below 400): settle (settle-after), or release.
    pub(crate) async fn finish(
        &self,
        route: &Route,
        mut attempt: Box<Attempt>,
        served: bool,
    ) -> Finish {
        let version = attempt.verified.x402_version;
        if let Some(receipt) = self.finish_now(route, &mut attempt, served) {
            return Finish::Pass(receipt, version);
        }
        if !served {
            // Nothing was charged: the authorization may be presented again.
            self.dispose(&mut attempt, Event::NotServed, None).await;
            return Finish::Pass(None, version);
        }
        match self.settle(&mut attempt, Some(route.timing)).await {
            Ok(sr) => Finish::Pass(Some(sr), version),
            Err(a) => Finish::Replace(a),
        }
    }

    /// A payment refused only because its `validBefore` has passed, checked again as of its last valid
    /// second ([`verify::as_of_last_valid_second`]): `Ok` to be looked up (never settled), else the first
    /// refusal. Decoded again: the first check consumed the decoding, and only this rare path needs it twice.
    fn verify_expired(
        &self,
        refused: Rejection,
        offers: &[CompiledOffer],
        header: &[u8],
        now: u64,
    ) -> Result<verify::LocallyVerified, Rejection> {
        if refused.reason != RejectReason::ValidBefore {
            return Err(refused);
        }
        let Ok(decoded) = verify::decode(header) else {
            return Err(refused);
        };
        let valid_before = decoded.payload.exact().authorization.valid_before;
        verify::as_of_last_valid_second(refused, valid_before, now, |at| {
            verify::verify(decoded, offers, at)
        })
    }

    async fn bind_identifier(
        &self,
        policy: &PaymentIdentifier,
        request: &SettleRequest,
        fingerprint: B256,
        resource: &str,
        now: u64,
    ) -> Result<(), Answer> {
        let id = match identifier::extract(&request.payload_text) {
            Ok(Some(id)) => id,
            Ok(None) if policy.required => {
                return Err(Answer::BadRequest {
                    error: identifier::ERROR_REQUIRED,
                    message: "this resource requires a payment-identifier extension with an id"
                        .to_owned(),
                });
            }
            Ok(None) => return Ok(()),
            Err(message) => {
                return Err(Answer::BadRequest {
                    error: identifier::ERROR_INVALID,
                    message: message.to_owned(),
                });
            }
        };
        let mut bound = Vec::with_capacity(32 + resource.len());
        bound.extend_from_slice(fingerprint.as_slice());
        bound.extend_from_slice(resource.as_bytes());
        let key = replay_key(request);
        let binding = IdBinding {
            fingerprint: keccak256(&bound),
            key,
            expires_at: self.kept_until(
                u64::try_from(request.payload.exact().authorization.valid_before)
                    .unwrap_or(u64::MAX),
            ),
        };
        match self.store.bind_id(&id, &binding, now).await {
            Ok(IdClaim::New | IdClaim::Same) => Ok(()),
            Ok(IdClaim::Conflict) => Err(Answer::Conflict {
                message: format!(
                    "payment identifier {id:?} was used with another payment or for another request"
                ),
            }),
            Err(e) => Err(self.store_failed(&e)),
        }
    }

    /// Reserves the payment's record, or decides from the record another request left. An `expired`
    /// payment (past its `validBefore`) reserves nothing and is never settled: only its record (settled:
    /// redelivered; unresolved: reconciled, or pending) answers it, else it is refused as expired.
    #[allow(clippy::too_many_arguments)]
    async fn admit(
        &self,
        request: SettleRequest,
        stored: Arc<StoredPayment>,
        fingerprint: B256,
        resource: &str,
        timing: Option<SettleTiming>,
        on_settled: Option<&SettledHook>,
        expired: bool,
    ) -> Admitted {
        let key = replay_key(&request);
        let mut verified = VerifiedPayment::from_request(&request);
        let now = self.now();
        let record = PaymentRecord {
            state: PaymentState::InFlight,
            resource: resource.to_owned(),
            fingerprint,
            settlement: None,
            payment: stored,
            expires_at: self.kept_until(verified.valid_before),
            updated_at: now,
            revision: 0,
        };
        let deadline = Instant::now() + self.in_flight_wait;
        let mut pause = Duration::from_millis(10);
        let version = verified.x402_version;
        let expired_refusal = || self.refuse(RejectReason::ValidBefore, version);
        loop {
            let reserved = if expired {
                match self.store.get(&key, self.now()).await {
                    Err(e) => Err(e),
                    Ok(Some(existing)) => Ok(Reservation::Taken(Box::new(existing))),
                    Ok(None) => return Admitted::Answer(expired_refusal()),
                }
            } else {
                self.store.reserve(&key, &record, now).await
            };
            let existing = match reserved {
                Err(e) => return Admitted::Answer(self.store_failed(&e)),
                Ok(Reservation::Reserved { revision }) => {
                    return Admitted::Fresh(Box::new(Attempt {
                        request,
                        key,
                        record: PaymentRecord { revision, ..record },
                        verified,
                        on_settled: on_settled.cloned(),
                    }));
                }
                Ok(Reservation::Taken(existing)) => existing,
            };
            match self.on_taken(&key, &record, *existing, self.now()).await {
                Taken::Refuse(reason) => {
                    debug!(payer = %key.from, nonce = %key.nonce, "authorization already used");
                    return Admitted::Answer(self.refuse(reason, verified.x402_version));
                }
                Taken::Answer(a) => return Admitted::Answer(a),
                Taken::Redeliver(mut settlement, settled_at) => {
                    if let Some(hook) = on_settled {
                        (hook.0)(&mut settlement, resource, Settled::Recorded(settled_at));
                    }
                    verified.settlement = Some(settlement);
                    verified.redelivered = true;
                    return Admitted::Redeliver(Box::new(Attempt {
                        request,
                        key,
                        record,
                        verified,
                        on_settled: on_settled.cloned(),
                    }));
                }
                Taken::Claimed(claimed) => {
                    // Settled by this reconciliation: the hook completes it before it is recorded.
                    let attempt = Box::new(Attempt {
                        request,
                        key,
                        record: claimed,
                        verified,
                        on_settled: on_settled.cloned(),
                    });
                    return match self.reconcile_claimed(attempt, timing).await {
                        // Nothing moved, and the authorization can no longer be used: released, refused.
                        Admitted::Fresh(mut attempt) if expired => {
                            let event = Event::SettlementFailed { still_usable: true };
                            self.dispose(&mut attempt, event, None).await;
                            Admitted::Answer(expired_refusal())
                        }
                        admitted => admitted,
                    };
                }
                Taken::Busy => {}
                Taken::Changed => continue,
            }
            if Instant::now() >= deadline {
                return Admitted::Answer(self.pending_answer(&request, None));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// The one function that reads a record another request left for this payment.
    async fn on_taken(
        &self,
        key: &ReplayKey,
        mine: &PaymentRecord,
        existing: PaymentRecord,
        now: u64,
    ) -> Taken {
        if !existing.is_same_payment(&mine.fingerprint, &mine.resource) {
            // Another authorization with this nonce, or this one spent on another resource.
            return Taken::Refuse(RejectReason::NonceAlreadyUsed);
        }
        match existing.state {
            PaymentState::Settled => match existing.settlement {
                Some(sr) => Taken::Redeliver(sr, existing.updated_at),
                None => Taken::Refuse(RejectReason::NonceAlreadyUsed),
            },
            PaymentState::Spent => Taken::Refuse(RejectReason::NonceAlreadyUsed),
            PaymentState::InFlight
                if now < existing.updated_at.saturating_add(self.stale_after) =>
            {
                Taken::Busy
            }
            PaymentState::InFlight | PaymentState::Pending => {
                match self.claim(key, &existing, now).await {
                    Ok(Some(claimed)) => Taken::Claimed(claimed),
                    Ok(None) => Taken::Changed,
                    Err(e) => Taken::Answer(self.store_failed(&e)),
                }
            }
        }
    }

    /// Takes a `Pending` (or abandoned `InFlight`) record for reconciliation: `InFlight` again, by this
    /// caller, with compare-and-set. `None` when another request or instance changed it first.
    async fn claim(
        &self,
        key: &ReplayKey,
        record: &PaymentRecord,
        now: u64,
    ) -> Result<Option<PaymentRecord>, StoreError> {
        let mut claimed = record.clone();
        claimed.state = PaymentState::InFlight;
        claimed.updated_at = now;
        Ok(self
            .store
            .update(key, record.revision, &claimed)
            .await?
            .then(|| PaymentRecord {
                revision: record.revision + 1,
                ..claimed
            }))
    }

    /// Asks the settler what became of a claimed payment (never moving money again), reports it, and writes
    /// it as a settlement outcome ([`PaymentEngine::apply`]). `None`: not settled and still usable, which the
    /// caller decides (settle anew, or release).
    async fn reconcile(
        &self,
        attempt: &mut Attempt,
        timing: Option<SettleTiming>,
    ) -> Option<Result<SettleResponse, Answer>> {
        let transaction = pending_transaction(&attempt.record);
        let outcome = self
            .settler
            .reconcile(&attempt.request, transaction.as_deref())
            .instrument(debug_span!("x402.reconcile"))
            .await;
        self.observe(
            &attempt.verified,
            &attempt.record.resource,
            &outcome,
            timing,
            true,
        )
        .await;
        match outcome {
            SettleOutcome::Failed {
                authorization_still_usable: true,
                ..
            } => None,
            outcome => Some(self.apply(attempt, outcome).await),
        }
    }

    /// Reconciles a claimed `Pending` (or abandoned) payment on a resend: delivered when settled, settled
    /// anew under this claim when nothing moved, refused otherwise.
    async fn reconcile_claimed(
        &self,
        mut attempt: Box<Attempt>,
        timing: Option<SettleTiming>,
    ) -> Admitted {
        match self.reconcile(&mut attempt, timing).await {
            None => Admitted::Fresh(attempt),
            Some(Ok(settlement)) => {
                attempt.verified.settlement = Some(settlement);
                attempt.verified.redelivered = true;
                Admitted::Redeliver(attempt)
            }
            Some(Err(answer)) => Admitted::Answer(answer),
        }
    }

    /// The settler's own verification (balance, nonce on chain, smart wallets). Refused: the answer, and
    /// the failure as a settlement response (with the settler's message) for a door that answers with one.
    async fn settler_verify(&self, attempt: &mut Attempt) -> Result<(), VerifyRefusal> {
        let version = attempt.verified.x402_version;
        match self
            .settler
            .verify(&attempt.request)
            .instrument(debug_span!("x402.settler_verify"))
            .await
        {
            Ok(VerifyOutcome::Valid) => Ok(()),
            Ok(VerifyOutcome::Invalid { reason, message }) => {
                debug!(%reason, ?message, "settler rejected the payment");
                let nonce_used = reason == RejectReason::NonceAlreadyUsed.as_str();
                let failure = self.failure(attempt, &reason, message);
                self.dispose(
                    attempt,
                    Event::SettlerRefused { nonce_used },
                    Some(failure.clone()),
                )
                .await;
                self.metrics.rejected(RejectReason::SettlerRejected);
                Err(VerifyRefusal {
                    answer: Answer::PaymentRequired {
                        error: Cow::Owned(reason),
                        receipt: None,
                        version,
                    },
                    failure: Some(failure),
                })
            }
            Err(e) => {
                warn!(error = %e, "settler verify failed");
                self.dispose(attempt, Event::SettlerUnreachable, None).await;
                self.metrics.upstream_error();
                Err(VerifyRefusal {
                    answer: Answer::Unavailable {
                        status: 502,
                        message: VERIFY_UNAVAILABLE,
                    },
                    failure: None,
                })
            }
        }
    }

    /// Settles, reports, and applies the outcome.
    async fn settle(
        &self,
        attempt: &mut Attempt,
        timing: Option<SettleTiming>,
    ) -> Result<SettleResponse, Answer> {
        let outcome = self.settle_outcome(attempt).await;
        self.conclude(attempt, outcome, timing).await
    }

    /// Asks the settler to settle the attempt's payment.
    async fn settle_outcome(&self, attempt: &Attempt) -> SettleOutcome {
        if self.verify_only
            && !self
                .verify_only_warned
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            warn!(
                payer = %attempt.verified.payer,
                "VERIFY-ONLY: accepting payments without settling them (no settler was configured; no money moves); logged once"
            );
        }
        self.settler
            .settle(&attempt.request)
            .instrument(debug_span!("x402.settle"))
            .await
    }

    /// Reports a settlement outcome and applies it (both written before it returns).
    async fn conclude(
        &self,
        attempt: &mut Attempt,
        outcome: SettleOutcome,
        timing: Option<SettleTiming>,
    ) -> Result<SettleResponse, Answer> {
        if self.observer.is_none() {
            return self.apply(attempt, outcome).await;
        }
        // The observer's record and the payment record are both durable writes: issued together, a
        // group-committing store puts them in one commit (the client is still answered after both).
        let (payment, resource) = (attempt.verified.clone(), attempt.record.resource.clone());
        let observed = self.observe(&payment, &resource, &outcome, timing, false);
        let (_, result) = tokio::join!(observed, self.apply(attempt, outcome.clone()));
        result
    }

    /// Applies a settlement outcome (the keep/release rule through [`disposition`]) and builds the answer.
    async fn apply(
        &self,
        attempt: &mut Attempt,
        outcome: SettleOutcome,
    ) -> Result<SettleResponse, Answer> {
        let version = attempt.verified.x402_version;
        match outcome {
            SettleOutcome::Settled {
                transaction,
                payer,
                network,
            } => {
                let sr = self.settled_response(attempt, transaction, payer, network);
                self.dispose(attempt, Event::Settled, Some(sr.clone()))
                    .await;
                Ok(sr)
            }
            SettleOutcome::Failed {
                reason,
                message,
                authorization_still_usable,
            } => {
                warn!(%reason, ?message, "settlement failed");
                self.metrics.settlement_failed();
                let sr = self.failure(attempt, &reason, message);
                let event = Event::SettlementFailed {
                    still_usable: authorization_still_usable,
                };
                self.dispose(attempt, event, Some(sr.clone())).await;
                Err(Answer::PaymentRequired {
                    error: Cow::Owned(reason),
                    receipt: Some(sr),
                    version,
                })
            }
            SettleOutcome::Unknown {
                message,
                transaction,
            } => {
                error!(%message, ?transaction, "settlement outcome unknown: recorded as pending");
                self.metrics.settlement_unknown();
                let answer = self.pending_answer(&attempt.request, transaction);
                if let Answer::PaymentRequired { receipt, .. } = &answer {
                    self.dispose(attempt, Event::OutcomeUnknown, receipt.clone())
                        .await;
                }
                Err(answer)
            }
        }
    }

    /// The answer to a successful settlement, completed by the route's hook (the signed receipt).
    fn settled_response(
        &self,
        attempt: &Attempt,
        transaction: String,
        payer: alloy_primitives::Address,
        network: String,
    ) -> SettleResponse {
        let mut sr = SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            transaction,
            network,
            payer: Some(crate::address::checksum(&payer)),
            extensions: None,
        };
        if let Some(hook) = &attempt.on_settled {
            (hook.0)(&mut sr, &attempt.record.resource, Settled::Now(self.now()));
        }
        sr
    }

    /// The writes of a successful settlement (the record kept as [`disposition`] says, the observer's
    /// report), issued together and owned by the returned future, which the door awaits before answering.
    /// The attempt's own copy of the record is not advanced: nothing reads it after a settlement.
    fn record_settled(
        &self,
        attempt: &Attempt,
        sr: &SettleResponse,
        timing: Option<SettleTiming>,
    ) -> Recording {
        let outcome = SettleOutcome::Settled {
            transaction: sr.transaction.clone(),
            payer: attempt.verified.payer,
            network: sr.network.clone(),
        };
        let observer = self.observer.clone();
        let metrics = self.metrics.clone();
        let store = self.store.clone();
        let key = attempt.key;
        let revision = attempt.record.revision;
        let kept = match disposition(Event::Settled) {
            Disposition::Keep(state) => Some(self.next_record(attempt, state, Some(sr.clone()))),
            Disposition::Release => None,
        };
        let payment = attempt.verified.clone();
        let resource = attempt.record.resource.clone();
        Box::pin(async move {
            let observed = async {
                if let Some(observer) = &observer {
                    let event = Observed {
                        payment: &payment,
                        resource: &resource,
                        outcome: &outcome,
                        timing,
                        reconciled: false,
                    };
                    observe(&**observer, &metrics, event).await;
                }
            };
            let written = async {
                match &kept {
                    Some(record) => {
                        write_record(&*store, &key, revision, record).await;
                    }
                    None => release_record(&*store, &key, revision).await,
                }
            };
            tokio::join!(observed, written);
        })
    }

    fn failure(&self, attempt: &Attempt, reason: &str, message: Option<String>) -> SettleResponse {
        SettleResponse {
            success: false,
            error_reason: Some(reason.to_owned()),
            error_message: message,
            transaction: String::new(),
            network: attempt.request.wire_network(),
            payer: Some(crate::address::checksum(&attempt.verified.payer)),
            extensions: None,
        }
    }

    /// 402 with a `settlement_pending` receipt: resend the identical payment later.
    fn pending_answer(&self, request: &SettleRequest, transaction: Option<String>) -> Answer {
        Answer::PaymentRequired {
            error: Cow::Borrowed(SETTLEMENT_PENDING),
            receipt: Some(SettleResponse {
                success: false,
                error_reason: Some(SETTLEMENT_PENDING.to_owned()),
                error_message: Some(
                    "the settlement's outcome is not known yet; resend the identical payment to get the content \
                     once it is (it will not be charged twice)"
                        .to_owned(),
                ),
                transaction: transaction.unwrap_or_default(),
                network: request.wire_network(),
                payer: Some(crate::address::checksum(&request.payer())),
                extensions: None,
            }),
            version: request.payload.x402_version(),
        }
    }

    /// Applies the keep/release rule ([`disposition`]) to the attempt's record after `event`.
    async fn dispose(
        &self,
        attempt: &mut Attempt,
        event: Event,
        settlement: Option<SettleResponse>,
    ) {
        match disposition(event) {
            Disposition::Release => self.release(attempt).await,
            Disposition::Keep(state) => self.save(attempt, state, settlement).await,
        }
    }

    /// The attempt's record in `state` with `settlement`, as it is to be written now.
    fn next_record(
        &self,
        attempt: &Attempt,
        state: PaymentState,
        settlement: Option<SettleResponse>,
    ) -> PaymentRecord {
        let mut record = attempt.record.clone();
        record.state = state;
        record.settlement = settlement;
        record.updated_at = self.now();
        if state.is_final() {
            record.payment = StoredPayment::forgotten();
        }
        record
    }

    /// Writes the attempt's record in `state`; a failure is logged loudly (the record stays as it was, and
    /// the reconciler or a resend resolves it).
    async fn save(
        &self,
        attempt: &mut Attempt,
        state: PaymentState,
        settlement: Option<SettleResponse>,
    ) {
        let mut record = self.next_record(attempt, state, settlement);
        let revision = attempt.record.revision;
        if write_record(&*self.store, &attempt.key, revision, &record).await {
            record.revision = revision + 1;
            attempt.record = record;
        }
    }

    async fn release(&self, attempt: &Attempt) {
        release_record(&*self.store, &attempt.key, attempt.record.revision).await;
    }

    /// Tells the observer; a failure is logged and counted, never propagated.
    async fn observe(
        &self,
        payment: &VerifiedPayment,
        resource: &str,
        outcome: &SettleOutcome,
        timing: Option<SettleTiming>,
        reconciled: bool,
    ) {
        let Some(observer) = &self.observer else {
            return;
        };
        let event = Observed {
            payment,
            resource,
            outcome,
            timing,
            reconciled,
        };
        observe(&**observer, &self.metrics, event).await;
    }

    /// Resolves, without any client, up to `limit` payments whose settlement outcome is unknown (`Pending`)
    /// or whose request died mid-flight: asks [`Settler::reconcile`], reports to the observer (with
    /// `reconciled: true`) and writes the outcome. A payment found unsettled and still usable is released:
    /// nothing was charged. Run it periodically (the reference server does, every 30 s).
    pub async fn reconcile_unresolved(&self, limit: usize) -> Result<ReconcileReport, StoreError> {
        let now = self.now();
        let list = self
            .store
            .unresolved(now, now.saturating_sub(self.stale_after), limit)
            .await?;
        let mut report = ReconcileReport::default();
        for (key, record) in list {
            report.examined += 1;
            let request = match facilitator::stored_request(&record.payment) {
                Ok(r) => r,
                Err(e) => {
                    error!(payer = %key.from, nonce = %key.nonce, error = %e.message, "stored payment unreadable");
                    report.skipped += 1;
                    continue;
                }
            };
            let Some(claimed) = self.claim(&key, &record, now).await? else {
                report.skipped += 1;
                continue;
            };
            let verified = VerifiedPayment::from_request(&request);
            let mut attempt = Attempt {
                request,
                key,
                record: claimed,
                verified,
                on_settled: None,
            };
            match self.reconcile(&mut attempt, None).await {
                None => {
                    // Nothing was charged: the payer may present the authorization again.
                    let event = Event::SettlementFailed { still_usable: true };
                    self.dispose(&mut attempt, event, None).await;
                    report.released += 1;
                }
                Some(Ok(_)) => report.settled += 1,
                Some(Err(Answer::PaymentRequired { error, .. })) if error == SETTLEMENT_PENDING => {
                    report.pending += 1
                }
                Some(Err(_)) => report.failed += 1,
            }
        }
        Ok(report)
    }
}

/// What [`PaymentEngine::on_taken`] decided.
enum Taken {
    Refuse(RejectReason),
    Answer(Answer),
    /// Settled: this settlement, recorded at these unix seconds.
    Redeliver(SettleResponse, u64),
    /// Claimed (now `InFlight` at this revision) for reconciliation.
    Claimed(PaymentRecord),
    /// Another request holds it: wait.
    Busy,
    /// It changed between reading and claiming: read again.
    Changed,
}

fn pending_transaction(record: &PaymentRecord) -> Option<String> {
    record
        .settlement
        .as_ref()
        .map(|s| s.transaction.clone())
        .filter(|t| !t.is_empty())
}

/// The replay key of a payment.
pub(crate) fn replay_key(request: &SettleRequest) -> ReplayKey {
    let auth = &request.payload.exact().authorization;
    ReplayKey {
        chain_id: request.offer.network.chain_id(),
        asset: request.offer.token.address,
        from: auth.from,
        nonce: auth.nonce,
    }
}

fn system_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A settlement outcome to report to the observer.
struct Observed<'a> {
    payment: &'a VerifiedPayment,
    resource: &'a str,
    outcome: &'a SettleOutcome,
    timing: Option<SettleTiming>,
    reconciled: bool,
}

/// Tells `observer`; a failure is logged and counted, never propagated.
async fn observe(observer: &dyn SettlementObserver, metrics: &X402Metrics, ev: Observed<'_>) {
    let observed = match ev.outcome {
        SettleOutcome::Settled { transaction, .. } => ObservedOutcome::Settled {
            transaction: transaction.clone(),
        },
        SettleOutcome::Failed {
            reason, message, ..
        } => ObservedOutcome::Failed {
            reason: reason.clone(),
            message: message.clone(),
        },
        SettleOutcome::Unknown {
            message,
            transaction,
        } => ObservedOutcome::Unknown {
            message: message.clone(),
            transaction: transaction.clone(),
        },
    };
    let mut payment = ev.payment.clone();
    payment.settlement = None;
    let event = SettlementEvent {
        payment: &payment,
        resource: ev.resource,
        outcome: &observed,
        timing: ev.timing,
        reconciled: ev.reconciled,
    };
    let result = observer
        .on_settlement(event)
        .instrument(debug_span!("x402.observe", outcome = observed.as_str()))
        .await;
    if let Err(e) = result {
        metrics.observer_error();
        error!(
            error = %e,
            outcome = observed.as_str(),
            ?observed,
            payer = %payment.payer,
            nonce = %payment.nonce,
            amount = %payment.amount,
            network = payment.network.caip2(),
            resource = %ev.resource,
            "SETTLEMENT NOT RECORDED: the settlement observer failed"
        );
    }
}

/// Writes `record` over revision `revision`; `false` (logged loudly) if it was not written: the record
/// stays as it was, and the reconciler or a resend resolves it.
async fn write_record(
    store: &dyn ReplayStore,
    key: &ReplayKey,
    revision: u64,
    record: &PaymentRecord,
) -> bool {
    let state = record.state.as_str();
    match store.update(key, revision, record).await {
        Ok(true) => true,
        Ok(false) => {
            error!(
                payer = %key.from, nonce = %key.nonce, state,
                "payment record changed underneath this request; not overwritten"
            );
            false
        }
        Err(e) => {
            error!(
                error = %e, payer = %key.from, nonce = %key.nonce, state,
                "PAYMENT STATE NOT SAVED: the store failed"
            );
            false
        }
    }
}

/// Releases the record at `revision` (the authorization may be presented again).
async fn release_record(store: &dyn ReplayStore, key: &ReplayKey, revision: u64) {
    if let Err(e) = store.release(key, revision).await {
        // The key stays blocked until it expires (or is reconciled): the payer can sign a new authorization.
        warn!(error = %e, "payment store release failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_separators_are_remembered_only_when_asked() {
        let engine = PaymentEngine::builder()
            .settler(Arc::new(crate::settle::VerifyOnlySettler))
            .build()
            .unwrap();
        let network: crate::Network = "base-sepolia".parse().unwrap();
        let chain = network.chain_id();
        let usdc = Token::usdc(&network).unwrap();
        let junk = Token::new(alloy_primitives::Address::repeat_byte(7), "Junk", "1", 6);
        let cached = || engine.domains.lock().unwrap().len();
        // A token a facilitator caller chose: computed, not remembered.
        assert_eq!(
            engine.separator(chain, &junk, false),
            domain_separator(chain, &junk)
        );
        assert_eq!(cached(), 0);
        // An offer's token: remembered, then found whoever asks.
        assert_eq!(
            engine.separator(chain, &usdc, true),
            domain_separator(chain, &usdc)
        );
        assert_eq!(cached(), 1);
        assert_eq!(
            engine.separator(chain, &usdc, false),
            domain_separator(chain, &usdc)
        );
        assert_eq!(cached(), 1);
        // The same contract under another name is another domain: not the cached separator.
        let renamed = Token::new(usdc.address, "Renamed Coin", usdc.version.clone(), 6);
        assert_eq!(
            engine.separator(chain, &renamed, true),
            domain_separator(chain, &renamed)
        );
        assert_ne!(
            domain_separator(chain, &renamed),
            domain_separator(chain, &usdc)
        );
        assert_eq!(
            engine.separator(chain, &usdc, false),
            domain_separator(chain, &usdc)
        );
    }
}
