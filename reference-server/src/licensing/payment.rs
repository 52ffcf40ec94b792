//! The bridge between the licensing handlers and the x402 layer: the layer and the engine of
//! `/x402Article` assembled from the offers ([`offers`](super::offers)), sign-in
//! (`sign_in.rs`) and the settler the server chose, and what a verified (and settled) payment
//! tells the handler.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use x402_tower::extensions::Fixed;
use x402_tower::extensions::offer_receipt::OfferReceipt;
use x402_tower::pricing::PriceDecision;
use x402_tower::proto::checksum;
use x402_tower::settle::onchain::OnchainSettler;
use x402_tower::settle::{SettlementObserver, Settler};
use x402_tower::{PaymentEngine, PaymentStore, VerifiedPayment, X402Layer, settle::SettleTiming};

use super::BuildError;
use super::offers::{ArticleOffers, LicenseChoice};
use super::settings::LicensingSettings as Settings;
use crate::store::licensing::LicensingStore;

/// What the x402 layer established about a paid request, in the terms a receipt records.
#[derive(Debug, Clone)]
pub struct PaidBy {
    /// Payer address (checksummed).
    pub payer: String,
    /// Recipient address (checksummed).
    pub pay_to: String,
    /// Amount authorised, atomic units, decimal.
    pub amount: String,
    /// CAIP-2 network.
    pub network: String,
    /// Token contract (checksummed).
    pub asset: String,
    /// EIP-3009 nonce, `0x` + 64 hex.
    pub nonce: String,
    /// The authorization's `validBefore` (unix seconds).
    pub valid_before: u64,
    /// x402 version the client spoke.
    pub x402_version: u8,
    /// Settlement transaction (`verify-only` with the verify-only settler).
    pub transaction: String,
    /// The identical payment was settled by an earlier request (whose answer the buyer lost).
    pub redelivered: bool,
    /// Which of the offers of the request it paid (the license bought).
    pub offer_index: usize,
    /// The receipt the x402 layer signed for this settlement (offer-receipt): the JSON text sent in
    /// `PAYMENT-RESPONSE`, stored and answered as it is (not read into a struct and written out again).
    /// Only this deployment's signer writes that entry: the x402 engine builds every settlement from the
    /// settler's outcome (transaction, payer, network; a facilitator's `extensions` are not carried over),
    /// the layer's settled hook adds the receipt, and a redelivery answers the recorded settlement.
    pub signed: Option<Box<serde_json::value::RawValue>>,
}

impl PaidBy {
    /// Read the payment the x402 layer attached to the request (settled before the handler), if any.
    pub fn from_extensions(ext: &http::Extensions) -> Option<Self> {
        let p = ext.get::<VerifiedPayment>()?;
        let settlement = p.settlement.as_ref().filter(|s| s.success)?;
        Some(Self {
            payer: checksum(&p.payer),
            pay_to: checksum(&p.pay_to),
            amount: p.amount.to_string(),
            network: p.network.caip2().to_owned(),
            asset: checksum(&p.asset),
            nonce: p.nonce.to_string(),
            valid_before: p.valid_before,
            x402_version: p.x402_version,
            transaction: settlement.transaction.clone(),
            redelivered: p.redelivered,
            offer_index: p.offer_index,
            signed: x402_tower::extensions::offer_receipt::SignedReceipt::text_in(settlement)
                .map(ToOwned::to_owned),
        })
    }
}

