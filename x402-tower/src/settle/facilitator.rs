//! A remote x402 facilitator over HTTP.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tracing::{Instrument, debug, debug_span, warn};

use super::{SettleError, SettleOutcome, SettleRequest, Settler, VerifyOutcome};
use crate::boxed::BoxFuture;
use crate::proto::{PaymentRequirements, SettleResponse, SupportedResponse, VerifyResponse, wire};
use crate::settle::SETTLEMENT_PENDING;
use crate::verify::RejectReason;

/// Which facilitator endpoint a request goes to (for the auth-headers hook).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FacilitatorEndpoint {
    /// `POST /verify`.
    Verify,
    /// `POST /settle`.
    Settle,
    /// `GET /supported`.
    Supported,
}

impl FacilitatorEndpoint {
    /// Its method and path below the facilitator's base URL.
    fn route(self) -> (reqwest::Method, &'static str) {
        match self {
            FacilitatorEndpoint::Verify => (reqwest::Method::POST, "verify"),
            FacilitatorEndpoint::Settle => (reqwest::Method::POST, "settle"),
            FacilitatorEndpoint::Supported => (reqwest::Method::GET, "supported"),
        }
    }

    /// Whether asking twice changes nothing, so that a call cut off before its answer may be sent again:
    /// `/verify` and `/supported`. Never `/settle`: a facilitator that read it may have settled, and a
    /// second one would fail with "nonce already used" for a payment that moved money; a `/settle` without
    /// an answer is [`SettleOutcome::Unknown`], asked again by [`Settler::reconcile`].
    fn idempotent(self) -> bool {
        !matches!(self, FacilitatorEndpoint::Settle)
    }
}

/// How long a kept-alive connection to the facilitator may sit idle in the pool before it is closed.
const POOL_IDLE: Duration = Duration::from_secs(90);

type HeadersHook = Arc<dyn Fn(FacilitatorEndpoint) -> HeaderMap + Send + Sync>;

/// A [`Settler`] that calls a remote facilitator (`POST {base}/verify`, `POST {base}/settle`,
/// `GET {base}/supported`).
///
/// A timeout or an answer that is not the protocol's makes the layer answer 502; a settle call that times
/// out is [`SettleOutcome::Unknown`] (it may have been broadcast), so the payment key stays reserved.
///
/// TLS uses rustls with the `ring` provider, installed as the process default if none is installed yet.
///
/// # Connections
///
/// Calls go over HTTP/1.1 connections kept alive in the settler's pool (reqwest's: a connection idle for
/// 90 s is closed, and one the facilitator closed is not used again), so a busy server pays no TCP or TLS
/// handshake per purchase: through a facilitator on loopback without TLS, a new connection per call cost
/// 27% more CPU per purchase (docs/bench/reference-server-licensing.md). HTTP/2 is not used:
/// the pool already keeps one warm connection per concurrent call, and the reference server's facilitator
/// door serves HTTP/1.1 only. Clones share the pool.
///
/// A kept-alive connection can be closed by the facilitator, or a proxy in front of it, just as a request
/// crosses it (its idle timeout fires): the request then fails with no answer. A `/verify` or `/supported`
/// cut off so is sent once more, within the same timeout, on a new connection (asking twice changes nothing);
/// a timeout or a refused connection is not sent again. A `/settle` never is, since the facilitator may have
/// settled it: it is [`SettleOutcome::Unknown`], the client gets 402 `settlement_pending`, and the payment
/// is settled or confirmed by [`Settler::reconcile`] when the client resends it or the reconciler runs.
///
/// ```no_run
/// use std::time::Duration;
/// use x402_tower::settle::FacilitatorSettler;
///
/// let settler = FacilitatorSettler::builder("https://x402.org/facilitator")
///     .settle_timeout(Duration::from_secs(90))
///     .auth_headers(|_endpoint| {
///         let mut h = http::HeaderMap::new();
///         h.insert("authorization", http::HeaderValue::from_static("Bearer secret"));
///         h
///     })
///     .build()
///     .unwrap();
/// ```
#[derive(Clone)]
pub struct FacilitatorSettler {
    base: String,
    client: reqwest::Client,
    verify_timeout: Duration,
    settle_timeout: Duration,
    headers: Option<HeadersHook>,
}

