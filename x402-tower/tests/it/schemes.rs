//! A scheme added from outside the crate, through the public trait only: sold beside `exact`, under every
//! money rule of the engine (a resend redelivered, a replay refused, concurrent copies settled once, the
//! facilitator door sharing the records, a failing handler charging nothing).

use std::sync::Arc;

use alloy_primitives::{Address, B256, U256, keccak256};
use http::StatusCode;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tower::Layer;
use x402_tower::scheme::{Authorized, Check, Prepared, Scheme, SchemeOffer};
use x402_tower::store::PaymentKey;
use x402_tower::verify::{RejectReason, Rejection};

use crate::support::*;

/// A toy scheme: the payer proves the payment with `keccak256(secret ‖ payer ‖ nonce ‖ amount)`, a code a
/// settler shares with it (a real scheme checks a signature). Its nonces live in a contract of their own.
#[derive(Debug)]
struct Voucher {
    secret: [u8; 4],
}

const VOUCHERS: Address = Address::repeat_byte(0xee);

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct VoucherPayload {
    payer: Address,
    nonce: B256,
    #[serde(with = "x402_tower::proto::wire::decimal")]
    amount: U256,
    valid_before: u64,
    proof: B256,
}

impl Voucher {
    fn proof(&self, payer: Address, nonce: B256, amount: U256) -> B256 {
        keccak256(
            [
                &self.secret[..],
                payer.as_slice(),
                nonce.as_slice(),
                &amount.to_be_bytes::<32>(),
            ]
            .concat(),
        )
    }
}

impl Scheme for Voucher {
    fn name(&self) -> &'static str {
        "voucher"
    }

    fn sells(&self, offer: &x402_tower::PaymentOffer) -> bool {
        offer.scheme == "voucher"
    }

    fn extra(&self, _: &x402_tower::PaymentOffer, extra: &mut serde_json::Map<String, Value>) {
        extra.insert("voucherContract".into(), VOUCHERS.to_string().into());
    }

    fn prepare(&self, offer: SchemeOffer<'_>) -> Result<Prepared, &'static str> {
        Ok(Prepared::new(offer.offer.amount.atomic_units()))
    }

    fn read(
        &self,
        payload: &RawValue,
        offer: &x402_tower::PaymentOffer,
    ) -> Result<Authorized, Rejection> {
        let p: VoucherPayload = serde_json::from_str(payload.get())
            .map_err(|e| Rejection::unreadable("not a voucher payload", e))?;
        let key = PaymentKey {
            chain_id: offer.network.chain_id(),
            nonce_space: VOUCHERS,
            from: p.payer,
            nonce: p.nonce,
        };
        Ok(Authorized::new(
            self.name(),
            key,
            p.amount,
            p.valid_before,
            p,
        ))
    }

    fn check(&self, paid: &Authorized, check: Check<'_>) -> Result<B256, Rejection> {
        let p: &VoucherPayload = paid
            .details()
            .ok_or_else(|| Rejection::new(RejectReason::InvalidPayload, "not a voucher payload"))?;
        if Some(&p.amount) != check.prepared.get::<U256>() {
            return Err(Rejection::new(RejectReason::ValueMismatch, "not the price"));
        }
        if p.valid_before < check.now + 6 {
            return Err(Rejection::new(RejectReason::ValidBefore, "expired"));
        }
        if p.proof != self.proof(p.payer, p.nonce, p.amount) {
            return Err(Rejection::new(RejectReason::Signature, "wrong proof")
                .with_code("invalid_voucher_proof"));
        }
        Ok(keccak256(
            [p.proof.as_slice(), &p.valid_before.to_be_bytes()].concat(),
        ))
    }
}

fn voucher() -> Arc<Voucher> {
    Arc::new(Voucher { secret: *b"toy!" })
}

