//! The payment engine: every decision about one payment, in one place, without Tower or HTTP requests.
//!
//! [`PaymentEngine`] owns the whole life of a payment: decode, match an offer, verify, remember
//! ([`PaymentStore`]), ask the settler, settle (before or after the protected service runs), keep or release
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
//! 5. Settlement; what is kept or released is decided by [`disposition`](crate::store::disposition), the
//!    one function of the keep/release rule, in [`crate::store`] beside its table: settled → `Settled`;
//!    failed and still usable → released; failed → `Spent`; unknown → `Pending`, answered 402 with a
//!    `settlement_pending` receipt carrying the transaction when there is one.
//!
//! Every settlement attempt (and every reconciliation) is reported to the observer before anybody is
//! answered.

mod admit;
mod builder;
pub mod facilitator;
pub mod metrics;
mod reconcile;
mod settle;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{Instrument, debug_span, error, warn};

pub(crate) use crate::extensions::Settled;
use crate::extensions::payment_identifier::PaymentIdentifier;
use crate::offer::PaymentOffer;
use crate::payment::{SettleTiming, VerifiedPayment};
use crate::proto::SettleResponse;
use crate::scheme::CompiledOffer;
use crate::scheme::Schemes;
use crate::settle::{
    ObservedOutcome, SettleOutcome, SettleRequest, SettlementEvent, SettlementObserver, Settler,
};
use crate::store::{PaymentKey, PaymentRecord, PaymentStore, StoreError};
use crate::verify::RejectReason;

pub use builder::{EngineConfigError, PaymentEngineBuilder};
pub use metrics::{MetricsSnapshot, X402Metrics};
pub use reconcile::ReconcileReport;

/// Default cap on the length of a payment header (bytes, before decoding).
pub const DEFAULT_MAX_HEADER_LEN: usize = 16 * 1024;
/// Default of [`PaymentEngineBuilder::in_flight_wait`].
pub const DEFAULT_IN_FLIGHT_WAIT: Duration = Duration::from_secs(5);
/// Default of [`PaymentEngineBuilder::stale_after`].
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(180);
/// What a door answers (502) when the settler cannot verify a payment now (unreachable, or the chain cannot
/// say yet): send it again.
const VERIFY_UNAVAILABLE: &str = "payment verification unavailable";
/// Default of [`PaymentEngineBuilder::store_timeout`].
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(10);
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
    /// The extensions whose echo a payment record leaves out: the route's own declarations that keep none
    /// ([`Extension::keeps_echo`](crate::extensions::Extension::keeps_echo)).
    pub(crate) left_out: Arc<[Box<str>]>,
}

/// A function completing a successful [`SettleResponse`] for a resource URL.
#[derive(Clone)]
pub(crate) struct SettledHook(pub(crate) Arc<SettledFn>);

/// The function of a [`SettledHook`]: the settlement, its resource URL, and how it was settled.
pub(crate) type SettledFn = dyn Fn(&mut SettleResponse, &str, Settled) + Send + Sync;

impl std::fmt::Debug for SettledHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SettledHook")
    }
}

/// A payment admitted for the protected service.
#[derive(Debug)]
pub(crate) struct Attempt {
    pub(crate) request: SettleRequest,
    pub(crate) key: PaymentKey,
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
pub(crate) type Recording = crate::boxed::BoxFuture<'static, ()>;

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

/// The one engine behind every door. Build it with [`PaymentEngine::builder`]; share it with `Arc`.
pub struct PaymentEngine {
    settler: Arc<dyn Settler>,
    observer: Option<Arc<dyn SettlementObserver>>,
    store: Arc<dyn PaymentStore>,
    max_header_len: usize,
    in_flight_wait: Duration,
    stale_after: u64,
    keep_after_expiry: u64,
    verify_only: bool,
    verify_only_warned: std::sync::atomic::AtomicBool,
    pub(crate) metrics: Arc<X402Metrics>,
    clock: Clock,
    schemes: Schemes,
    /// Offers compiled once per distinct list (a price source returns the same few lists again and again).
    compiled: Mutex<HashMap<Vec<PaymentOffer>, Arc<[CompiledOffer]>>>,
    task_context: Option<Arc<TaskContext>>,
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

/// Distinct offer lists kept compiled; past it the cache starts over (a bounded memory, whatever prices do).
const COMPILED_CACHE: usize = 4096;

impl PaymentEngine {
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
    pub fn store(&self) -> &Arc<dyn PaymentStore> {
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

    /// Why `offer` cannot be sold on a route settling at `timing`, if it cannot: no scheme of this engine
    /// sells it, its scheme cannot prepare it, or its scheme settles what was used and the route settles
    /// before its handler knows what that is.
    pub(crate) fn offer_problem(
        &self,
        offer: &PaymentOffer,
        timing: SettleTiming,
    ) -> Option<&'static str> {
        let Some(scheme) = self.schemes.for_offer(offer) else {
            return Some("no scheme of the payment engine sells it (PaymentEngineBuilder::scheme)");
        };
        if let Err(why) = scheme.prepare(crate::scheme::SchemeOffer {
            offer,
            operator: true,
        }) {
            return Some(why);
        }
        (scheme.charges_what_was_used() && timing == SettleTiming::BeforeHandler).then_some(
            "a scheme that settles what was used (upto) cannot be sold on a route that settles before its handler",
        )
    }