impl std::fmt::Debug for FacilitatorSettler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FacilitatorSettler")
            .field("base", &self.base)
            .field("verify_timeout", &self.verify_timeout)
            .field("settle_timeout", &self.settle_timeout)
            .finish_non_exhaustive()
    }
}

/// Builder of a [`FacilitatorSettler`].
pub struct FacilitatorSettlerBuilder {
    base: String,
    verify_timeout: Duration,
    settle_timeout: Duration,
    connect_timeout: Duration,
    headers: Option<HeadersHook>,
}

impl std::fmt::Debug for FacilitatorSettlerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FacilitatorSettlerBuilder")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// A facilitator settler that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum FacilitatorConfigError {
    /// The base URL is not an absolute http(s) URL.
    #[error("facilitator URL {0:?} is not an absolute http(s) URL")]
    BadUrl(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

impl FacilitatorSettlerBuilder {
    /// Timeout of `/verify` and `/supported` (default 10 s).
    pub fn verify_timeout(mut self, t: Duration) -> Self {
        self.verify_timeout = t;
        self
    }

    /// Timeout of `/settle` (default 90 s, as the official clients: settlement waits for the chain).
    pub fn settle_timeout(mut self, t: Duration) -> Self {
        self.settle_timeout = t;
        self
    }

    /// TCP connect timeout (default 5 s).
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }

    /// Headers added to every call (authentication), computed per call.
    pub fn auth_headers(
        mut self,
        hook: impl Fn(FacilitatorEndpoint) -> HeaderMap + Send + Sync + 'static,
    ) -> Self {
        self.headers = Some(Arc::new(hook));
        self
    }

    /// Builds the settler.
    pub fn build(self) -> Result<FacilitatorSettler, FacilitatorConfigError> {
        let base = self.base.trim_end_matches('/').to_owned();
        let ok = match base.parse::<http::Uri>() {
            Ok(u) => matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some(),
            Err(_) => false,
        };
        if !ok {
            return Err(FacilitatorConfigError::BadUrl(self.base));
        }
        // reqwest is built with `rustls-no-provider`: make ring the default if nothing else was chosen.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .pool_idle_timeout(POOL_IDLE)
            .build()
            .map_err(FacilitatorConfigError::Client)?;
        Ok(FacilitatorSettler {
            base,
            client,
            verify_timeout: self.verify_timeout,
            settle_timeout: self.settle_timeout,
            headers: self.headers,
        })
    }
}

/// Largest facilitator answer read (bytes).
const MAX_ANSWER: usize = 64 * 1024;

impl FacilitatorSettler {
    /// A builder for the facilitator at `base` (e.g. `https://x402.org/facilitator`).
    pub fn builder(base: impl Into<String>) -> FacilitatorSettlerBuilder {
        FacilitatorSettlerBuilder {
            base: base.into(),
            verify_timeout: Duration::from_secs(10),
            settle_timeout: Duration::from_secs(90),
            connect_timeout: Duration::from_secs(5),
            headers: None,
        }
    }

