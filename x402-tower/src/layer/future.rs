//! [`ResponseFuture`]: drives pricing, checking, the inner service and settlement.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use pin_project_lite::pin_project;
use tower_service::Service;
use tracing::error;

use super::body::ResponseBody;
use super::config::{SettleTiming, Shared, offer_problem};
use super::flow::{self, Checked, PaidCtx, PostOutcome, Receipt};
use super::response::{
    PAYMENT_SIGNATURE, RequestInfo, X_PAYMENT, add_expose_headers, make_private, plain_error,
    prefers_html,
};
use crate::pricing::{BoxFuture, PriceDecision};
use crate::verify::CompiledOffer;

pin_project! {
    #[project = StateProj]
    enum State<F> {
        // Waiting for a dynamic price.
        Pricing { fut: BoxFuture<'static, PriceDecision> },
        // Decoding, verifying, reserving, maybe settling.
        Checking { fut: BoxFuture<'static, Checked> },
        // The inner service runs.
        Inner { #[pin] fut: F },
        // Settling (or releasing) with the inner response held.
        Post { fut: BoxFuture<'static, PostOutcome> },
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
        paid: Option<Box<PaidCtx>>,
        held: Option<Result<S::Response, S::Error>>,
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

/// Starts checking a charged request: a 402 right away when no payment came, else the check future.
fn start_check<B, F>(
    shared: &Arc<Shared>,
    offers: Arc<[CompiledOffer]>,
    req: &Request<B>,
) -> State<F> {
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let info = RequestInfo {
        resource_url: format!("{}{}", shared.base_url, path),
        wants_html: prefers_html(req.headers()),
    };
    let header = req
        .headers()
        .get(PAYMENT_SIGNATURE)
        .or_else(|| req.headers().get(X_PAYMENT))
        .cloned();
    match header {
        None => State::Early {
            response: Some(flow::no_payment(shared, &offers, &info)),
        },
        Some(h) => State::Checking {
            fut: Box::pin(flow::check(shared.clone(), offers, info, h)),
        },
    }
}

impl<S, ReqB> ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>>,
{
    pub(crate) fn new(shared: Arc<Shared>, inner: S, req: Request<ReqB>) -> Self {
        let state = match &shared.pricing {
            super::config::Pricing::Static(offers) => start_check(&shared, offers.clone(), &req),
            super::config::Pricing::Dynamic(source) => {
                let (parts, body) = req.into_parts();
                let fut = source.price(&parts);
                let req = Request::from_parts(parts, body);
                return ResponseFuture {
                    state: State::Pricing { fut },
                    shared,
                    req: Some(req),
                    inner: Some(inner),
                    paid: None,
                    held: None,
                };
            }
        };
        let early = matches!(state, State::Early { .. });
        ResponseFuture {
            state,
            shared,
            req: if early { None } else { Some(req) },
            inner: if early { None } else { Some(inner) },
            paid: None,
            held: None,
        }
    }
}

fn finish<B>(
    res: Response<B>,
    receipt: Option<Receipt>,
    expose: bool,
) -> Response<ResponseBody<B>> {
    let mut res = res.map(ResponseBody::inner);
    if let Some((name, value)) = receipt {
        let h = res.headers_mut();
        h.insert(name, value);
        make_private(h);
        if expose {
            add_expose_headers(h);
        }
    }
    res
}

impl<S, ReqB, ResB> Future for ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    type Output = Result<Response<ResponseBody<ResB>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let next = match this.state.as_mut().project() {
                StateProj::Pricing { fut } => match ready!(fut.as_mut().poll(cx)) {
                    PriceDecision::Free => None,
                    PriceDecision::Respond(r) => Some(State::Early { response: Some(r) }),
                    PriceDecision::Charge(offers) => {
                        let problem = offers
                            .iter()
                            .find_map(offer_problem)
                            .or(offers.is_empty().then_some("no offers"));
                        let req = this.req.as_ref();
                        match (problem, req) {
                            (Some(why), _) => {
                                error!(why, "the price source returned an invalid offer");
                                let r = plain_error(
                                    StatusCode::INTERNAL_SERVER_ERROR,
                                    "invalid price configuration",
                                );
                                Some(State::Early { response: Some(r) })
                            }
                            (None, Some(req)) => {
                                Some(start_check(this.shared, this.shared.compile(offers), req))
                            }
                            (None, None) => unreachable!("request taken before pricing finished"),
                        }
                    }
                },
                StateProj::Checking { fut } => match ready!(fut.as_mut().poll(cx)) {
                    Checked::Respond(r) => Some(State::Early { response: Some(r) }),
                    Checked::Paid(ctx) => {
                        if let Some(req) = this.req.as_mut() {
                            req.extensions_mut().insert(ctx.verified.clone());
                        }
                        *this.paid = Some(ctx);
                        None
                    }
                },
                StateProj::Inner { fut } => {
                    let res = ready!(fut.poll(cx));
                    let Some(ctx) = this.paid.take() else {
                        return Poll::Ready(res.map(|r| r.map(ResponseBody::inner)));
                    };
                    if this.shared.timing == SettleTiming::BeforeHandler {
                        let expose = this.shared.expose_headers;
                        return Poll::Ready(res.map(|r| finish(r, ctx.receipt, expose)));
                    }
                    let ok = matches!(&res, Ok(r) if r.status().as_u16() < 400);
                    let fut: BoxFuture<'static, PostOutcome> = if ok {
                        Box::pin(flow::settle_after(this.shared.clone(), ctx))
                    } else {
                        Box::pin(flow::release_after(this.shared.clone(), ctx))
                    };
                    *this.held = Some(res);
                    Some(State::Post { fut })
                }
                StateProj::Post { fut } => {
                    let outcome = ready!(fut.as_mut().poll(cx));
                    let held = this.held.take().expect("response held while settling");
                    return Poll::Ready(match outcome {
                        PostOutcome::Replace(r) => Ok(r.map(ResponseBody::early)),
                        PostOutcome::Pass(receipt) => {
                            held.map(|r| finish(r, receipt, this.shared.expose_headers))
                        }
                    });
                }
                StateProj::Early { response } => {
                    let r = response
                        .take()
                        .expect("ResponseFuture polled after completion");
                    return Poll::Ready(Ok(r.map(ResponseBody::early)));
                }
            };
            let next = match next {
                Some(s) => s,
                // Call the inner service (free route, or payment accepted).
                None => {
                    let mut inner = this.inner.take().expect("inner service called once");
                    let req = this.req.take().expect("request passed on once");
                    State::Inner {
                        fut: inner.call(req),
                    }
                }
            };
            this.state.set(next);
        }
    }
}
