//! An x402 facilitator for other services: `POST /facilitator/verify`, `POST /facilitator/settle`,
//! `GET /facilitator/supported`, speaking the official facilitator API (`x402-protocol.md` part 6).
//!
//! Requests carry `{x402Version, paymentPayload, paymentRequirements}` for the `exact` scheme on EVM, v1 or v2.
//! Verification is x402-tower's: scheme, network, recipient, amount (v1: at least, v2: exactly), time window,
//! then the USDC signature rules ([`x402_tower::verify::check_signature`]: 65 bytes, `v` 27/28, low `s`,
//! recovered == `from`), then the settler's own checks ([`Settler::verify`]; the on-chain settler simulates
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
use x402_tower::network::{Network, Token};
use x402_tower::offer::PaymentOffer;
use x402_tower::price::Price;
use x402_tower::proto::{
    PaymentPayload, PaymentRequirements, PaymentRequirementsV1, PaymentRequirementsV2,
    SCHEME_EXACT, SettleResponse, VerifyResponse,
};
use x402_tower::replay::{InMemoryReplayStore, ReplayKey, ReplayStore, Reservation};
use x402_tower::settle::{SettleOutcome, SettleRequest, Settler, VerifyOutcome};
use x402_tower::verify::{
    RejectReason, VALID_BEFORE_MARGIN, VALID_BEFORE_SKEW, check_signature, domain_separator,
    parse_signature_hex,
};

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
fn check(body: &Value) -> Result<SettleRequest, Invalid> {
    let payload_json = body.get("paymentPayload").cloned().unwrap_or(Value::Null);
    let requirements_json = body
        .get("paymentRequirements")
        .cloned()
        .unwrap_or(Value::Null);
    let invalid_payload = |m: &str| Invalid::new(RejectReason::InvalidPayload.as_str(), m, None);
    let payload = match payload_json.get("x402Version").and_then(Value::as_u64) {
        Some(1) => serde_json::from_value(payload_json.clone())
            .map(PaymentPayload::V1)
            .map_err(|e| invalid_payload(&format!("not a v1 exact/EVM payload: {e}")))?,
        Some(2) => serde_json::from_value(payload_json.clone())
            .map(PaymentPayload::V2)
            .map_err(|e| invalid_payload(&format!("not a v2 exact/EVM payload: {e}")))?,
        _ => {
            return Err(Invalid::new(
                RejectReason::InvalidX402Version.as_str(),
                "x402Version must be 1 or 2",
                None,
            ));
        }
    };
    let auth = payload.exact().authorization.clone();
    let payer = Some(auth.from);
    let invalid = |r: RejectReason, m: &str| Invalid::new(r.as_str(), m, payer);
    let bad_requirements = |e: serde_json::Error| {
        Invalid::new(
            "invalid_payment_requirements",
            format!("paymentRequirements: {e}"),
            payer,
        )
    };
    // Requirements of the payload's version; the network, amount and token they name.
    let (requirements, network, amount, asset, pay_to, timeout, extra, scheme) = match &payload {
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
            let parts = (
                r.max_amount_required,
                r.asset,
                r.pay_to,
                r.max_timeout_seconds,
                r.extra.clone(),
                r.scheme.clone(),
            );
            (
                PaymentRequirements::V1(r),
                network,
                parts.0,
                parts.1,
                parts.2,
                parts.3,
                parts.4,
                parts.5,
            )
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
            let parts = (
                r.amount,
                r.asset,
                r.pay_to,
                r.max_timeout_seconds,
                r.extra.clone(),
                r.scheme.clone(),
            );
            (
                PaymentRequirements::V2(r),
                network,
                parts.0,
                parts.1,
                parts.2,
                parts.3,
                parts.4,
                parts.5,
            )
        }
    };
    if scheme != SCHEME_EXACT {
        return Err(invalid(RejectReason::InvalidScheme, "scheme is not exact"));
    }
    let name = extra
        .as_ref()
        .and_then(|e| e.get("name"))
        .and_then(Value::as_str);
    let version = extra
        .as_ref()
        .and_then(|e| e.get("version"))
        .and_then(Value::as_str);
    let (Some(name), Some(version)) = (name, version) else {
        return Err(Invalid::new(
            "invalid_payment_requirements",
            "extra.name and extra.version are required",
            payer,
        ));
    };
    let token = Token::new(asset, name, version, 6);
    if auth.to != pay_to {
        return Err(invalid(
            RejectReason::RecipientMismatch,
            "authorization.to is not payTo",
        ));
    }
    match payload {
        PaymentPayload::V1(_) if auth.value < amount => {
            return Err(invalid(
                RejectReason::ValueTooLow,
                "authorization.value is below maxAmountRequired",
            ));
        }
        PaymentPayload::V2(_) if auth.value != amount => {
            return Err(invalid(
                RejectReason::ValueMismatch,
                "authorization.value differs from amount",
            ));
        }
        _ => {}
    }
    let now = now();
    if auth.valid_after > U256::from(now) {
        return Err(invalid(
            RejectReason::ValidAfter,
            "validAfter is in the future",
        ));
    }
    if auth.valid_before < U256::from(now + VALID_BEFORE_MARGIN) {
        return Err(invalid(
            RejectReason::ValidBefore,
            "validBefore has passed or is too close",
        ));
    }
    // The replay store keeps a key until validBefore: refuse one further ahead than the offer allows.
    if auth.valid_before > U256::from(now) + U256::from(timeout) + U256::from(VALID_BEFORE_SKEW) {
        return Err(invalid(
            RejectReason::ValidBefore,
            "validBefore is further ahead than maxTimeoutSeconds allows",
        ));
    }
    let signature = parse_signature_hex(&payload.exact().signature)
        .ok_or_else(|| invalid(RejectReason::Signature, "signature is not 0x-prefixed hex"))?;
    check_signature(
        &auth,
        &signature,
        &domain_separator(network.chain_id(), &token),
    )
    .map_err(|r| {
        invalid(
            r,
            "signature is not a canonical 65-byte signature by authorization.from",
        )
    })?;
    let offer =
        PaymentOffer::new(network, token, pay_to, Price::from(amount)).max_timeout_seconds(timeout);
    Ok(SettleRequest {
        payload,
        payload_json,
        requirements,
        offer,
        signature: Bytes::from(signature),
    })
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