    /// The `/verify` and `/settle` body: the payload exactly as the client sent it (its text, not a
    /// re-serialised tree) and the matched requirements.
    fn body(req: &SettleRequest) -> Result<Vec<u8>, SettleError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Outgoing<'a> {
            x402_version: u8,
            payment_payload: &'a RawValue,
            payment_requirements: &'a PaymentRequirements,
        }
        let payload: &RawValue = serde_json::from_str(&req.payload_text)
            .map_err(|e| SettleError::InvalidRequest(format!("payment payload: {e}")))?;
        serde_json::to_vec(&Outgoing {
            x402_version: req.payload.x402_version(),
            payment_payload: payload,
            payment_requirements: &req.requirements,
        })
        .map_err(|e| SettleError::InvalidRequest(format!("facilitator request: {e}")))
    }

    async fn call<T: DeserializeOwned>(
        &self,
        endpoint: FacilitatorEndpoint,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<T, SettleError> {
        let (method, path) = endpoint.route();
        let mut rb = self
            .client
            .request(method, format!("{}/{path}", self.base))
            .timeout(timeout);
        if let Some(hook) = &self.headers {
            rb = rb.headers(hook(endpoint));
        }
        if let Some(b) = body {
            rb = rb
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(b);
        }
        // The resend of a call cut off on a kept-alive connection (see the type's docs); only the endpoint
        // knows whether it may be sent twice, which reqwest's retry policy cannot see.
        let again = endpoint.idempotent().then(|| rb.try_clone()).flatten();
        let fut = async {
            let resp = match (rb.send().await, again) {
                (Err(e), Some(again)) if cut_off(&e) => {
                    debug!(error = %e, "facilitator call cut off on a kept-alive connection: sent again");
                    again.send().await
                }
                (sent, _) => sent,
            }
            .map_err(map_err)?;
            let status = resp.status();
            if resp.content_length().is_some_and(|l| l > MAX_ANSWER as u64) {
                return Err(SettleError::BadResponse("answer too large".into()));
            }
            let mut resp = resp;
            let mut bytes = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(map_err)? {
                if bytes.len() + chunk.len() > MAX_ANSWER {
                    return Err(SettleError::BadResponse("answer too large".into()));
                }
                bytes.extend_from_slice(&chunk);
            }
            // Some facilitators answer an invalid payment with a 4xx carrying the protocol's body: take the
            // body when it is one, whatever the status.
            serde_json::from_slice(&bytes).map_err(|e| {
                if status.is_success() {
                    SettleError::BadResponse(e.to_string())
                } else {
                    SettleError::BadResponse(format!("HTTP {status}"))
                }
            })
        };
        // Belt and braces: reqwest's timeout covers the body too, this covers everything else.
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(SettleError::Timeout),
        }
    }
}

/// Whether the connection broke under the request (closed or reset before an answer came), which is how a
/// kept-alive connection ends when the facilitator, or a proxy in front of it, closes it as the request
/// crosses. Not a timeout (the deadline covers both attempts), nor a refused connection (a new one was just
/// tried).
fn cut_off(error: &reqwest::Error) -> bool {
    if error.is_timeout() || error.is_connect() {
        return false;
    }
    let error: &(dyn std::error::Error + 'static) = error;
    std::iter::successors(Some(error), |e| e.source()).any(|e| {
        e.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_incomplete_message)
            || e.downcast_ref::<std::io::Error>().is_some_and(|e| {
                matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::BrokenPipe
                        | std::io::ErrorKind::UnexpectedEof
                )
            })
    })
}

fn map_err(e: reqwest::Error) -> SettleError {
    if e.is_timeout() {
        SettleError::Timeout
    } else {
        SettleError::Transport(e.to_string())
    }
}

