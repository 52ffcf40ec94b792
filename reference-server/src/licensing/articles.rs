//! The article catalog in memory: what `/x402Article`, its 402 and the catalog answer from, with no database
//! read per request.
//!
//! Loaded at start from the database, and reloaded every [`REFRESH`] by a background task so that a change
//! made through the database (by another instance, or by an operator) is served within that time. Articles
//! only change that way: nothing in this server writes them after seeding.
//!
//! Each article is held with its licenses resolved (its own, or the site's default terms at its price), the
//! x402 `terms` its 402 declares and the offers it is sold with, built once per load.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use x402_tower::extensions::terms::Terms;

use super::offers::{ArticleOffers, ArticlePricing};
use crate::domain::Article;
use crate::domain::license::DefaultTerms;
use crate::store::StoreError;
use crate::store::licensing::LicensingStore;

/// How often the catalog is reloaded from the database.
pub const REFRESH: Duration = Duration::from_secs(10);

/// A published article as the catalog sells it.
#[derive(Debug, Clone)]
pub struct ForSale {
    /// The article, its licenses resolved.
    pub article: Arc<Article>,
    /// The x402 `terms` (with their version) its 402 declares.
    pub terms: Arc<Terms>,
    /// Its offers, one list per license choice.
    pub offers: ArticleOffers,
    /// The `bazaar` declaration its 402 carries ([`article_discovery`](super::discovery::article_discovery)),
    /// serialised once per load.
    pub bazaar: Arc<str>,
}

#[derive(Debug, Default)]
struct Snapshot {
    by_id: HashMap<String, ForSale>,
    /// Published articles in catalog order (newest first, as the store lists them).
    published: Vec<Arc<Article>>,
    /// Unix seconds when the published articles last changed (a reload finding the same keeps it).
    changed_at: u64,
}

/// The published articles, shared by every request.
#[derive(Debug)]
pub struct ArticleCatalog {
    snapshot: RwLock<Arc<Snapshot>>,
    /// Public base URL (the `terms` URLs).
    public_url: String,
    /// The terms of articles without licenses of their own.
    default_terms: DefaultTerms,
    /// How the articles are sold (network, token, payee).
    pricing: ArticlePricing,
}

impl ArticleCatalog {
    /// Loads every published article from `store` (at start, before serving); articles without licenses of
    /// their own are sold under `default_terms`, every article as `pricing` says.
    pub async fn load(
        store: &dyn LicensingStore,
        public_url: &str,
        default_terms: DefaultTerms,
        pricing: ArticlePricing,
    ) -> Result<Self, StoreError> {
        let catalog = ArticleCatalog {
            snapshot: RwLock::default(),
            public_url: public_url.to_owned(),
            default_terms,
            pricing,
        };
        catalog.replace(store.list_published().await?);
        Ok(catalog)
    }

    /// Replaces the catalog with what `store` holds now.
    pub async fn reload(&self, store: &dyn LicensingStore) -> Result<(), StoreError> {
        self.replace(store.list_published().await?);
        Ok(())
    }

    fn replace(&self, articles: Vec<Article>) {
        let published: Vec<Arc<Article>> = articles
            .into_iter()
            .map(|mut a| {
                a.licenses = crate::domain::license::effective(&a, &self.default_terms);
                Arc::new(a)
            })
            .collect();
        let by_id = published
            .iter()
            .map(|a| {
                let terms = crate::licensing::rsl::terms_of(&self.public_url, &a.id, &a.licenses);
                let offers = self.pricing.offers(a);
                let bazaar = super::discovery::article_discovery(a)
                    .declaration()
                    .to_string()
                    .into();
                let for_sale = ForSale {
                    article: a.clone(),
                    terms,
                    offers,
                    bazaar,
                };
                (a.id.clone(), for_sale)
            })
            .collect();
        let mut current = self.snapshot.write().unwrap_or_else(|e| e.into_inner());
        let changed_at = if current.published == published {
            current.changed_at
        } else {
            crate::web::clock::unix_now()
        };
        *current = Arc::new(Snapshot {
            by_id,
            published,
            changed_at,
        });
    }