/// A layer selling `/r` (and every path) for USDC `exact` or a voucher, over an inner service answering
/// `status`, settling with a scripted settler.
#[expect(
    clippy::type_complexity,
    reason = "the inner service's type can only be named as `impl Service`"
)]
fn selling(
    status: StatusCode,
) -> (
    Inner,
    Arc<Scripted>,
    Arc<x402_tower::PaymentEngine>,
    x402_tower::layer::X402<
        impl tower::Service<
            http::Request<http_body_util::Full<bytes::Bytes>>,
            Response = http::Response<http_body_util::Full<bytes::Bytes>>,
            Error = std::convert::Infallible,
            Future: Send,
        > + Clone
        + Send
        + 'static,
    >,
) {
    let inner = Inner::new();
    let settler = Scripted::new(settled_outcome());
    let engine = Arc::new(
        x402_tower::PaymentEngine::builder()
            .settler(settler.clone())
            .scheme(voucher())
            .build()
            .unwrap(),
    );
    let svc = config()
        .offer(offer().scheme("voucher"))
        .engine(engine.clone())
        .build()
        .unwrap()
        .layer(inner.service(status));
    (inner, settler, engine, svc)
}

/// A v2 voucher payment for the 402's `accepted` entry.
fn voucher_payment(accepted: &Value, nonce: u8, proof: Option<B256>) -> Value {
    let amount = U256::from(10_000u64);
    let nonce = B256::repeat_byte(nonce);
    let proof = proof.unwrap_or_else(|| voucher().proof(ACCOUNT0, nonce, amount));
    json!({
        "x402Version": 2,
        "accepted": accepted,
        "payload": {
            "payer": ACCOUNT0,
            "nonce": nonce,
            "amount": amount.to_string(),
            "validBefore": now() + 60,
            "proof": proof,
        },
    })
}

/// The 402's voucher offer.
async fn voucher_offer<S, B>(svc: S) -> Value
where
    S: tower::Service<
            http::Request<http_body_util::Full<bytes::Bytes>>,
            Response = http::Response<B>,
        > + Send
        + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: std::fmt::Debug,
{
    let first = send(svc, req("/r", &[])).await;
    assert_eq!(first.status, StatusCode::PAYMENT_REQUIRED);
    let accepts = first.payment_required()["accepts"].clone();
    assert_eq!(accepts[0]["scheme"], "exact", "{accepts}");
    assert_eq!(accepts[1]["scheme"], "voucher", "{accepts}");
    assert_eq!(
        accepts[1]["extra"]["voucherContract"],
        VOUCHERS.to_string(),
        "the scheme's extra"
    );
    accepts[1].clone()
}

#[tokio::test]
async fn a_scheme_added_from_outside_sells_under_the_engines_money_rules() {
    let (inner, settler, _, svc) = selling(StatusCode::OK);
    let accepted = voucher_offer(svc.clone()).await;
    let paid = b64(&voucher_payment(&accepted, 1, None));

    let first = send(svc.clone(), req("/r", &[("payment-signature", &paid)])).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.error());
    assert_eq!(first.json()["payer"], ACCOUNT0.to_checksum(None));
    assert_eq!(settler.settles(), 1);

    // The identical payment resent: delivered again, the same receipt, no second settlement.
    let again = send(svc.clone(), req("/r", &[("payment-signature", &paid)])).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(
        again.receipt("payment-response"),
        first.receipt("payment-response")
    );
    // For another resource: a replay.
    let other = send(svc.clone(), req("/other", &[("payment-signature", &paid)])).await;
    assert_eq!(other.error(), "invalid_exact_evm_nonce_already_used");
    assert_eq!((settler.settles(), inner.calls()), (1, 2));

    // The scheme's own refusal, in its own words; nothing reserved or settled.
    let forged = b64(&voucher_payment(&accepted, 2, Some(B256::repeat_byte(9))));
    let refused = send(svc.clone(), req("/r", &[("payment-signature", &forged)])).await;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(refused.error(), "invalid_voucher_proof");
    // Garbage in its payload: invalid_payload, saying what.
    let mut garbage = voucher_payment(&accepted, 3, None);
    garbage["payload"]["amount"] = json!(12);
    let refused = send(
        svc.clone(),
        req("/r", &[("payment-signature", &b64(&garbage))]),
    )
    .await;
    assert!(
        refused
            .error()
            .starts_with("invalid_payload: not a voucher payload"),
        "{}",
        refused.error()
    );
    // A scheme nobody sells.
    let mut unknown = voucher_payment(&accepted, 4, None);
    unknown["accepted"]["scheme"] = json!("upto");
    let refused = send(
        svc.clone(),
        req("/r", &[("payment-signature", &b64(&unknown))]),
    )
    .await;
    assert_eq!(refused.error(), "invalid_scheme");
    assert_eq!((settler.settles(), inner.calls()), (1, 2));

    // USDC `exact` is still sold beside it.
    let usdc = send(svc, req("/r", &[("payment-signature", &v2_header(1))])).await;
    assert_eq!(usdc.status, StatusCode::OK, "{}", usdc.error());
    assert_eq!(settler.settles(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_copies_of_a_payment_of_the_added_scheme_settle_once() {
    let (_, settler, _, svc) = selling(StatusCode::OK);
    let accepted = voucher_offer(svc.clone()).await;
    let paid = b64(&voucher_payment(&accepted, 5, None));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (svc, paid) = (svc.clone(), paid.clone());
            tokio::spawn(async move { send(svc, req("/r", &[("payment-signature", &paid)])).await })
        })
        .collect();
    for t in tasks {
        let a = t.await.unwrap();
        if a.status != StatusCode::OK {
            assert_eq!(a.error(), "settlement_pending");
        }
    }
    assert_eq!(
        settler.settles(),
        1,
        "one settlement, whatever the concurrency"
    );
}

