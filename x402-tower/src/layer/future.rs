//! [`ResponseFuture`]: drives pricing, the engine, the inner service, and the engine again after it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use pin_project_lite::pin_project;
use tower_service::Service;
use tracing::error;

use super::body::ResponseBody;
use super::config::{Pricing, Shared};
use super::response::{
    RequestInfo, add_receipt, method_not_allowed, plain_error, prefers_html, render,
};
use crate::engine::{Attempt, Begin, Finish, PaymentEngine, Recording};
use crate::extensions::siwx::{Refusal, SignedIn};
use crate::extensions::terms::Terms;
use crate::header::{PAYMENT_SIGNATURE, X_PAYMENT};
use crate::pricing::{BoxFuture, PriceDecision};
use crate::scheme::CompiledOffer;
use crate::scheme::{Charge, ChargeError, SETTLEMENT_OVERRIDES};

pin_project! {
    #[project = StateProj]
    enum State<F> {
        // Waiting for a dynamic price.
        Pricing { fut: BoxFuture<'static, PriceDecision> },
        // The engine decodes, verifies, remembers, maybe settles.
        Checking { fut: BoxFuture<'static, Begin> },
        // A sign-in-with-x proof is checked (no payment).
        SigningIn { fut: BoxFuture<'static, Result<SignedIn, Refusal>> },
        // The inner service runs.
        Inner { #[pin] fut: F },
        // The engine settles (or releases) with the inner response held.
        Post { fut: BoxFuture<'static, Finish> },
        // The inner response is held until the settlement's writes (`recording`) are done.
        Recorded { receipt: Option<crate::proto::SettleResponse>, version: u8 },
        // An answer of the layer's own, ready.
        Early { response: Option<Response<Full<Bytes>>> },
    }
}

pin_project! {
    /// The response future of [`X402`](super::X402).
    pub struct ResponseFuture<S, ReqB>
    where
        S: Service<Request<ReqB>>,
    {
        #[pin]
        state: State<S::Future>,
        shared: Arc<Shared>,
        req: Option<Request<ReqB>>,
        // The inner service, already polled ready (see `X402::call`).
        inner: Option<S>,
        // What the answers of the layer are built from.
        offers: Option<Arc<[CompiledOffer]>>,
        info: Option<RequestInfo>,
        paid: Option<Unanswered>,
        held: Option<Result<S::Response, S::Error>>,
        // The writes of a settlement made before the inner service, running beside it (see
        // `engine::Recording`): polled first on every wake-up, awaited before the response is released.
        recording: Option<Recording>,
    }
}

impl<S, ReqB> std::fmt::Debug for ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

/// A charged request: a 402 right away when no payment came (or for HEAD), else the engine's future.
fn start_check<B, F>(
    shared: &Arc<Shared>,
    offers: &Arc<[CompiledOffer]>,
    info: &RequestInfo,
    req: &Request<B>,
) -> State<F> {
    let header = if req.method() == Method::HEAD {
        // HEAD has no content to pay for: it learns the price, and never spends a payment.
        None
    } else {
        req.headers()
            .get(PAYMENT_SIGNATURE)
            .or_else(|| req.headers().get(X_PAYMENT))
            .cloned()
    };
    match header {
        None if req.method() != Method::HEAD && shared.siwx.is_some() => {
            match req.headers().get(crate::extensions::siwx::HEADER).cloned() {
                Some(proof) => {
                    let shared = shared.clone();
                    let networks = networks(offers);
                    let resource = info.resource_url.clone();
                    State::SigningIn {
                        fut: Box::pin(async move {
                            let Some(siwx) = shared.siwx.as_ref() else {
                                return Err(Refusal::Unsupported);
                            };
                            let nets: Vec<&str> = networks.iter().map(String::as_str).collect();
                            let store = shared.engine.store();
                            siwx.check(
                                proof.as_bytes(),
                                &resource,
                                &nets,
                                &**store,
                                shared.engine.now(),
                            )
                            .await
                        }),
                    }
                }
                None => State::Early {
                    response: Some(shared.prebuilt.answer(shared, offers, info, true)),
                },
            }
        }
        None => State::Early {
            response: Some(shared.prebuilt.answer(shared, offers, info, false)),
        },
        Some(h) => {
            let shared = shared.clone();
            let offers = offers.clone();
            let resource = info.resource_url.clone();
            let settles_now = shared.route.timing == crate::payment::SettleTiming::BeforeHandler;
            let engine = shared.engine.clone();
            let context = crate::extensions::PaymentContext::of(
                &shared.extensions,
                &crate::extensions::RequestView::of(req),
            );
            let begin = async move {
                shared
                    .engine
                    .begin(&shared.route, &offers, &resource, h.as_bytes(), context)
                    .await
            };
            State::Checking {
                fut: if settles_now {
                    // It settles: a task of its own, so that a client going away cannot stop a
                    // settlement halfway (the record is written whatever becomes of the request).
                    let begin = engine.run_to_end(begin);
                    Box::pin(async move {
                        begin.await.unwrap_or_else(|| {
                            error!("the payment task panicked");
                            Begin::Answer(crate::engine::Answer::Unavailable {
                                status: 502,
                                message: "settlement failed",
                            })
                        })
                    })
                } else {
                    Box::pin(begin)
                },
            }
        }
    }
}

impl<S, ReqB> ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>>,
{
    pub(crate) fn new(shared: Arc<Shared>, inner: S, req: Request<ReqB>) -> Self {
        let mut fut = ResponseFuture {
            state: State::Early { response: None },
            shared,
            req: None,
            inner: None,
            offers: None,
            info: None,
            paid: None,
            held: None,
            recording: None,
        };
        let method = req.method();
        let sold =
            fut.shared.sells(method) || (method == Method::HEAD && fut.shared.sells(&Method::GET));
        if !sold {
            fut.state = State::Early {
                response: Some(method_not_allowed(&fut.shared.allow)),
            };
            return fut;
        }
        match &fut.shared.pricing {
            Pricing::Static(offers) => {
                let offers = offers.clone();
                let info = request_info(&fut.shared, &req);
                fut.state = start_check(&fut.shared, &offers, &info, &req);
                fut.offers = Some(offers);
                fut.info = Some(info);
            }
            Pricing::Dynamic(source) => {
                // The request's description is built only if the price source charges.
                let (parts, body) = req.into_parts();
                fut.state = State::Pricing {
                    fut: source.price(&parts),
                };
                fut.req = Some(Request::from_parts(parts, body));
                fut.inner = Some(inner);
                return fut;
            }
        }
        if matches!(fut.state, State::Checking { .. } | State::SigningIn { .. }) {
            fut.req = Some(req);
            fut.inner = Some(inner);
        }
        fut
    }
}

impl<S, ReqB, ResB> Future for ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    type Output = Result<Response<ResponseBody<ResB>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            if let Some(recording) = this.recording.as_mut()
                && recording.as_mut().poll(cx).is_ready()
            {
                *this.recording = None;
            }
            let next = match this.state.as_mut().project() {
                StateProj::Pricing { fut } => match ready!(fut.as_mut().poll(cx)) {
                    PriceDecision::Free => None,
                    PriceDecision::Respond(r) => Some(State::Early { response: Some(r) }),
                    PriceDecision::Charge(offers) => {
                        match (
                            offers.compiled(|l| this.shared.engine.compile(l)),
                            this.req.as_ref(),
                        ) {
                            (Err(why), _) => {
                                error!(why, "the price source returned an invalid offer");
                                let r = plain_error(
                                    StatusCode::INTERNAL_SERVER_ERROR,
                                    "invalid price configuration",
                                );
                                Some(State::Early { response: Some(r) })
                            }
                            (Ok(offers), Some(req)) => {
                                let info = request_info(this.shared, req);
                                let state = start_check(this.shared, &offers, &info, req);
                                *this.offers = Some(offers);
                                *this.info = Some(info);
                                Some(state)
                            }
                            (Ok(_), None) => {
                                let r = plain_error(
                                    StatusCode::INTERNAL_SERVER_ERROR,
                                    "request taken before pricing finished",
                                );
                                Some(State::Early { response: Some(r) })
                            }
                        }
                    }
                },
                StateProj::Checking { fut } => match ready!(fut.as_mut().poll(cx)) {
                    Begin::Answer(a) => Some(State::Early {
                        response: Some(render_for(this.shared, this.offers, this.info, a)),
                    }),
                    Begin::Serve(attempt, recording) => {
                        // Issue the settlement's writes before the inner service is called.
                        *this.recording = recording
                            .and_then(|mut r| r.as_mut().poll(cx).is_pending().then_some(r));
                        if let Some(req) = this.req.as_mut() {
                            req.extensions_mut().insert(attempt.verified.clone());
                        }
                        *this.paid = Some(Unanswered::new(attempt, this.shared.clone()));
                        None
                    }
                },
                StateProj::SigningIn { fut } => match ready!(fut.as_mut().poll(cx)) {
                    Ok(signed) => {
                        tracing::info!(address = %signed.address, resource = %signed.resource_url,
                            "signed in with x: served without a payment");
                        if let Some(req) = this.req.as_mut() {
                            req.extensions_mut().insert(signed);
                        }
                        None
                    }
                    Err(refusal) => {
                        let r = match (this.offers.as_ref(), this.info.as_ref()) {
                            (Some(o), Some(i)) => {
                                this.shared.engine.metrics.payment_required();
                                super::response::fresh_sign_in_402(
                                    this.shared,
                                    o,
                                    i,
                                    refusal.as_str(),
                                    this.shared.engine.now(),
                                )
                            }
                            _ => plain_error(StatusCode::INTERNAL_SERVER_ERROR, "request lost"),
                        };
                        Some(State::Early { response: Some(r) })
                    }
                },
                StateProj::Inner { fut } => {
                    let mut res = ready!(fut.poll(cx));
                    // What the service used (for a scheme that settles that); never sent on.
                    let charge = res.as_mut().ok().and_then(take_charge);
                    let Some(mut attempt) = this.paid.take().and_then(Unanswered::disarm) else {
                        return Poll::Ready(res.map(|r| r.map(ResponseBody::inner)));
                    };
                    let served = matches!(&res, Ok(r) if r.status().as_u16() < 400);
                    let expose = this.shared.expose_headers;
                    if let Some(receipt) =
                        PaymentEngine::finish_now(&this.shared.route, &mut attempt)
                    {
                        let version = attempt.verified.x402_version;
                        if this.recording.is_none() {
                            return Poll::Ready(
                                res.map(|r| add_receipt(r, version, receipt, expose)),
                            );
                        }
                        *this.held = Some(res);
                        Some(State::Recorded { receipt, version })
                    } else {
                        let shared = this.shared.clone();
                        *this.held = Some(res);
                        // A task of its own: a client that goes away mid-settlement cannot stop it before
                        // its outcome is written.
                        let finish = this.shared.engine.run_to_end(async move {
                            shared
                                .engine
                                .finish(&shared.route, attempt, served, charge)
                                .await
                        });
                        Some(State::Post {
                            fut: Box::pin(async move {
                                finish.await.unwrap_or_else(|| {
                                    error!("the settlement task panicked");
                                    Finish::Replace(crate::engine::Answer::Unavailable {
                                        status: 502,
                                        message: "settlement failed",
                                    })
                                })
                            }),
                        })
                    }
                }
                StateProj::Recorded { receipt, version } => {
                    if this.recording.is_some() {
                        // Polled above: woken when the writes are done.
                        return Poll::Pending;
                    }
                    let Some(held) = this.held.take() else {
                        let r = plain_error(StatusCode::INTERNAL_SERVER_ERROR, "response lost");
                        return Poll::Ready(Ok(r.map(ResponseBody::early)));
                    };
                    let (receipt, version) = (receipt.take(), *version);
                    let expose = this.shared.expose_headers;
                    return Poll::Ready(held.map(|r| add_receipt(r, version, receipt, expose)));
                }
                StateProj::Post { fut } => {
                    let outcome = ready!(fut.as_mut().poll(cx));
                    let Some(held) = this.held.take() else {
                        let r = plain_error(StatusCode::INTERNAL_SERVER_ERROR, "response lost");
                        return Poll::Ready(Ok(r.map(ResponseBody::early)));
                    };
                    return Poll::Ready(match outcome {
                        Finish::Replace(a) => {
                            Ok(render_for(this.shared, this.offers, this.info, a)
                                .map(ResponseBody::early))
                        }
                        Finish::Pass(receipt, version) => held
                            .map(|r| add_receipt(r, version, receipt, this.shared.expose_headers)),
                    });
                }
                StateProj::Early { response } => {
                    let r = response.take().unwrap_or_else(|| {
                        plain_error(StatusCode::INTERNAL_SERVER_ERROR, "polled after completion")
                    });
                    return Poll::Ready(Ok(r.map(ResponseBody::early)));
                }
            };
            let next = match next {
                Some(s) => s,
                // Call the inner service (free route, or payment accepted).
                None => match (this.inner.take(), this.req.take()) {
                    (Some(mut inner), Some(req)) => State::Inner {
                        fut: inner.call(req),
                    },
                    _ => State::Early {
                        response: Some(plain_error(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "inner service already called",
                        )),
                    },
                },
            };
            this.state.set(next);
        }
    }
}

/// An admitted payment whose request has not been answered yet. Dropped armed (the client went away, or the
/// protected service panicked, before an answer), a payment that was not settled yet is released in the
/// background, as if the service had failed: nothing was charged, and the buyer's resend is served at once
/// instead of waiting for the record to turn stale. A settled one (before the handler, or a redelivery) has
/// nothing to undo: its resend is delivered again.
struct Unanswered {
    attempt: Option<Box<Attempt>>,
    shared: Arc<Shared>,
}

impl Unanswered {
    fn new(attempt: Box<Attempt>, shared: Arc<Shared>) -> Self {
        Unanswered {
            attempt: Some(attempt),
            shared,
        }
    }

    /// The attempt, for the door to finish: nothing is done on drop any more.
    fn disarm(mut self) -> Option<Box<Attempt>> {
        self.attempt.take()
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        let Some(mut attempt) = self.attempt.take() else {
            return;
        };
        if PaymentEngine::finish_now(&self.shared.route, &mut attempt).is_some() {
            return;
        }
        if tokio::runtime::Handle::try_current().is_err() {
            // Without a runtime the record stays in flight; it turns stale and is reconciled (released).
            tracing::warn!(payer = %attempt.verified.payer, "request dropped before its answer; its payment record is reconciled once stale");
            return;
        }
        tracing::info!(payer = %attempt.verified.payer, "request dropped before its answer: its payment is released, nothing was charged");
        let shared = self.shared.clone();
        // Spawned at once; nobody waits for it.
        drop(self.shared.engine.run_to_end(async move {
            shared
                .engine
                .finish(&shared.route, attempt, false, None)
                .await;
        }));
    }
}

/// The CAIP-2 networks of `offers`.
/// The charge a response reports ([`Charge`] in its extensions, else the `Settlement-Overrides` header),
/// taken out of it: the header never leaves.
fn take_charge<B>(response: &mut Response<B>) -> Option<Result<Charge, ChargeError>> {
    let header = Charge::from_overrides(response.headers());
    response.headers_mut().remove(SETTLEMENT_OVERRIDES);
    response
        .extensions_mut()
        .remove::<Charge>()
        .map(Ok)
        .or(header)
}

fn networks(offers: &[CompiledOffer]) -> Vec<String> {
    let mut n: Vec<String> = offers
        .iter()
        .map(|o| o.offer.network.caip2().to_owned())
        .collect();
    n.dedup();
    n
}

/// What the layer's answers need to know of the request.
fn request_info<B>(shared: &Shared, req: &Request<B>) -> RequestInfo {
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let wants_html = !matches!(shared.paywall, crate::layer::paywall::Paywall::Off)
        && prefers_html(req.headers());
    RequestInfo {
        resource_url: format!("{}{}", shared.base_url, path),
        wants_html,
        terms: shared
            .terms_per_request
            .then(|| req.extensions().get::<std::sync::Arc<Terms>>().cloned())
            .flatten(),
        paywall: wants_html
            .then(|| {
                req.extensions()
                    .get::<std::sync::Arc<crate::layer::paywall::PaywallDetails>>()
                    .cloned()
            })
            .flatten(),
    }
}

fn render_for(
    shared: &Shared,
    offers: &Option<Arc<[CompiledOffer]>>,
    info: &Option<RequestInfo>,
    answer: crate::engine::Answer,
) -> Response<Full<Bytes>> {
    let empty: Arc<[CompiledOffer]> = Arc::from(Vec::new());
    let offers = offers.as_ref().unwrap_or(&empty);
    match info {
        Some(info) => render(shared, offers, info, answer),
        None => plain_error(StatusCode::INTERNAL_SERVER_ERROR, "request lost"),
    }
}