/// The x402 layer selling `/x402Article`: each article at its own price (the article was put in the
/// request extensions by [`with_article`](super::handlers::with_article)), settled **before** the
/// handler so the receipt can record the settlement (see the module docs of [`licensing`](super)), by
/// `engine` ([`engine`]).
pub(crate) fn x402_layer(
    settings: &Settings,
    public_url: &str,
    engine: Arc<PaymentEngine>,
    onchain: Option<&OnchainSettler>,
    licensing: Arc<dyn LicensingStore>,
    articles: Arc<super::articles::ArticleCatalog>,
) -> Result<X402Layer, BuildError> {
    let price = move |parts: &http::request::Parts| {
        let choice = parts
            .extensions
            .get::<LicenseChoice>()
            .copied()
            .unwrap_or(LicenseChoice(None));
        let decision = match parts.extensions.get::<ArticleOffers>() {
            Some(offers) => PriceDecision::Charge(offers.get(choice)),
            None => {
                tracing::error!("x402 price source reached without an article");
                let mut resp = http::Response::new(Full::new(Bytes::from_static(
                    br#"{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"article lookup missing","code":"internal"}"#,
                )));
                *resp.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static(crate::web::error::PROBLEM_JSON),
                );
                PriceDecision::Respond(resp)
            }
        };
        std::future::ready(decision)
    };
    let mut layer = X402Layer::builder(public_url.to_owned());
    if onchain.is_some() && settings.payment.permit2 {
        // The relayer applies a buyer's EIP-2612 permit for Permit2 in the settlement: no approval first.
        layer = layer.extension(Arc::new(Fixed::eip2612_gas_sponsoring()));
    }
    layer
        .engine(engine)
        .price_source(price)
        .settle_timing(SettleTiming::BeforeHandler)
        // Interface A names it (Base64 of the requirements; the v2 document without extensions).
        .x_payment_required(true)
        // Settling checks what the settler's verify would (see the module docs): one round trip less.
        .settle_without_verify(true)
        .sign_in_with_x(super::sign_in::sign_in_with_x(settings, onchain, licensing))
        // Each article's 402 describes that article (bazaar).
        .extension(Arc::new(super::discovery::ArticleDeclarations(articles)))
        // The settlement log records the request's verified crawler: carried with the payment.
        .extension(Arc::new(super::bot_auth::AgentOfRequest))
        // Each article's license (RSL document and version), put in the request by with_article.
        .terms_per_request()
        // Signed offers and receipts; the transaction is in them, as on the public verify URL already.
        .offer_receipt(Arc::new(
            OfferReceipt::from_secret(settings.receipt_key.signer().to_bytes())
                .map_err(|e| BuildError::Payment(e.to_string()))?
                .include_transaction(true),
        ))
        .build()
        .map_err(|e| BuildError::Payment(e.to_string()))
}

/// The payment engine of interface A: `settler` settles, every settlement attempt is reported to `observer`
/// (the [settlement log](super::settlements)) before the client is answered, and the payment records are in
/// `store` (the database). One engine: the paid route's layer and the facilitator API are two doors into it,
/// over one payment store and one settler.
pub(crate) fn engine(
    settings: &Settings,
    settler: Arc<dyn Settler>,
    observer: Arc<dyn SettlementObserver>,
    store: Arc<dyn PaymentStore>,
) -> Result<Arc<PaymentEngine>, BuildError> {
    PaymentEngine::builder()
        .settler(settler)
        .settlement_observer(observer)
        .store(store)
        .stale_after(settings.payment_stale_after)
        .keep_after_expiry(settings.payment_keep_after_expiry)
        .build()
        .map(Arc::new)
        .map_err(|e| BuildError::Payment(e.to_string()))
}

/// Append the x402 layer's payment counters (by outcome) to the Prometheus text.
/// Records the x402 layer's counters (with the server's metrics recorder current).
pub(crate) fn record_payment_metrics(layer: &X402Layer) {
    let m = layer.metrics().snapshot();
    crate::metrics::counter(
        "x402_payment_required_total",
        "402 answers sent by the x402 layer.",
        m.payment_required_sent,
    );
    metrics::describe_counter!(
        "x402_payments_total",
        "Payments by outcome (rejected ones by the x402 reason)."
    );
    for (outcome, n) in [
        ("accepted", m.payments_accepted),
        ("settlement_failed", m.settlements_failed),
        ("settlement_unknown", m.settlements_unknown),
        ("upstream_error", m.upstream_errors),
    ] {
        metrics::counter!("x402_payments_total", "outcome" => outcome).absolute(n);
    }
    for (reason, n) in &m.rejected {
        metrics::counter!("x402_payments_total", "outcome" => "rejected", "reason" => reason.to_string())
            .absolute(*n);
    }
}