impl Settler for FacilitatorSettler {
    fn verify<'a>(
        &'a self,
        request: &'a SettleRequest,
    ) -> BoxFuture<'a, Result<VerifyOutcome, SettleError>> {
        Box::pin(
            async move {
                let body = Self::body(request)?;
                let r: VerifyResponse = self
                    .call(FacilitatorEndpoint::Verify, Some(body), self.verify_timeout)
                    .await?;
                Ok(if r.is_valid {
                    VerifyOutcome::Valid
                } else {
                    VerifyOutcome::Invalid {
                        reason: r
                            .invalid_reason
                            .unwrap_or_else(|| "unexpected_verify_error".to_owned()),
                        message: r.invalid_message,
                    }
                })
            }
            .instrument(debug_span!("x402.facilitator.verify")),
        )
    }

    fn settle<'a>(&'a self, request: &'a SettleRequest) -> BoxFuture<'a, SettleOutcome> {
        Box::pin(
            async move {
                let body = match Self::body(request) {
                    Ok(b) => b,
                    Err(e) => {
                        return SettleOutcome::Failed {
                            reason: RejectReason::InvalidPayload.as_str().to_owned(),
                            message: Some(e.to_string()),
                            authorization_still_usable: true,
                        };
                    }
                };
                match self
                    .call::<SettleResponse>(
                        FacilitatorEndpoint::Settle,
                        Some(body),
                        self.settle_timeout,
                    )
                    .await
                {
                    Ok(r) if r.success => SettleOutcome::Settled {
                        transaction: r.transaction,
                        payer: r
                            .payer
                            .as_deref()
                            .and_then(wire::parse_address)
                            .unwrap_or_else(|| request.payer()),
                        network: if r.network.is_empty() {
                            request.wire_network()
                        } else {
                            r.network
                        },
                    },
                    Ok(r) if r.error_reason.as_deref() == Some(SETTLEMENT_PENDING) => {
                        SettleOutcome::Unknown {
                            message: r.error_message.unwrap_or_else(|| {
                                "the facilitator reports the settlement pending".to_owned()
                            }),
                            transaction: Some(r.transaction).filter(|t| !t.is_empty()),
                        }
                    }
                    Ok(r) => {
                        let reason = r
                            .error_reason
                            .unwrap_or_else(|| "unexpected_settle_error".to_owned());
                        // A facilitator that failed without a transaction did not spend the nonce, unless it
                        // says the nonce is spent.
                        let still_usable = r.transaction.is_empty()
                            && reason != RejectReason::NonceAlreadyUsed.as_str();
                        SettleOutcome::Failed {
                            reason,
                            message: r.error_message,
                            authorization_still_usable: still_usable,
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "facilitator settle failed");
                        SettleOutcome::Unknown {
                            message: e.to_string(),
                            transaction: None,
                        }
                    }
                }
            }
            .instrument(debug_span!("x402.facilitator.settle")),
        )
    }

    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, SettleError>> {
        Box::pin(self.call(FacilitatorEndpoint::Supported, None, self.verify_timeout))
    }

    fn settle_deadline(&self) -> Option<Duration> {
        Some(self.settle_timeout)
    }

    /// Asks `/settle` again with the identical payment (the facilitator settles it if nothing moved, or
    /// answers it idempotently). "Nonce already used" proves nothing here (the first attempt may have spent
    /// it), and neither does "validBefore has passed" (a facilitator that keeps no record can only refuse
    /// an expired payment): both stay unknown, and the reconciler asks again while the engine keeps the
    /// record ([`keep_after_expiry`](crate::engine::PaymentEngineBuilder::keep_after_expiry)).
    fn reconcile<'a>(
        &'a self,
        request: &'a SettleRequest,
        transaction: Option<&'a str>,
    ) -> BoxFuture<'a, SettleOutcome> {
        Box::pin(async move {
            match self.settle(request).await {
                SettleOutcome::Failed {
                    reason, message, ..
                } if reason == RejectReason::NonceAlreadyUsed.as_str()
                    || reason == RejectReason::ValidBefore.as_str() =>
                {
                    SettleOutcome::Unknown {
                        message: format!(
                            "the facilitator refuses the payment again ({reason}: {}); whether the first \
                             attempt moved money is unknown",
                            message.unwrap_or_default()
                        ),
                        transaction: transaction.map(str::to_owned),
                    }
                }
                other => other,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn neither_a_refused_connection_nor_a_timeout_counts_as_cut_off() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::new();
        // Nothing listens on port 1: refused.
        let refused = client.get("http://127.0.0.1:1/verify").send().await;
        let e = refused.expect_err("refused");
        assert!(e.is_connect() && !cut_off(&e), "{e:?}");
        // Accepted, never answered.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/verify", listener.local_addr().unwrap());
        let _held = tokio::spawn(async move { listener.accept().await });
        let late = client
            .get(url)
            .timeout(Duration::from_millis(100))
            .send()
            .await;
        let e = late.expect_err("timed out");
        assert!(e.is_timeout() && !cut_off(&e), "{e:?}");
    }

    #[test]
    fn only_settle_is_never_sent_twice() {
        assert!(FacilitatorEndpoint::Verify.idempotent());
        assert!(FacilitatorEndpoint::Supported.idempotent());
        assert!(!FacilitatorEndpoint::Settle.idempotent());
    }
}
