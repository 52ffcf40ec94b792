//! An x402 facilitator for other services: `POST /facilitator/verify`, `POST /facilitator/settle`,
//! `GET /facilitator/supported`, speaking the official facilitator API (`x402-protocol.md` part 6).
//!
//! Requests carry `{x402Version, paymentPayload, paymentRequirements}` for the `exact` scheme on EVM, v1 or v2.
//! Verification is x402-tower's ([`x402_tower::verify::check_authorization`] against an offer built from the
//! requirements sent): scheme, network, recipient, amount (v1: at least, v2: exactly), time window (including
//! the `validBefore` cap), then the USDC signature rules (65 bytes, `v` 27/28, low `s`, recovered == `from`),
//! then the settler's own checks ([`Settler::verify`]; the on-chain settler simulates
//! `transferWithAuthorization`, which catches balances, used nonces and payers with code). Settlement goes to
//! the same [`Settler`]; a `(chainId, asset, from, nonce)` replay guard refuses a second settlement of one
//! authorization (`invalid_exact_evm_nonce_already_used`) even with a settler that moves no money.
//!
//! Answers are always 200 with `isValid`/`success` false and the spec's error string for a bad payment; 400
//! only for a body that is not a facilitator request at all; 502 when the settler cannot be reached.
//!
//! ```no_run
//! use std::sync::Arc;
//! use x402_tower::settle::VerifyOnlySettler;
//!
//! let app: axum::Router = reference_server::facilitator::router(Arc::new(VerifyOnlySettler));
//! ```

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use alloy_primitives::{Address, Bytes, U256};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use x402_tower::network::{Network, Token, USDC_DECIMALS};
use x402_tower::offer::PaymentOffer;
use x402_tower::price::Price;
use x402_tower::proto::{
    PaymentPayload, PaymentRequirements, PaymentRequirementsV1, PaymentRequirementsV2,
    SCHEME_EXACT, SettleResponse, VerifyResponse,
};
use x402_tower::replay::{InMemoryReplayStore, ReplayKey, ReplayStore, Reservation};
use x402_tower::settle::{SettleOutcome, SettleRequest, Settler, VerifyOutcome};
use x402_tower::verify::{RejectReason, check_authorization, domain_separator, payload_from_json};

/// Largest facilitator request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

struct Facilitator {
    settler: Arc<dyn Settler>,
    replay: InMemoryReplayStore,
}

