//! An extension of the user's own, added without editing the crate: declared in the 402 it chooses to be
//! in, told every settlement, and absent from a 402 that declares nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::StatusCode;
use serde_json::json;
use tower::Layer;
use x402_tower::extensions::{Declaration, Extension, Offered, Settled};
use x402_tower::proto::SettleResponse;
use x402_tower::settle::VerifyOnlySettler;
use x402_tower::{PaymentEngine, X402Layer};

use crate::support::*;

/// Declares where support is for the resource and its first offer's amount; stamps each settlement with a
/// support ticket.
#[derive(Default)]
struct Support {
    declared: AtomicUsize,
}

impl Extension for Support {
    fn key(&self) -> &str {
        "support"
    }

    fn declare(&self, offered: &Offered<'_>) -> Option<Declaration> {
        self.declared.fetch_add(1, Ordering::SeqCst);
        let amount = offered.requirements().next()?.amount.to_string();
        Some(Declaration::lasting(
            json!({"info": {"url": "https://shop.example/help", "resource": offered.resource_url(), "amount": amount}})
                .to_string(),
        ))
    }

    fn on_settled(&self, settlement: &mut SettleResponse, resource_url: &str, settled: Settled) {
        let at = match settled {
            Settled::Now(at) | Settled::Recorded(at) => at,
        };
        let ticket = json!({"info": {"ticket": format!("{resource_url}@{at}")}}).to_string();
        let extensions = settlement.extensions.take().unwrap_or_default();
        settlement.extensions = Some(extensions.with("support", &ticket).unwrap());
    }
}

fn engine() -> Arc<PaymentEngine> {
    Arc::new(
        PaymentEngine::builder()
            .settler(Arc::new(VerifyOnlySettler))
            .build()
            .unwrap(),
    )
}

#[tokio::test]
async fn a_users_extension_is_declared_and_told_of_each_settlement() {
    let support = Arc::new(Support::default());
    let layer = X402Layer::builder(BASE_URL)
        .offer(offer())
        .engine(engine())
        .extension(support.clone())
        .build()
        .unwrap();
    let inner = Inner::new();

    let asked = send(
        layer.layer(inner.service(StatusCode::OK)),
        req("/report", &[]),
    )
    .await;
    assert_eq!(asked.status, StatusCode::PAYMENT_REQUIRED);
    let declared = &asked.payment_required()["extensions"];
    assert_eq!(
        declared,
        &json!({"support": {"info": {"url": "https://shop.example/help", "resource": "https://shop.example/report", "amount": "10000"}}})
    );
    // The 402 is kept ready: declaring again is not needed for the same resource and offers.
    send(
        layer.layer(inner.service(StatusCode::OK)),
        req("/report", &[]),
    )
    .await;
    assert_eq!(support.declared.load(Ordering::SeqCst), 1);

    let paid = send(
        layer.layer(inner.service(StatusCode::OK)),
        req("/report", &[("payment-signature", &v2_header(1))]),
    )
    .await;
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");
    let receipt = paid.receipt("payment-response");
    let ticket = receipt
        .extensions
        .as_ref()
        .expect("extensions")
        .get("support")
        .unwrap();
    assert!(
        ticket["info"]["ticket"]
            .as_str()
            .unwrap()
            .starts_with("https://shop.example/report@"),
        "{ticket}"
    );
}

#[tokio::test]
async fn a_402_that_declares_no_extension_has_no_extensions_member() {
    let layer = X402Layer::builder(BASE_URL)
        .offer(offer())
        .engine(engine())
        .build()
        .unwrap();
    let asked = send(
        layer.layer(Inner::new().service(StatusCode::OK)),
        req("/report", &[]),
    )
    .await;
    let document = asked.payment_required();
    assert!(document.get("extensions").is_none(), "{document}");
}

#[tokio::test]
async fn a_later_extension_with_the_same_key_replaces_the_earlier() {
    let layer = X402Layer::builder(BASE_URL)
        .offer(offer())
        .engine(engine())
        .payment_identifier(false)
        .extension(Arc::new(Support::default()))
        .extension(Arc::new(Support::default()))
        .build()
        .unwrap();
    let asked = send(
        layer.layer(Inner::new().service(StatusCode::OK)),
        req("/report", &[]),
    )
    .await;
    let extensions = asked.payment_required()["extensions"].clone();
    let keys: Vec<&String> = extensions.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["payment-identifier", "support"]);
}