    /// Compiles offers ([`Schemes::compile`]).
    fn compile_uncached(&self, offers: Vec<PaymentOffer>) -> Arc<[CompiledOffer]> {
        self.schemes.compile(offers).into()
    }

    /// [`Self::refuse`] with the rejection's own words for the client ([`Rejection::client_error`]).
    fn refuse_with(&self, rejection: &crate::verify::Rejection, version: u8) -> Answer {
        self.metrics.rejected(rejection.reason);
        Answer::PaymentRequired {
            error: rejection.client_error(),
            receipt: None,
            version,
        }
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
}

/// The payment key of a payment (its scheme's).
pub(crate) fn payment_key(request: &SettleRequest) -> PaymentKey {
    request.authorized.key
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

/// Pauses between the tries of a record write that failed (the store's error, or no answer within its
/// bound): a write after money moved is what a resend or the reconciler reads, so a failing store gets three
/// tries over about half a second before the record is left as it was.
const WRITE_RETRIES: [Duration; 2] = [Duration::from_millis(50), Duration::from_millis(400)];

/// Writes `record` over revision `revision`, retried on a store error ([`WRITE_RETRIES`]); `false` (logged
/// loudly) if it was not written: the record stays as it was, and the reconciler or a resend resolves it.
async fn write_record(
    store: &dyn PaymentStore,
    key: &PaymentKey,
    revision: u64,
    record: &PaymentRecord,
) -> bool {
    let state = record.state.as_str();
    let mut failed = None;
    let mut pauses = WRITE_RETRIES.iter();
    loop {
        match store.update(key, revision, record).await {
            Ok(true) => return true,
            Ok(false) => {
                // A try that failed may have written the record before its answer was lost: then the
                // stored record is this one, one revision on.
                if failed.is_some() && written(store, key, revision, record).await {
                    return true;
                }
                error!(
                    payer = %key.from, nonce = %key.nonce, state,
                    "payment record changed underneath this request; not overwritten"
                );
                return false;
            }
            Err(e) => match pauses.next() {
                Some(pause) => {
                    warn!(error = %e, payer = %key.from, nonce = %key.nonce, state, "payment record write failed; trying again");
                    failed = Some(e);
                    pause_for(*pause).await;
                }
                None => {
                    error!(
                        error = %e, payer = %key.from, nonce = %key.nonce, state,
                        "PAYMENT STATE NOT SAVED: the store failed"
                    );
                    return false;
                }
            },
        }
    }
}

/// Waits `pause` on Tokio's timer; outside a Tokio runtime, not at all.
async fn pause_for(pause: Duration) {
    if tokio::runtime::Handle::try_current().is_ok() {
        tokio::time::sleep(pause).await;
    }
}

/// Whether the stored record of `key` is `record` written over `revision` (by a try whose answer was lost).
async fn written(
    store: &dyn PaymentStore,
    key: &PaymentKey,
    revision: u64,
    record: &PaymentRecord,
) -> bool {
    matches!(
        store.get(key, 0).await,
        Ok(Some(stored)) if stored.revision == revision + 1
            && stored.state == record.state
            && stored.updated_at == record.updated_at
            && stored.settlement == record.settlement
    )
}

/// Releases the record at `revision` (the authorization may be presented again), retried on a store error
/// like [`write_record`].
async fn release_record(store: &dyn PaymentStore, key: &PaymentKey, revision: u64) {
    let mut pauses = WRITE_RETRIES.iter();
    loop {
        match store.release(key, revision).await {
            Ok(_) => return,
            Err(e) => match pauses.next() {
                Some(pause) => {
                    warn!(error = %e, payer = %key.from, nonce = %key.nonce, "payment store release failed; trying again");
                    pause_for(*pause).await;
                }
                None => {
                    // The record stays in flight: the reconciler finds it unsettled after `stale_after` and
                    // releases it then; the payer can also sign a new authorization.
                    warn!(error = %e, payer = %key.from, nonce = %key.nonce, "payment store release failed");
                    return;
                }
            },
        }
    }
}

/// Wraps each task the engine spawns ([`PaymentEngineBuilder::task_context`]).
pub type TaskContext = dyn Fn(crate::boxed::BoxFuture<'static, ()>) -> crate::boxed::BoxFuture<'static, ()>
    + Send
    + Sync;

impl PaymentEngine {
    /// Runs `fut` to its end even when the request that started it is dropped (the client went away, the
    /// protected service panicked): a spawned task on the Tokio runtime when there is one, else in place.
    /// What runs so is the bookkeeping of a payment whose money may have moved; it must never stop halfway.
    /// The task keeps the request's tracing span and whatever [`PaymentEngineBuilder::task_context`] carries.
    /// The returned future is `None` only if `fut` itself panicked.
    pub(crate) fn run_to_end<T: Send + 'static>(
        &self,
        fut: impl std::future::Future<Output = T> + Send + 'static,
    ) -> crate::boxed::BoxFuture<'static, Option<T>> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Box::pin(async move { Some(fut.await) });
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task: crate::boxed::BoxFuture<'static, ()> = Box::pin(
            async move {
                let _ = tx.send(fut.await);
            }
            .in_current_span(),
        );
        runtime.spawn(match &self.task_context {
            Some(wrap) => wrap(task),
            None => task,
        });
        Box::pin(async move { rx.await.ok() })
    }
}