/// The facilitator routes (`/facilitator/verify`, `/facilitator/settle`, `/facilitator/supported`) over
/// `settler`. Merge it into the server's router.
pub fn router(settler: Arc<dyn Settler>) -> Router {
    let state = Arc::new(Facilitator {
        settler,
        replay: InMemoryReplayStore::default(),
    });
    Router::new()
        .route("/facilitator/verify", post(verify))
        .route("/facilitator/settle", post(settle))
        .route("/facilitator/supported", get(supported))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// A rejected payment: the spec's error string and a detail.
struct Invalid {
    reason: String,
    message: String,
    payer: Option<Address>,
}

impl Invalid {
    fn new(reason: impl Into<String>, message: impl Into<String>, payer: Option<Address>) -> Self {
        Invalid {
            reason: reason.into(),
            message: message.into(),
            payer,
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn bad_request(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": "invalid_request", "message": message})),
    )
        .into_response()
}

fn bad_gateway(message: String) -> Response {
    (
        StatusCode::BAD_GATEWAY,
        Json(json!({"error": "settler_unavailable", "message": message})),
    )
        .into_response()
}

/// Parses and checks a facilitator request locally; `Ok` is ready for the settler.
///
/// The payment is checked by x402-tower's own [`check_authorization`] against an offer built from the
/// requirements the caller sent (a facilitator has no offers of its own to match).
fn check(body: &Value) -> Result<SettleRequest, Invalid> {
    let payload_json = body.get("paymentPayload").cloned().unwrap_or(Value::Null);
    let requirements_json = body
        .get("paymentRequirements")
        .cloned()
        .unwrap_or(Value::Null);
    let payload = payload_from_json(&payload_json)
        .map_err(|r| Invalid::new(r.reason.as_str(), r.detail, None))?;
    let payer = Some(payload.exact().authorization.from);
    let invalid = |r: RejectReason, m: &str| Invalid::new(r.as_str(), m, payer);
    let bad_requirements = |e: serde_json::Error| {
        Invalid::new(
            "invalid_payment_requirements",
            format!("paymentRequirements: {e}"),
            payer,
        )
    };
    // The requirements of the payload's version, and the offer they describe.
    let (requirements, offer) = match &payload {
        PaymentPayload::V1(p) => {
            let r: PaymentRequirementsV1 =
                serde_json::from_value(requirements_json).map_err(bad_requirements)?;
            if p.network != r.network || p.scheme != r.scheme {
                return Err(invalid(
                    RejectReason::NoMatchingRequirements,
                    "payload and requirements differ",
                ));
            }
            let network = Network::from_v1_name(&r.network)
                .ok_or_else(|| invalid(RejectReason::InvalidNetwork, "unknown v1 network"))?;
            let terms = Terms {
                scheme: &r.scheme,
                asset: r.asset,
                pay_to: r.pay_to,
                amount: r.max_amount_required,
                max_timeout_seconds: r.max_timeout_seconds,
                extra: r.extra.as_ref(),
            };
            let offer = terms
                .offer(network)
                .map_err(|(reason, m)| Invalid::new(reason, m, payer))?;
            (PaymentRequirements::V1(r), offer)
        }
        PaymentPayload::V2(p) => {
            let r: PaymentRequirementsV2 =
                serde_json::from_value(requirements_json).map_err(bad_requirements)?;
            if p.accepted != r {
                return Err(invalid(
                    RejectReason::NoMatchingRequirements,
                    "accepted differs from the requirements",
                ));
            }
            let network: Network = r
                .network
                .parse()
                .map_err(|_| invalid(RejectReason::InvalidNetwork, "unknown CAIP-2 network"))?;
            let terms = Terms {
                scheme: &r.scheme,
                asset: r.asset,
                pay_to: r.pay_to,
                amount: r.amount,
                max_timeout_seconds: r.max_timeout_seconds,
                extra: r.extra.as_ref(),
            };
            let offer = terms
                .offer(network)
                .map_err(|(reason, m)| Invalid::new(reason, m, payer))?;
            (PaymentRequirements::V2(r), offer)
        }
    };
    let separator = domain_separator(offer.network.chain_id(), &offer.token);
    let signature = check_authorization(&payload, &offer, &separator, now())
        .map_err(|r| invalid(r.reason, r.detail))?;
    Ok(SettleRequest {
        payload,
        payload_json,
        requirements,
        offer,
        signature: Bytes::from(signature),
    })
}

/// The fields of v1 and v2 requirements that make an offer.
struct Terms<'a> {
    scheme: &'a str,
    asset: Address,
    pay_to: Address,
    amount: U256,
    max_timeout_seconds: u64,
    extra: Option<&'a Value>,
}

impl Terms<'_> {
    /// The offer these terms describe on `network`; the token's EIP-712 name and version come from `extra`.
    fn offer(&self, network: Network) -> Result<PaymentOffer, (&'static str, &'static str)> {
        if self.scheme != SCHEME_EXACT {
            return Err((RejectReason::InvalidScheme.as_str(), "scheme is not exact"));
        }
        let field = |k: &str| self.extra.and_then(|e| e.get(k)).and_then(Value::as_str);
        let (Some(name), Some(version)) = (field("name"), field("version")) else {
            return Err((
                "invalid_payment_requirements",
                "extra.name and extra.version are required",
            ));
        };
        let token = Token::new(self.asset, name, version, USDC_DECIMALS);
        Ok(
            PaymentOffer::new(network, token, self.pay_to, Price::from(self.amount))
                .max_timeout_seconds(self.max_timeout_seconds),
        )
    }
}

fn replay_key(request: &SettleRequest) -> ReplayKey {
    let auth = &request.payload.exact().authorization;
    ReplayKey {
        chain_id: request.offer.network.chain_id(),
        asset: request.offer.token.address,
        from: auth.from,
        nonce: auth.nonce,
    }
}

fn verify_response(invalid: Option<Invalid>, payer: Option<Address>) -> Json<VerifyResponse> {
    Json(match invalid {
        None => VerifyResponse {
            is_valid: true,
            invalid_reason: None,
            invalid_message: None,
            payer: payer.map(|p| p.to_string()),
        },
        Some(i) => VerifyResponse {
            is_valid: false,
            invalid_reason: Some(i.reason),
            invalid_message: Some(i.message),
            payer: i.payer.or(payer).map(|p| p.to_string()),
        },
    })
}

async fn verify(
    State(f): State<Arc<Facilitator>>,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Ok(Json(body)) = body else {
        return bad_request("body is not JSON");
    };
    let request = match check(&body) {
        Ok(r) => r,
        Err(invalid) => return verify_response(Some(invalid), None).into_response(),
    };
    let payer = Some(request.payer());
    match f.settler.verify(&request).await {
        Ok(VerifyOutcome::Valid) => verify_response(None, payer).into_response(),
        Ok(VerifyOutcome::Invalid { reason, message }) => verify_response(
            Some(Invalid::new(reason, message.unwrap_or_default(), payer)),
            payer,
        )
        .into_response(),
        Err(e) => bad_gateway(e.to_string()),
    }
}

fn settle_failure(
    reason: impl Into<String>,
    message: impl Into<String>,
    network: String,
    payer: Option<Address>,
) -> Response {
    Json(SettleResponse {
        success: false,
        error_reason: Some(reason.into()),
        error_message: Some(message.into()),
        transaction: String::new(),
        network,
        payer: payer.map(|p| p.to_string()),
    })
    .into_response()
}

async fn settle(
    State(f): State<Arc<Facilitator>>,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Ok(Json(body)) = body else {
        return bad_request("body is not JSON");
    };
    let wire_network = body
        .pointer("/paymentRequirements/network")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let request = match check(&body) {
        Ok(r) => r,
        Err(i) => return settle_failure(i.reason, i.message, wire_network, i.payer),
    };
    let payer = Some(request.payer());
    let key = replay_key(&request);
    let expires =
        u64::try_from(request.payload.exact().authorization.valid_before).unwrap_or(u64::MAX);
    match f.replay.reserve(&key, expires, now()).await {
        Ok(Reservation::Reserved) => {}
        Ok(_) => {
            return settle_failure(
                RejectReason::NonceAlreadyUsed.as_str(),
                "this authorization was already presented for settlement",
                wire_network,
                payer,
            );
        }
        Err(e) => {
            return settle_failure(
                "unexpected_settle_error",
                e.to_string(),
                wire_network,
                payer,
            );
        }
    }
    // Check with the chain first (simulation), then settle.
    match f.settler.verify(&request).await {
        Ok(VerifyOutcome::Valid) => {}
        Ok(VerifyOutcome::Invalid { reason, message }) => {
            if reason != RejectReason::NonceAlreadyUsed.as_str() {
                let _ = f.replay.release(&key).await;
            }
            return settle_failure(reason, message.unwrap_or_default(), wire_network, payer);
        }
        Err(e) => {
            let _ = f.replay.release(&key).await;
            return bad_gateway(e.to_string());
        }
    }
    match f.settler.settle(&request).await {
        SettleOutcome::Settled {
            transaction,
            payer,
            network,
        } => {
            let _ = f.replay.mark_used(&key).await;
            Json(SettleResponse {
                success: true,
                error_reason: None,
                error_message: None,
                transaction,
                network,
                payer: Some(payer.to_string()),
            })
            .into_response()
        }
        SettleOutcome::Failed {
            reason,
            message,
            authorization_still_usable,
        } => {
            if authorization_still_usable {
                let _ = f.replay.release(&key).await;
            } else {
                let _ = f.replay.mark_used(&key).await;
            }
            settle_failure(reason, message.unwrap_or_default(), wire_network, payer)
        }
        // Outcome unknown: the key stays reserved; the caller gets a gateway error, not a verdict.
        SettleOutcome::Unknown { message } => {
            bad_gateway(format!("settlement outcome unknown: {message}"))
        }
    }
}

async fn supported(State(f): State<Arc<Facilitator>>) -> Response {
    match f.settler.supported().await {
        Ok(s) => Json(s).into_response(),
        Err(e) => bad_gateway(e.to_string()),
    }
}
