//! The bridge between the licensing handlers and the x402 layer: which network and token articles are
//! sold in, and what a verified (and settled) payment tells the handler.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use x402_tower::PaymentOffer;
use x402_tower::Price;
use x402_tower::extensions::offer_receipt::OfferReceipt;
use x402_tower::extensions::siwx::{PaidCheck, SignInWithX};
use x402_tower::layer::paywall::PaywallDetails;
use x402_tower::pricing::{Offers, PriceDecision};
use x402_tower::proto::checksum;
use x402_tower::settle::onchain::OnchainSettler;
use x402_tower::settle::{FacilitatorSettler, SettlementObserver, Settler, VerifyOnlySettler};
use x402_tower::{PaymentEngine, ReplayStore, VerifiedPayment, X402Layer, settle::SettleTiming};

use super::BuildError;
use super::settings::{LicensingSettings as Settings, PaymentNetwork};
use crate::domain::Article;
use crate::domain::license::License;
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

/// Which of an article's licenses a request asks for (`&license=<id>`, its position in the article's
/// licenses); `None`: every license, one offer each, in the article's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LicenseChoice(pub Option<usize>);

/// The licenses a request for `article` is offered (an article in the catalog has at least one).
pub(crate) fn licenses_offered(article: &Article, choice: LicenseChoice) -> &[License] {
    match choice.0 {
        Some(i) => article.licenses.get(i..=i).unwrap_or_default(),
        None => &article.licenses,
    }
}

/// The offers an article is sold with, one per license offered (the x402 layer's, and the handler's 402
/// for a replayed payment). The position of an offer is the position of its license in
/// [`licenses_offered`], which is how a paid request learns the license bought.
pub(crate) fn article_offers(
    payment: &PaymentNetwork,
    pay_to: alloy_primitives::Address,
    article: &Article,
    choice: LicenseChoice,
) -> Vec<PaymentOffer> {
    licenses_offered(article, choice)
        .iter()
        .map(|license| {
            PaymentOffer::new(
                payment.network.clone(),
                payment.token.clone(),
                pay_to,
                Price::from(license.price_atomic),
            )
            // The resource, which every offer shares (a v2 402 has one description); the license is
            // `extra.license`, its terms are the `terms` extension and the `Link` to the RSL file.
            .description(format!("\"{}\" by {}", article.title, article.author_name))
            .mime_type("application/json")
            // Which license this offer sells: a buyer chooses by it, not by the order of `accepts`.
            .extra("license", license.id.clone())
        })
        .collect()
}

/// How articles are sold: the network and token, and who is paid. The catalog builds each article's
/// [`ArticleOffers`] with it once per load.
#[derive(Debug, Clone)]
pub struct ArticlePricing {
    payment: PaymentNetwork,
    pay_to: alloy_primitives::Address,
}

impl ArticlePricing {
    /// Articles sold in `payment`'s token to `pay_to`.
    pub fn new(payment: PaymentNetwork, pay_to: alloy_primitives::Address) -> Self {
        Self { payment, pay_to }
    }

    /// `article`'s offers for every license choice (as `article_offers` builds them), each with what the
    /// paywall shows a person for it.
    pub fn offers(&self, article: &Article) -> ArticleOffers {
        ArticleOffers(
            std::iter::once(LicenseChoice(None))
                .chain((0..article.licenses.len()).map(|i| LicenseChoice(Some(i))))
                .map(|c| {
                    (
                        Offers::new(article_offers(&self.payment, self.pay_to, article, c)),
                        Arc::new(paywall_details(article, c)),
                    )
                })
                .collect(),
        )
    }
}

/// What the paywall shows a person for `article` sold under `choice`: its title and author, each license
/// offered by name with what it allows in words, a link back to the catalog.
fn paywall_details(article: &Article, choice: LicenseChoice) -> PaywallDetails {
    licenses_offered(article, choice).iter().fold(
        PaywallDetails::new(article.title.clone())
            .byline(format!("by {}", article.author_name))
            .back("All articles", "/x402Article/list")
            // The site's bar, as `templates/base.html` draws it.
            .nav("x402 reference server", "/")
            .nav("Catalog", "/x402Article/list")
            .nav("Registry", "/api/v3/assets/?format=api")
            .nav("API docs", "/docs/"),
        |details, license| {
            details.choice(
                license.id.clone(),
                crate::domain::license::in_words(license),
            )
        },
    )
}

/// A published article's offers, built once per catalog load (every license; then each license alone): the
/// x402 layer checks and compiles each list once too ([`Offers`]), instead of every request for the article
/// formatting the licenses' descriptions and hashing the list.
#[derive(Debug, Clone)]
pub struct ArticleOffers(Arc<[(Offers, Arc<PaywallDetails>)]>);

