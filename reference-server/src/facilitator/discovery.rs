//! Discovery (x402 `bazaar`): what agents can buy here and through this facilitator.
//!
//! - Every article's 402 declares the `bazaar` extension (`crate::licensing::discovery`): `GET` with the
//!   `articleId` query parameter, and an example of the paid answer.
//! - `GET /facilitator/supported` lists `"bazaar"` in `extensions`.
//! - `GET /facilitator/discovery/resources?type&limit&offset` (public, read-only: it shows what anyone can
//!   see in a 402) answers `{x402Version: 2, items, pagination: {limit, offset, total}}`: first this server's
//!   own resources ([`OwnResources`]: the articles, one item per article with its price), then the resources
//!   of other services whose payments this facilitator settled ([`Catalogue::settled`]), ordered by URL.
//!   `limit` and `offset` are read with this workspace's `registry-pagination` rules (DRF's: a missing,
//!   malformed, zero or negative `limit` gives the default 20, a larger one is clamped to 100; a bad
//!   `offset` gives 0), which agree with the extension's `limit` 1-100 default 20.
//! - A payment settled through `/facilitator/settle` whose payload echoes a `bazaar` declaration is
//!   catalogued when the declaration has the extension's shape **and** its `info` validates against its own
//!   JSON Schema (the extension says the facilitator must check this; `jsonschema`, 2020-12, no remote
//!   references). It is keyed as the official facilitator keys it: origin and path, or origin and a valid
//!   `routeTemplate`. A refused declaration is logged and never fails the settlement. A declaration
//!   catalogued less than [`RECATALOGUE_AFTER`] seconds ago is not validated and written again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use alloy_primitives::B256;
use axum::Json;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use registry_pagination::Page;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest as _, Sha256};
use x402_tower::extensions::bazaar::{
    CatalogError, DiscoveryList, DiscoveryPagination, DiscoveryResource, catalog_entry,
};

use crate::store::settlements::SettlementStore;

/// Default page size of the listing.
pub const DEFAULT_LIMIT: u64 = 20;
/// Largest page size of the listing.
pub const MAX_LIMIT: u64 = 100;

/// The catalogue of resources this facilitator settled payments for.
///
/// Every settlement of one resource carries the same declaration, so a declaration catalogued less than
/// [`RECATALOGUE_AFTER`] ago is not validated and written again (a schema compiled and a database write per
/// settlement otherwise): its `lastUpdated` moves at most that often. Remembered per process, bounded.
#[derive(Debug, Clone)]
pub struct Catalogue {
    store: Arc<dyn SettlementStore>,
    recent: Arc<Mutex<HashMap<B256, u64>>>,
}

/// Seconds during which the same declaration of the same resource is not catalogued again.
pub const RECATALOGUE_AFTER: u64 = 60;
/// Most declarations remembered as recently catalogued (forgotten all at once beyond).
const RECENT_CAP: usize = 4_096;

/// Why a settled payment's declaration was not catalogued.
#[derive(Debug, thiserror::Error)]
pub enum NotCatalogued {
    /// No declaration, or not the extension's shape.
    #[error(transparent)]
    Shape(#[from] CatalogError),
    /// `info` does not validate against the declaration's schema (or the schema is not a schema).
    #[error("the bazaar info does not validate against its schema: {0}")]
    Schema(String),
    /// The catalogue is full.
    #[error("the discovery catalogue is full")]
    Full,
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// The parts of a facilitator request that decide its catalogue entry, as text.
#[derive(Deserialize)]
struct Declared<'a> {
    #[serde(rename = "paymentPayload", borrow)]
    payload: Option<DeclaredPayload<'a>>,
    #[serde(rename = "paymentRequirements", borrow)]
    requirements: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct DeclaredPayload<'a> {
    #[serde(borrow)]
    resource: Option<&'a RawValue>,
    #[serde(borrow)]
    extensions: Option<DeclaredExtensions<'a>>,
}

#[derive(Deserialize)]
struct DeclaredExtensions<'a> {
    #[serde(borrow)]
    bazaar: Option<&'a RawValue>,
}

impl Catalogue {
    /// The catalogue kept in `store`.
    pub fn new(store: Arc<dyn SettlementStore>) -> Self {
        Catalogue {
            store,
            recent: Arc::default(),
        }
    }

