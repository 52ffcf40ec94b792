//! [`Licensing`]: interface A's state, built once from its settings and the stores.

use std::sync::Arc;

use axum::http::HeaderValue;
use x402_tower::X402Layer;
use x402_tower::settle::Settler;
use x402_tower::settle::onchain::OnchainSettler;

use super::articles::ArticleCatalog;
use super::bot_auth::BotVerifier;
use super::interest::InterestRecorder;
use super::minter::Minter;
use super::settings::LicensingSettings;
use super::settlements::SettlementLog;
use super::{handlers, offers, payment};
use crate::metrics::Metrics;
use crate::store::{ExpiringPaymentStore, LicensingStore, Stores};

/// State shared by interface A's handlers (`State<Arc<Licensing>>`).
#[derive(Debug)]
pub struct Licensing {
    /// Checked configuration.
    pub settings: LicensingSettings,
    /// Public base URL without a trailing slash (configured, or derived from the bound address).
    pub public_url: String,
    /// Interface A's store.
    pub licensing: Arc<dyn LicensingStore>,
    /// The published articles, in memory (reloaded every [`super::articles::REFRESH`]).
    pub articles: Arc<ArticleCatalog>,
    /// Server counters.
    pub metrics: Arc<Metrics>,
    /// llms.txt interest, counted in memory and flushed in batches.
    pub interest: InterestRecorder,
    /// The x402 layer of `/x402Article` (kept here for its metrics and its engine).
    pub payments: X402Layer,
    /// The settlement log the x402 layer reports every settlement attempt to (its store and counters).
    pub settlements: Arc<SettlementLog>,
    /// The payment engine's durable records (shared by the paid route and `/facilitator`).
    pub payment_store: Arc<dyn ExpiringPaymentStore>,
    /// Web Bot Auth: verifies signed crawler requests.
    pub bots: BotVerifier,
    /// The on-chain settler, when settlement is on chain (the engine's settler, sign-in-with-x's contract
    /// wallets and the minter share it).
    pub onchain: Option<OnchainSettler>,
    /// Mints license tokens on chain (`--license-token` with on-chain settlement).
    pub minter: Option<Arc<Minter>>,
    /// `Link: <…/license.xml>; rel="license"`, built once.
    pub license_link: HeaderValue,
}

/// Why interface A could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The x402 layer refused its configuration.
    #[error("payment layer: {0}")]
    Payment(String),
    /// The article catalog could not be loaded.
    #[error("article catalog: {0}")]
    Catalog(String),
}

impl Licensing {
    /// Interface A for `settings`, reachable at `public_url`, over `stores` (loads the article catalog),
    /// counting into `metrics`, its payments settled by `settler` (`onchain` when that is the on-chain
    /// settler, which sign-in-with-x and the minter use too). The server chooses both.
    pub async fn new(
        settings: LicensingSettings,
        public_url: String,
        stores: &Stores,
        metrics: Arc<Metrics>,
        settler: Arc<dyn Settler>,
        onchain: Option<OnchainSettler>,
    ) -> Result<Self, BuildError> {
        let settlements = Arc::new(SettlementLog::new(stores.settlements.clone()));
        let payment_store = stores.payments.clone();
        let licensing = stores.licensing.clone();
        let articles = ArticleCatalog::load(
            &*licensing,
            &public_url,
            settings.default_terms.clone(),
            offers::ArticlePricing::new(settings.payment.clone(), settings.pay_to),
        )
        .await
        .map(Arc::new)
        .map_err(|e| BuildError::Catalog(e.to_string()))?;
        let engine = payment::engine(
            &settings,
            settler,
            settlements.clone(),
            payment_store.clone(),
        )?;
        let payments = payment::x402_layer(
            &settings,
            &public_url,
            engine,
            onchain.as_ref(),
            licensing.clone(),
            articles.clone(),
        )?;
        let minter = match (&onchain, settings.license_token) {
            (Some(onchain), Some(contract)) => Some(Arc::new(Minter::new(
                onchain.clone(),
                contract,
                licensing.clone(),
            ))),
            _ => None,
        };
        Ok(Self {
            license_link: handlers::license_link(&public_url),
            minter,
            onchain,
            bots: BotVerifier::new(settings.bot_auth.clone(), &public_url),
            articles,
            payments,
            payment_store,
            settlements,
            licensing,
            metrics,
            interest: Default::default(),
            settings,
            public_url,
        })
    }

    /// `verify-only`, or the facilitator in use.
    pub fn settlement_mode(&self) -> String {
        if let Some(onchain) = &self.onchain {
            return format!("on chain, relayer {}", onchain.relayer());
        }
        match &self.settings.facilitator_url {
            Some(url) => format!("facilitator {url}"),
            None => {
                "verify-only (signatures checked locally, nothing submitted on chain)".to_owned()
            }
        }
    }

    /// Records interface A's counters into the metrics recorder (for `/metrics`).
    pub fn record_metrics(&self) {
        payment::record_payment_metrics(&self.payments);
        self.settlements.record_metrics();
        self.interest.record_metrics();
        self.bots.record_metrics();
        if let Some(m) = &self.minter {
            m.record_metrics();
        }
    }
}