    fn current(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The published article `id` (its licenses resolved), if any.
    pub fn published(&self, id: &str) -> Option<Arc<Article>> {
        self.current().by_id.get(id).map(|f| f.article.clone())
    }

    /// The published article `id`, the x402 `terms` of its 402 and its offers.
    pub fn for_sale(&self, id: &str) -> Option<ForSale> {
        self.current().by_id.get(id).cloned()
    }

    /// Every published article, in catalog order.
    pub fn list(&self) -> Vec<Arc<Article>> {
        self.current().published.clone()
    }

    /// Unix seconds when this instance's catalog last changed (loaded, or reloaded with other articles):
    /// the `lastUpdated` of the articles in bazaar discovery, the same on every request until they change.
    pub fn changed_at(&self) -> u64 {
        self.current().changed_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::licensing::test_article as article;
    use crate::store::{Db, SqliteLicensingStore};

    fn pricing() -> ArticlePricing {
        let settings = crate::Config::for_tests().validate().unwrap().licensing;
        ArticlePricing::new(settings.payment, settings.pay_to)
    }

    #[tokio::test]
    async fn serves_published_articles_and_sees_database_changes_after_a_reload() {
        let store = SqliteLicensingStore::new(Db::open_in_memory().unwrap());
        store
            .insert_articles(vec![article("a", true), article("draft", false)])
            .await
            .unwrap();
        let catalog = ArticleCatalog::load(&store, "http://x", DefaultTerms::default(), pricing())
            .await
            .unwrap();
        assert_eq!(catalog.published("a").unwrap().title, "Title a");
        assert!(catalog.published("draft").is_none());
        // Another instance adds an article: served after the next reload, not before.
        store
            .insert_articles(vec![article("b", true)])
            .await
            .unwrap();
        assert!(catalog.published("b").is_none());
        // A reload that finds the same articles keeps the time they changed (discovery's lastUpdated).
        let loaded_at = catalog.changed_at();
        assert!(loaded_at > 0);
        // (Unix seconds: the next change must come a second later to be told apart.)
        std::thread::sleep(std::time::Duration::from_millis(1_100));
        catalog.reload(&store).await.unwrap();
        assert!(catalog.published("b").is_some());
        assert_eq!(catalog.list().len(), 2);
        assert!(
            catalog.changed_at() > loaded_at,
            "changed articles, new time"
        );
        let changed = catalog.changed_at();
        catalog.reload(&store).await.unwrap();
        assert_eq!(catalog.changed_at(), changed, "same articles, same time");
    }

    #[tokio::test]
    async fn articles_without_licenses_get_the_default_terms_and_terms_follow_the_licenses() {
        let store = SqliteLicensingStore::new(Db::open_in_memory().unwrap());
        let mut own = article("own", true);
        own.licenses = vec![crate::domain::license::License {
            id: "training".into(),
            permits: vec!["ai-train".into()],
            prohibits: vec![],
            users: vec![],
            price_atomic: 99,
        }];
        store
            .insert_articles(vec![article("plain", true), own])
            .await
            .unwrap();
        let catalog = ArticleCatalog::load(&store, "http://x", DefaultTerms::default(), pricing())
            .await
            .unwrap();
        let ForSale {
            article: plain,
            terms,
            offers: plain_offers,
            ..
        } = catalog.for_sale("plain").unwrap();
        assert_eq!(
            plain.licenses[0].id,
            crate::domain::license::DEFAULT_LICENSE_ID
        );
        assert_eq!(plain.licenses[0].prohibits, ["ai-train"]);
        assert_eq!(plain.licenses[0].price_atomic, plain.price_atomic);
        assert_eq!(terms.info().terms, "http://x/license.xml?articleId=plain");
        let ForSale {
            article: own,
            terms: own_terms,
            offers: own_offers,
            ..
        } = catalog.for_sale("own").unwrap();
        assert_eq!(own.licenses[0].id, "training");
        assert_ne!(own_terms.info().version, terms.info().version);
        // The offers follow each article's licenses and prices, built with the catalog.
        let amount = |offers: &ArticleOffers| {
            let all = offers.get(crate::licensing::offers::LicenseChoice(None));
            all.as_slice()
                .iter()
                .map(|o| o.amount.atomic_units().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(amount(&plain_offers), [plain.price_atomic.to_string()]);
        assert_eq!(amount(&own_offers), ["99"]);
    }
}