    /// Catalogues the resource of a facilitator request body (`{paymentPayload, paymentRequirements}`)
    /// whose settlement succeeded.
    pub async fn settled(&self, body: &[u8], now: u64) -> Result<(), NotCatalogued> {
        let declared: Declared<'_> =
            serde_json::from_slice(body).map_err(|_| CatalogError::Absent)?;
        let payload = declared.payload.ok_or(CatalogError::Absent)?;
        let bazaar = payload
            .extensions
            .and_then(|e| e.bazaar)
            .ok_or(CatalogError::Absent)?;
        let mut key = Sha256::new();
        for part in [payload.resource, Some(bazaar), declared.requirements] {
            let text = part.map_or("", RawValue::get);
            key.update((text.len() as u64).to_be_bytes());
            key.update(text.as_bytes());
        }
        let key = B256::from(<[u8; 32]>::from(key.finalize()));
        if self
            .lock()
            .get(&key)
            .is_some_and(|at| now < at.saturating_add(RECATALOGUE_AFTER))
        {
            return Ok(());
        }
        let request: Value = serde_json::from_slice(body).map_err(|_| CatalogError::Absent)?;
        let payload = request.get("paymentPayload").unwrap_or(&Value::Null);
        let requirements = request.get("paymentRequirements").unwrap_or(&Value::Null);
        let entry = catalog_entry(payload, requirements, now)?;
        let declaration = &payload["extensions"][x402_tower::extensions::bazaar::KEY];
        validate_info(declaration)?;
        if !self.store.upsert_discovered(entry).await? {
            return Err(NotCatalogued::Full);
        }
        let mut recent = self.lock();
        if recent.len() >= RECENT_CAP {
            recent.clear();
        }
        recent.insert(key, now);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<B256, u64>> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `info` against `schema`, as the extension requires of a facilitator.
pub fn validate_info(declaration: &Value) -> Result<(), NotCatalogued> {
    let validator = jsonschema::draft202012::new(&declaration["schema"])
        .map_err(|e| NotCatalogued::Schema(e.to_string()))?;
    let errors: Vec<String> = validator
        .iter_errors(&declaration["info"])
        .take(5)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(NotCatalogued::Schema(errors.join("; ")))
    }
}

/// This server's own resources, first in the listing (the composition root gives the articles).
pub type OwnResources = Arc<dyn Fn() -> Vec<DiscoveryResource> + Send + Sync>;

/// What the listing reads: this server's own resources, then the ones this facilitator catalogued.
pub struct Listing {
    own: OwnResources,
    settled: Arc<dyn SettlementStore>,
}

impl std::fmt::Debug for Listing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listing").finish_non_exhaustive()
    }
}

/// `GET /facilitator/discovery/resources`: public, whether or not the facilitator API is on.
pub fn router(own: OwnResources, settled: Arc<dyn SettlementStore>) -> axum::Router {
    axum::Router::new()
        .route("/facilitator/discovery/resources", axum::routing::get(list))
        .with_state(Arc::new(Listing { own, settled }))
}

/// `GET /facilitator/discovery/resources`.
#[utoipa::path(
    get,
    path = "/facilitator/discovery/resources",
    tag = "licensing",
    operation_id = "listDiscoveryResources",
    summary = "What can be bought here and through this facilitator (x402 bazaar discovery)",
    description = "This server's articles, then the resources of other services whose payments this \
        facilitator settled with a valid bazaar declaration. Public and read-only.",
    params(
        ("type" = Option<String>, Query, description = "`http` or `mcp`: only resources of that type."),
        ("limit" = Option<u64>, Query, description = "Page size, 1 to 100 (default 20; DRF's rules for bad values)."),
        ("offset" = Option<u64>, Query, description = "Index of the first item (default 0)."),
    ),
    responses(
        (status = 200, description = "A page of the catalogue.", body = DiscoveryList),
        (status = 503, description = "The catalogue's store is unavailable.", body = crate::web::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(State(listing): State<Arc<Listing>>, RawQuery(query): RawQuery) -> Response {
    let page = Page::from_query(query.as_deref(), DEFAULT_LIMIT, Some(MAX_LIMIT));
    let kind = query.as_deref().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .filter(|(k, _)| k == "type")
            .last()
            .map(|(_, v)| v.into_owned())
            .filter(|v| !v.is_empty())
    });
    let own: Vec<DiscoveryResource> = if kind.as_deref().is_none_or(|k| k == "http") {
        (listing.own)()
    } else {
        Vec::new()
    };
    let own_count = own.len() as u64;
    let mut items: Vec<DiscoveryResource> = own
        .into_iter()
        .skip(usize::try_from(page.offset).unwrap_or(usize::MAX))
        .take(usize::try_from(page.limit).unwrap_or(usize::MAX))
        .collect();
    let wanted = page.limit - items.len() as u64;
    let (more, others) = match listing
        .settled
        .discovered(kind, page.offset.saturating_sub(own_count), wanted)
        .await
    {
        Ok(found) => found,
        Err(e) => {
            tracing::error!(error = %e, "discovery catalogue unavailable");
            return crate::web::error::ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "the discovery catalogue is unavailable",
            )
            .into_response();
        }
    };
    if wanted > 0 {
        items.extend(more);
    }
    Json(DiscoveryList {
        x402_version: 2,
        items,
        pagination: DiscoveryPagination {
            limit: page.limit,
            offset: page.offset,
            total: own_count + others,
        },
    })
    .into_response()
}
