//! Fault injection for tests (feature `test-util`): a store that fails or hangs on chosen calls, a settler
//! over an in-memory ledger that can lose the answer of a settlement it made, and a protected service that
//! errors, panics or breaks its body. With them a test puts a fault exactly where money has moved (or is
//! about to) and checks the rules of money: the buyer's identical resend gets the content or the payment is
//! not taken, and an authorization moves money at most once.
//!
//! ```
//! use std::sync::Arc;
//! use x402_tower::layer::faults::{Fault, FaultyStore, LedgerSettler, StoreOp};
//! use x402_tower::store::InMemoryPaymentStore;
//! use x402_tower::PaymentEngine;
//!
//! let store = FaultyStore::new(Arc::new(InMemoryPaymentStore::default()));
//! // The second `update` (the write after a settle-after settlement) fails; every later one works.
//! store.inject(StoreOp::Update, 2, Fault::Fail);
//! let ledger = LedgerSettler::new();
//! let engine = PaymentEngine::builder()
//!     .settler(ledger.clone())
//!     .store(store.clone())
//!     .build()
//!     .unwrap();
//! # let _ = engine;
//! assert_eq!(ledger.moved(), 0);
//! ```

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use alloy_primitives::{Address, B256};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};

use crate::boxed::BoxFuture;
use crate::proto::SupportedResponse;
use crate::settle::{SettleError, SettleOutcome, SettleRequest, Settler, VerifyOutcome};
use crate::store::{
    IdBinding, IdClaim, PaymentKey, PaymentRecord, PaymentStore, Reservation, StoreError,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A method of [`PaymentStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOp {
    /// [`PaymentStore::reserve`].
    Reserve,
    /// [`PaymentStore::get`].
    Get,
    /// [`PaymentStore::update`].
    Update,
    /// [`PaymentStore::release`].
    Release,
    /// [`PaymentStore::unresolved`].
    Unresolved,
    /// [`PaymentStore::bind_id`].
    BindId,
    /// [`PaymentStore::use_nonce`].
    UseNonce,
}

impl StoreOp {
    const ALL: [StoreOp; 6] = [
        StoreOp::Reserve,
        StoreOp::Get,
        StoreOp::Update,
        StoreOp::Release,
        StoreOp::Unresolved,
        StoreOp::BindId,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// What a faulty call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Fails without touching the store (a connection refused).
    Fail,
    /// Does its work, then fails: the answer was lost (a connection cut after the commit).
    LoseAnswer,
    /// Never answers (a store that hangs): only a bound around the call ends it.
    Hang,
    /// Does its work after this long (a slow commit).
    Delay(std::time::Duration),
}

#[derive(Debug, Clone, Copy)]
enum When {
    Nth(usize),
    From(usize),
}

/// A [`PaymentStore`] around another that fails, loses the answer of, or hangs on chosen calls of chosen
/// methods; counts every call. Calls are numbered per method from 1, from the store's creation.
pub struct FaultyStore {
    inner: Arc<dyn PaymentStore>,
    calls: [AtomicUsize; 6],
    plan: Mutex<Vec<(StoreOp, When, Fault)>>,
}

impl std::fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyStore")
            .field("plan", &*lock(&self.plan))
            .finish_non_exhaustive()
    }
}

impl FaultyStore {
    /// `inner`, without faults until some are injected.
    pub fn new(inner: Arc<dyn PaymentStore>) -> Arc<Self> {
        Arc::new(FaultyStore {
            inner,
            calls: Default::default(),
            plan: Mutex::new(Vec::new()),
        })
    }

    /// Call number `nth` (from 1) of `op` does `fault`.
    pub fn inject(&self, op: StoreOp, nth: usize, fault: Fault) {
        lock(&self.plan).push((op, When::Nth(nth), fault));
    }

    /// Every call of `op` from now on does `fault`, until [`heal`](Self::heal).
    pub fn always(&self, op: StoreOp, fault: Fault) {
        let next = self.calls(op) + 1;
        lock(&self.plan).push((op, When::From(next), fault));
    }

    /// No more faults: the store works again (a database back up).
    pub fn heal(&self) {
        lock(&self.plan).clear();
    }

    /// How many calls of `op` were made.
    pub fn calls(&self, op: StoreOp) -> usize {
        self.calls[op.index()].load(Ordering::SeqCst)
    }

    /// How many calls were made in all.
    pub fn all_calls(&self) -> usize {
        StoreOp::ALL.iter().map(|op| self.calls(*op)).sum()
    }

    fn fault(&self, op: StoreOp) -> Option<Fault> {
        let n = self.calls[op.index()].fetch_add(1, Ordering::SeqCst) + 1;
        lock(&self.plan)
            .iter()
            .find(|(o, when, _)| {
                *o == op
                    && match *when {
                        When::Nth(k) => k == n,
                        When::From(k) => n >= k,
                    }
            })
            .map(|(_, _, f)| *f)
    }

    /// `call` (made only when the call is to reach the store: some stores do their work when called).
    fn run<'a, T: Send + 'a>(
        &'a self,
        op: StoreOp,
        call: impl FnOnce() -> BoxFuture<'a, Result<T, StoreError>> + Send + 'a,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        match self.fault(op) {
            None => call(),
            Some(Fault::Fail) => Box::pin(std::future::ready(Err(injected(op, "failed")))),
            Some(Fault::LoseAnswer) => {
                let call = call();
                Box::pin(async move {
                    let _ = call.await;
                    Err(injected(op, "lost its answer"))
                })
            }
            Some(Fault::Hang) => Box::pin(std::future::pending()),
            Some(Fault::Delay(delay)) => Box::pin(async move {
                tokio::time::sleep(delay).await;
                call().await
            }),
        }
    }
}

/// The error of an injected fault.
#[derive(Debug, thiserror::Error)]
#[error("injected fault: {op:?} {what}")]
pub struct Injected {
    op: StoreOp,
    what: &'static str,
}

fn injected(op: StoreOp, what: &'static str) -> StoreError {
    StoreError::Backend(Box::new(Injected { op, what }))
}

impl PaymentStore for FaultyStore {
    fn reserve<'a>(
        &'a self,
        key: &'a PaymentKey,
        record: &'a PaymentRecord,
        now: u64,
    ) -> BoxFuture<'a, Result<Reservation, StoreError>> {
        self.run(StoreOp::Reserve, move || {
            self.inner.reserve(key, record, now)
        })
    }
    fn get<'a>(
        &'a self,
        key: &'a PaymentKey,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<PaymentRecord>, StoreError>> {
        self.run(StoreOp::Get, move || self.inner.get(key, now))
    }
    fn update<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
        record: &'a PaymentRecord,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.run(StoreOp::Update, move || {
            self.inner.update(key, expected, record)
        })
    }
    fn release<'a>(
        &'a self,
        key: &'a PaymentKey,
        expected: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.run(StoreOp::Release, move || self.inner.release(key, expected))
    }
    fn unresolved<'a>(
        &'a self,
        now: u64,
        stale_before: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(PaymentKey, PaymentRecord)>, StoreError>> {
        self.run(StoreOp::Unresolved, move || {
            self.inner.unresolved(now, stale_before, limit)
        })
    }
    fn bind_id<'a>(
        &'a self,
        id: &'a str,
        binding: &'a IdBinding,
        now: u64,
    ) -> BoxFuture<'a, Result<IdClaim, StoreError>> {
        self.run(StoreOp::BindId, move || {
            self.inner.bind_id(id, binding, now)
        })
    }
    fn use_nonce<'a>(
        &'a self,
        nonce: &'a alloy_primitives::B256,
        expires_at: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.run(StoreOp::UseNonce, move || {
            self.inner.use_nonce(nonce, expires_at, now)
        })
    }
}

/// What a [`LedgerSettler`]'s settlement does instead of answering truly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleFault {
    /// Moves the money, then answers [`SettleOutcome::Unknown`] with the transaction: a timeout after the
    /// broadcast.
    LoseAnswer,
    /// Moves nothing and answers [`SettleOutcome::Unknown`] without a transaction: a timeout before the
    /// broadcast reached anyone.
    NoAnswer,
    /// Moves the money at once and answers truly after this long (a receipt slow to come).
    Slow(std::time::Duration),
}

/// A settler over an in-memory ledger of authorizations, as the token contract keeps them
/// (`authorizationState`): an authorization moves money at most once, a second settlement of it fails with
/// the nonce used, and [`Settler::reconcile`] reads the ledger (it never moves money), as the on-chain
/// settler does; [`like_a_facilitator`](Self::like_a_facilitator) reconciles as a facilitator does
/// instead. Settlements can be made to lose their answer ([`SettleFault`]). [`moved`](Self::moved) counts
/// the money movements: the number a test compares with the purchases.
#[derive(Debug, Default)]
pub struct LedgerSettler {
    reconcile_settles: bool,
    spent: Mutex<HashSet<(Address, B256)>>,
    moved: AtomicUsize,
    settle_calls: AtomicUsize,
    plan: Mutex<HashMap<usize, SettleFault>>,
}

impl LedgerSettler {
    /// An empty ledger, without faults.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// An empty ledger whose [`Settler::reconcile`] settles as a facilitator's does (asked `/settle` again):
    /// an authorization already used answers its settlement again (idempotently), an unused one **moves the
    /// money now**. The engine must therefore ask it only about payments whose settlement had begun.
    pub fn like_a_facilitator() -> Arc<Self> {
        Arc::new(LedgerSettler {
            reconcile_settles: true,
            ..Self::default()
        })
    }

    /// Settlement call number `nth` (from 1) does `fault`.
    pub fn inject(&self, nth: usize, fault: SettleFault) {
        lock(&self.plan).insert(nth, fault);
    }

    /// How many times money moved.
    pub fn moved(&self) -> usize {
        self.moved.load(Ordering::SeqCst)
    }

    /// How many times `settle` was called (a refused second settlement counts here, not in
    /// [`moved`](Self::moved)).
    pub fn settle_calls(&self) -> usize {
        self.settle_calls.load(Ordering::SeqCst)
    }

    fn transaction(from: Address, nonce: B256) -> String {
        let mut bytes = [0u8; 32];
        bytes[..20].copy_from_slice(from.as_slice());
        bytes[20..].copy_from_slice(&nonce.as_slice()[..12]);
        format!("{}", B256::from(bytes))
    }

    fn key(request: &SettleRequest) -> (Address, B256) {
        (request.authorized.key.from, request.authorized.key.nonce)
    }
}

impl Settler for LedgerSettler {
    fn verify<'a>(
        &'a self,
        request: &'a SettleRequest,
    ) -> BoxFuture<'a, Result<VerifyOutcome, SettleError>> {
        let used = lock(&self.spent).contains(&Self::key(request));
        Box::pin(std::future::ready(Ok(if used {
            VerifyOutcome::Invalid {
                reason: crate::verify::RejectReason::NonceAlreadyUsed
                    .as_str()
                    .to_owned(),
                message: Some("the authorization is used on the ledger".to_owned()),
            }
        } else {
            VerifyOutcome::Valid
        })))
    }

    fn settle<'a>(&'a self, request: &'a SettleRequest) -> BoxFuture<'a, SettleOutcome> {
        let n = self.settle_calls.fetch_add(1, Ordering::SeqCst) + 1;
        let fault = lock(&self.plan).get(&n).copied();
        let (from, nonce) = Self::key(request);
        let transaction = Self::transaction(from, nonce);
        let delay = match fault {
            Some(SettleFault::Slow(d)) => Some(d),
            _ => None,
        };
        let outcome = if fault == Some(SettleFault::NoAnswer) {
            SettleOutcome::Unknown {
                message: "injected: no answer".to_owned(),
                transaction: None,
            }
        } else if !lock(&self.spent).insert((from, nonce)) {
            SettleOutcome::Failed {
                reason: crate::verify::RejectReason::NonceAlreadyUsed
                    .as_str()
                    .to_owned(),
                message: Some("the authorization is used on the ledger".to_owned()),
                authorization_still_usable: false,
            }
        } else {
            self.moved.fetch_add(1, Ordering::SeqCst);
            match fault {
                Some(SettleFault::LoseAnswer) => SettleOutcome::Unknown {
                    message: "injected: the answer was lost after the broadcast".to_owned(),
                    transaction: Some(transaction),
                },
                _ => SettleOutcome::Settled {
                    transaction,
                    payer: from,
                    network: request.wire_network(),
                },
            }
        };
        Box::pin(async move {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            outcome
        })
    }

    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, SettleError>> {
        Box::pin(std::future::ready(Ok(SupportedResponse::default())))
    }

    fn reconcile<'a>(
        &'a self,
        request: &'a SettleRequest,
        _transaction: Option<&'a str>,
    ) -> BoxFuture<'a, SettleOutcome> {
        let (from, nonce) = Self::key(request);
        let spent = lock(&self.spent).contains(&(from, nonce));
        if self.reconcile_settles && !spent {
            return self.settle(request);
        }
        let outcome = if spent {
            SettleOutcome::Settled {
                transaction: Self::transaction(from, nonce),
                payer: from,
                network: request.wire_network(),
            }
        } else {
            SettleOutcome::Failed {
                reason: "not_settled".to_owned(),
                message: Some("the ledger has no such settlement".to_owned()),
                authorization_still_usable: true,
            }
        };
        Box::pin(std::future::ready(outcome))
    }
}

/// What one call of a [`FaultyService`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    /// Answers the content with this status.
    Status(StatusCode),
    /// Returns the service's error (`Err`).
    Error,
    /// Panics while handling the request.
    Panic,
    /// Answers 200 and sends this many bytes of the content, then a body error.
    BreakBodyAfter(usize),
}

/// A protected service that answers its content with 200, except on the calls given another
/// [`Behavior`]; counts its calls. Calls are numbered from 1.
#[derive(Debug, Clone)]
pub struct FaultyService {
    content: Bytes,
    calls: Arc<AtomicUsize>,
    plan: Arc<Mutex<HashMap<usize, Behavior>>>,
}

/// The error a [`FaultyService`] returns for [`Behavior::Error`] and its body for
/// [`Behavior::BreakBodyAfter`].
#[derive(Debug, thiserror::Error)]
#[error("injected fault: {0}")]
pub struct ServiceFault(&'static str);

impl FaultyService {
    /// A service answering `content`.
    pub fn new(content: impl Into<Bytes>) -> Self {
        FaultyService {
            content: content.into(),
            calls: Arc::new(AtomicUsize::new(0)),
            plan: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Call number `nth` (from 1) behaves as `behavior`.
    pub fn on_call(&self, nth: usize, behavior: Behavior) -> &Self {
        lock(&self.plan).insert(nth, behavior);
        self
    }

    /// How many times it was called.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl<B> tower_service::Service<Request<B>> for FaultyService {
    type Response = Response<FaultyBody>;
    type Error = ServiceFault;
    type Future = std::future::Ready<Result<Response<FaultyBody>, ServiceFault>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<B>) -> Self::Future {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let behavior = lock(&self.plan)
            .get(&n)
            .copied()
            .unwrap_or(Behavior::Status(StatusCode::OK));
        let answer = |status, cut| {
            let mut res = Response::new(FaultyBody {
                content: Some(self.content.clone()),
                cut,
            });
            *res.status_mut() = status;
            Ok(res)
        };
        std::future::ready(match behavior {
            Behavior::Status(status) => answer(status, None),
            Behavior::Error => Err(ServiceFault("the service failed")),
            Behavior::Panic => panic!("injected fault: the service panicked"),
            Behavior::BreakBodyAfter(n) => answer(StatusCode::OK, Some(n)),
        })
    }
}

/// The body of a [`FaultyService`]'s answer: its content, or its first bytes and then an error.
#[derive(Debug)]
pub struct FaultyBody {
    content: Option<Bytes>,
    cut: Option<usize>,
}

impl Body for FaultyBody {
    type Data = Bytes;
    type Error = ServiceFault;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ServiceFault>>> {
        let Some(content) = self.content.take() else {
            return Poll::Ready(self.cut.take().map(|_| Err(ServiceFault("the body broke"))));
        };
        let sent = match self.cut {
            Some(n) => content.slice(..n.min(content.len())),
            None => content,
        };
        Poll::Ready(Some(Ok(Frame::data(sent))))
    }
}
