//! The article catalog in memory: what `/x402Article`, its 402 and the catalog answer from, with no database
//! read per request.
//!
//! Loaded at start from the database, and reloaded every [`REFRESH`] by a background task so that a change
//! made through the database (by another instance, or by an operator) is served within that time. Articles
//! only change that way: nothing in this server writes them after seeding.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::store::StoreError;
use crate::store::articles::{Article, LicensingStore};

/// How often the catalog is reloaded from the database.
pub const REFRESH: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct Snapshot {
    by_id: HashMap<String, Arc<Article>>,
    /// Published articles in catalog order (newest first, as the store lists them).
    published: Vec<Arc<Article>>,
}

/// The published articles, shared by every request.
#[derive(Debug, Default)]
pub struct ArticleCatalog {
    snapshot: RwLock<Arc<Snapshot>>,
}

impl ArticleCatalog {
    /// Loads every published article from `store` (at start, before serving).
    pub async fn load(store: &dyn LicensingStore) -> Result<Self, StoreError> {
        let catalog = ArticleCatalog::default();
        catalog.replace(store.list_published().await?);
        Ok(catalog)
    }

    /// Replaces the catalog with what `store` holds now.
    pub async fn reload(&self, store: &dyn LicensingStore) -> Result<(), StoreError> {
        self.replace(store.list_published().await?);
        Ok(())
    }

    fn replace(&self, articles: Vec<Article>) {
        let published: Vec<Arc<Article>> = articles.into_iter().map(Arc::new).collect();
        let by_id = published
            .iter()
            .map(|a| (a.id.clone(), a.clone()))
            .collect();
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) =
            Arc::new(Snapshot { by_id, published });
    }

    fn current(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The published article `id`, if any.
    pub fn published(&self, id: &str) -> Option<Arc<Article>> {
        self.current().by_id.get(id).cloned()
    }

    /// Every published article, in catalog order.
    pub fn list(&self) -> Vec<Arc<Article>> {
        self.current().published.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::articles::test_article as article;
    use crate::store::{Db, SqliteLicensingStore};

    #[tokio::test]
    async fn serves_published_articles_and_sees_database_changes_after_a_reload() {
        let store = SqliteLicensingStore::new(Db::open_in_memory().unwrap());
        store
            .insert_articles(vec![article("a", true), article("draft", false)])
            .await
            .unwrap();
        let catalog = ArticleCatalog::load(&store).await.unwrap();
        assert_eq!(catalog.published("a").unwrap().title, "Title a");
        assert!(catalog.published("draft").is_none());
        // Another instance adds an article: served after the next reload, not before.
        store
            .insert_articles(vec![article("b", true)])
            .await
            .unwrap();
        assert!(catalog.published("b").is_none());
        catalog.reload(&store).await.unwrap();
        assert!(catalog.published("b").is_some());
        assert_eq!(catalog.list().len(), 2);
    }
}