impl ArticleOffers {
    /// The offers for `choice` (empty for a license the article does not have: `with_article` refuses it
    /// first).
    pub fn get(&self, choice: LicenseChoice) -> Offers {
        self.0
            .get(choice.0.map_or(0, |i| i + 1))
            .map(|(offers, _)| offers.clone())
            .unwrap_or_else(|| Offers::new(Vec::new()))
    }

    /// What the paywall shows for `choice` (shared: the x402 layer keeps its page ready).
    pub fn paywall(&self, choice: LicenseChoice) -> Option<Arc<PaywallDetails>> {
        self.0
            .get(choice.0.map_or(0, |i| i + 1))
            .map(|(_, details)| details.clone())
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
    X402Layer::builder(public_url.to_owned())
        .engine(engine)
        .price_source(price)
        .settle_timing(SettleTiming::BeforeHandler)
        // Interface A names it (Base64 of the requirements; the v2 document without extensions).
        .x_payment_required(true)
        // Settling checks what the settler's verify would (see the module docs): one round trip less.
        .settle_without_verify(true)
        .sign_in_with_x(sign_in_with_x(settings, onchain, licensing))
        // Each article's 402 describes that article (bazaar).
        .extension(Arc::new(super::discovery::ArticleDeclarations(articles)))
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
    store: Arc<dyn ReplayStore>,
) -> Result<Arc<PaymentEngine>, BuildError> {
    PaymentEngine::builder()
        .settler(settler)
        .settlement_observer(observer)
        // The settlement log records the request's verified crawler (a task-local), also when the
        // settlement finishes in a task of its own.
        .task_context(|task| {
            let agent = crate::licensing::bot_auth::current_agent();
            Box::pin(crate::licensing::bot_auth::in_agent_scope(agent, task))
        })
        .replay_store(store)
        .stale_after(settings.payment_stale_after)
        .keep_after_expiry(settings.payment_keep_after_expiry)
        .build()
        .map(Arc::new)
        .map_err(|e| BuildError::Payment(e.to_string()))
}

/// Sign-in-with-x for the articles: receipts answer "did this address pay"; with an on-chain settler
/// (`--rpc-url`), contract wallets sign in too (EIP-1271 through the same node).
fn sign_in_with_x(
    settings: &Settings,
    onchain: Option<&OnchainSettler>,
    licensing: Arc<dyn LicensingStore>,
) -> SignInWithX {
    let siwx = SignInWithX::new(sign_in_key(settings), Arc::new(BoughtArticles(licensing)));
    match onchain {
        Some(onchain) => siwx.contract_wallets(Arc::new(onchain.clone())),
        None => siwx,
    }
}

/// The key that tags sign-in-with-x nonces: derived from the media URL signing key, which every instance
/// of a deployment shares (docs/deploy.md), so a nonce issued by one instance is honoured by another; a
/// random key per start without it (one instance).
fn sign_in_key(settings: &Settings) -> Vec<u8> {
    use hmac::{Hmac, Mac};
    match &settings.url_signing_key {
        Some(key) => match <Hmac<sha2::Sha256> as Mac>::new_from_slice(key) {
            Ok(mut mac) => {
                mac.update(b"x402 sign-in-with-x nonce key");
                mac.finalize().into_bytes().to_vec()
            }
            Err(_) => uuid::Uuid::new_v4().as_bytes().repeat(2),
        },
        None => uuid::Uuid::new_v4().as_bytes().repeat(2),
    }
}

/// "Did this address pay for this article": a receipt of that payer for the `articleId` of the resource URL.
struct BoughtArticles(Arc<dyn LicensingStore>);

impl PaidCheck for BoughtArticles {
    fn has_paid<'a>(
        &'a self,
        payer: alloy_primitives::Address,
        resource_url: &'a str,
    ) -> x402_tower::pricing::BoxFuture<'a, Result<bool, x402_tower::StoreError>> {
        Box::pin(async move {
            let Some(article) = article_id_of(resource_url) else {
                return Ok(false);
            };
            self.0
                .receipt_of(&checksum(&payer), &article)
                .await
                .map(|r| r.is_some())
                .map_err(|e| x402_tower::StoreError::Backend(Box::new(e)))
        })
    }
}

/// The `articleId` of a resource URL's query.
pub(crate) fn article_id_of(resource_url: &str) -> Option<String> {
    let query = resource_url.split_once('?')?.1;
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "articleId")
        .map(|(_, v)| v.into_owned())
}