#[tokio::test]
async fn a_handler_that_fails_charges_nothing_for_the_added_scheme() {
    let (inner, settler, _, svc) = selling(StatusCode::INTERNAL_SERVER_ERROR);
    let accepted = voucher_offer(svc.clone()).await;
    let paid = b64(&voucher_payment(&accepted, 6, None));
    let failed = send(svc.clone(), req("/r", &[("payment-signature", &paid)])).await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!((settler.settles(), inner.calls()), (0, 1));
    // Released: the same payment may be used again.
    let again = send(svc, req("/r", &[("payment-signature", &paid)])).await;
    assert_eq!(again.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!((settler.settles(), inner.calls()), (0, 2));
}

#[cfg(feature = "facilitator")]
#[tokio::test]
async fn the_facilitator_door_settles_the_added_scheme_once_across_doors() {
    use x402_tower::engine::facilitator::FacilitatorPolicy;
    let (_, settler, engine, svc) = selling(StatusCode::OK);
    let accepted = voucher_offer(svc.clone()).await;
    let payment = voucher_payment(&accepted, 7, None);
    let body =
        json!({"x402Version": 2, "paymentPayload": payment, "paymentRequirements": accepted});
    let policy = FacilitatorPolicy::default();
    let settled = engine
        .facilitator_settle(&policy, body.to_string().as_bytes())
        .await
        .unwrap();
    assert!(settled.success, "{settled:?}");
    // Sent to /settle again: the stored answer. Presented at the route: already used.
    let again = engine
        .facilitator_settle(&policy, body.to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(again, settled);
    let route = send(svc, req("/r", &[("payment-signature", &b64(&payment))])).await;
    assert_eq!(route.error(), "invalid_exact_evm_nonce_already_used");
    assert_eq!(settler.settles(), 1);
    // A forged one through this door: the scheme's code.
    let mut forged = body.clone();
    forged["paymentPayload"]["payload"]["proof"] = json!(B256::repeat_byte(1));
    let refused = engine
        .facilitator_verify(&policy, forged.to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(
        refused.invalid_reason.as_deref(),
        Some("invalid_voucher_proof")
    );
}

#[test]
fn an_offer_no_scheme_of_the_engine_sells_is_a_build_error() {
    let err = config()
        .offer(offer().scheme("voucher"))
        .build()
        .map(|_| ())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("offer 1 is invalid: no scheme of the payment engine sells it"),
        "{err}"
    );
}