/// The settler of the configuration: on chain (`--rpc-url` + `--settler-key`), a remote facilitator, or
/// verify-only. The x402 layer's engine owns it; the facilitator API uses the same engine.
pub(crate) fn settler(
    settings: &Settings,
    onchain: Option<&OnchainSettler>,
) -> Result<Arc<dyn Settler>, BuildError> {
    Ok(match (onchain, &settings.facilitator_url) {
        (Some(onchain), _) => Arc::new(onchain.clone()),
        (None, Some(url)) => {
            let mut builder = FacilitatorSettler::builder(url.clone())
                .settle_timeout(settings.facilitator_settle_timeout);
            if let Some(token) = &settings.facilitator_url_token {
                let value =
                    http::HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| {
                        BuildError::Payment("facilitator token is not a header value".into())
                    })?;
                builder = builder.auth_headers(move |_| {
                    let mut h = http::HeaderMap::new();
                    h.insert(http::header::AUTHORIZATION, value.clone());
                    h
                });
            }
            Arc::new(
                builder
                    .build()
                    .map_err(|e| BuildError::Payment(format!("facilitator {url}: {e}")))?,
            )
        }
        (None, None) => Arc::new(VerifyOnlySettler),
    })
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

#[cfg(test)]
mod stale_tests {
    use super::*;

    /// What the engine over the configured settler takes as the abandonment threshold of an in-flight payment.
    fn stale_after(config: &crate::Config) -> u64 {
        let settings = config.validate().unwrap().licensing;
        let onchain = settings.onchain.as_ref().map(|o| o.settler().unwrap());
        x402_tower::PaymentEngine::builder()
            .settler(settler(&settings, onchain.as_ref()).unwrap())
            .build()
            .unwrap()
            .stale_after()
            .as_secs()
    }

    #[test]
    fn an_in_flight_payment_is_abandoned_only_after_the_settlers_longest_wait() {
        let mut config = crate::Config::for_tests();
        assert_eq!(stale_after(&config), 180);
        config.payment.facilitator_url = Some("http://127.0.0.1:1".into());
        config.payment.facilitator_settle_timeout_secs = 300;
        assert_eq!(stale_after(&config), 360);
        config.payment.facilitator_url = None;
        config.payment.rpc_url = Some("http://127.0.0.1:1".into());
        config.payment.settler_key =
            Some("0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d".into());
        config.payment.rpc_receipt_timeout_secs = 900;
        // The receipt wait, the send phase (five JSON-RPC calls of at most 10 s) and a minute.
        assert_eq!(stale_after(&config), 900 + 50 + 60);
        config.payment.rpc_timeout_secs = 2;
        assert_eq!(stale_after(&config), 900 + 10 + 60);
        for refused in [0, 121] {
            config.payment.rpc_timeout_secs = refused;
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains("rpc-timeout-secs"), "{refused}: {err}");
        }
        config.payment.rpc_timeout_secs = 10;
        config.payment.rpc_log_lookback_blocks = 250_000;
        let settings = config.validate().unwrap();
        let onchain = settings
            .licensing
            .onchain
            .as_ref()
            .expect("on-chain settlement");
        assert_eq!(onchain.log_lookback_blocks, 250_000);
        assert_eq!(onchain.settler().unwrap().log_lookback_blocks(), 250_000);
        for refused in [0, 10_000_001] {
            config.payment.rpc_log_lookback_blocks = refused;
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains("rpc-log-lookback-blocks"), "{refused}: {err}");
        }
    }
}

#[cfg(test)]
mod offers_tests {
    use super::*;
    use crate::store::licensing::test_article;

    fn license(id: &str, price_atomic: u64) -> License {
        License {
            id: id.into(),
            permits: vec![],
            prohibits: vec![],
            users: vec![],
            price_atomic,
        }
    }

    fn amounts(offers: &Offers) -> Vec<String> {
        offers
            .as_slice()
            .iter()
            .map(|o| o.amount.atomic_units().to_string())
            .collect()
    }

    #[test]
    fn an_articles_offers_are_every_license_then_each_alone_as_article_offers_builds_them() {
        let settings = crate::Config::for_tests().validate().unwrap().licensing;
        let pricing = ArticlePricing::new(settings.payment.clone(), settings.pay_to);
        let mut a = test_article("a", true);
        a.licenses = vec![license("inference", 40_000), license("training", 100_000)];
        let offers = pricing.offers(&a);
        assert_eq!(
            amounts(&offers.get(LicenseChoice(None))),
            ["40000", "100000"]
        );
        assert_eq!(amounts(&offers.get(LicenseChoice(Some(1)))), ["100000"]);
        for choice in [None, Some(0), Some(1)].map(LicenseChoice) {
            let direct = article_offers(&settings.payment, settings.pay_to, &a, choice);
            assert_eq!(offers.get(choice).as_slice(), direct.as_slice());
        }
        // The same lists on every request (compiled once by the layer).
        let again = offers.clone().get(LicenseChoice(None));
        assert!(std::ptr::eq(
            offers.get(LicenseChoice(None)).as_slice(),
            again.as_slice()
        ));
        // A choice the article does not have (with_article refuses it first): no offers (the layer's 500).
        assert!(offers.get(LicenseChoice(Some(7))).as_slice().is_empty());
    }
}
