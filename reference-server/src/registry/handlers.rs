//! Listing, signed media files and the verification page.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use http::{HeaderValue, StatusCode, Uri, header};
use registry_pagination::{Page, PageCount};

use super::Registry;
use super::model::{AssetRecord, Template};
use super::seed::seed_file;
use crate::store::StoreError;
use crate::store::assets::FileSource;
use crate::web::clock::unix_now;
use serde::Serialize;

/// Interface B's error answer, as Django REST Framework writes it: `{"detail": message}`; for invalid input
/// (`kind` `validation_error`) the per-field map in `details` alone (`{"caption": ["..."]}`, DRF's
/// `ValidationError`); the members of any other `details` object beside `detail` (an existing asset's
/// `cid`, the size limit's `max_bytes`). `kind` names the error in the log.
pub(crate) fn error(
    status: StatusCode,
    kind: &str,
    message: &str,
    details: serde_json::Value,
) -> Response {
    tracing::debug!(kind, message, "registry error");
    let body = match details {
        serde_json::Value::Object(fields) if kind == "validation_error" => fields,
        serde_json::Value::Object(mut extra) => {
            extra.insert("detail".into(), message.into());
            extra
        }
        _ => serde_json::Map::from_iter([("detail".to_owned(), message.into())]),
    };
    (status, Json(body)).into_response()
}

/// Interface B's error answer: Django REST Framework's `{"detail": "..."}` (invalid input: a map of field
/// names to lists of messages instead).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct DrfError {
    /// What went wrong.
    detail: String,
}

/// Interface B's 400: Django REST Framework's `ValidationError`, a map of field names to lists of messages
/// (`{"headline": ["Ensure this field has no more than 25 characters."]}`), or `{"detail": "..."}` for a
/// body that cannot be read.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct DrfInvalid(std::collections::BTreeMap<String, serde_json::Value>);

/// A page of the collection: DRF's `LimitOffsetPagination` envelope around the records.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct AssetPage {
    /// How many assets the registry holds.
    count: u64,
    /// The next page's URL, `null` on the last page.
    #[schema(required = true, format = "uri")]
    next: Option<String>,
    /// The previous page's URL, `null` on the first page.
    #[schema(required = true, format = "uri")]
    previous: Option<String>,
    /// The records, newest upload first.
    results: Vec<AssetRecord>,
}

pub(crate) fn store_error(e: &StoreError) -> Response {
    tracing::error!(error = %e, "registry storage error");
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal_error",
        "The registry could not complete the request.",
        serde_json::Value::Null,
    )
}

/// Render one stored record (its JSON object).
#[allow(
    clippy::result_large_err,
    reason = "the error is the HTTP answer itself"
)]
pub(crate) fn render_one(reg: &Registry, id: u64, template: &[u8]) -> Result<Vec<u8>, Response> {
    let mut out = Vec::with_capacity(template.len() * 3 / 2);
    let expires = reg.signer.expires_at(unix_now());
    let page = reg.signer.page(expires);
    page.with_record(id, |rs| {
        Template::render(template, &mut out, reg.base(), rs)
    })
    .map_err(|e| {
        tracing::error!(error = %e, "stored asset template is corrupt");
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "A stored asset record is corrupt.",
            serde_json::Value::Null,
        )
    })?;
    Ok(out)
}

/// `GET /api/v3/assets/`: the page's records as a JSON array, marked with the count for the
/// pagination layer (which writes the envelope around it). Each stored template is copied into the
/// body with its signed URLs spliced in: no JSON re-serialisation.
#[utoipa::path(
    get,
    path = "/api/v3/assets/",
    tag = "registry",
    operation_id = "listAssets",
    summary = "A page of assets, newest upload first (DRF LimitOffsetPagination)",
    description = "`HEAD` answers the same headers without a body; `OPTIONS` answers DRF's metadata. \
        `format=api` or an Accept that prefers text/html renders DRF's browsable page.",
    params(
        ("limit" = Option<u64>, Query, description = "Records per page (default 200, at most 200; a bad value means the default, as DRF)."),
        ("offset" = Option<u64>, Query, description = "Records to skip (a bad value means 0, as DRF)."),
        ("format" = Option<String>, Query, description = "`json` or `api` (the browsable HTML page)."),
    ),
    responses(
        (status = 200, description = "A page.", body = AssetPage,
            headers(("ETag" = String, description = "Strong tag of the page's bytes (If-None-Match answers 304)."))),
        (status = 304, description = "Not modified (If-None-Match matched)."),
        (status = 404, description = "A page past the last one (`Invalid page.`).", body = super::drf::Detail<'static>),
        (status = 406, description = "Accept allows neither JSON nor HTML.", body = super::drf::Detail<'static>),
    ),
)]
pub(crate) async fn list(
    State(reg): State<Arc<Registry>>,
    page: Option<Extension<Page>>,
) -> Response {
    let Page { limit, offset } = page.map(|Extension(p)| p).unwrap_or(Page {
        limit: reg.cfg.page_size,
        offset: 0,
    });
    let expires = reg.signer.expires_at(unix_now());
    let base = reg.cfg.public_base_url.clone();
    let signing = reg.signer.page(expires);
    let page = match reg.store.page(offset, limit).await {
        Ok(page) => page,
        Err(e) => return store_error(&e),
    };
    let size: usize = page.rows.iter().map(|(_, t)| t.len()).sum();
    let mut body = Vec::with_capacity(size * 3 / 2 + 2);
    body.push(b'[');
    for (i, (id, tpl)) in page.rows.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        if let Err(e) = signing.with_record(*id, |rs| Template::render(tpl, &mut body, &base, rs)) {
            return store_error(&StoreError::Invalid(e.to_string()));
        }
    }
    body.push(b']');
    let count = page.count;
    let mut response = Response::new(axum::body::Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.extensions_mut().insert(PageCount(count));
    response
}

/// `GET /media/...`: a file behind a signed URL. Expired, tampered or unsigned → 403.
#[utoipa::path(
    get,
    path = "/media/{path}",
    tag = "registry",
    operation_id = "getMedia",
    summary = "A record's file, behind the signed URL the record carries",
    params(
        ("path" = String, Path, description = "The file's path (as in the record's URL; may contain `/`)."),
        ("Expires" = u64, Query, description = "Unix time the URL stops working."),
        ("Signature" = String, Query, description = "The URL's signature."),
        ("Key-Pair-Id" = String, Query, description = "The signing key's id."),
    ),
    responses(
        (status = 200, description = "The file, with its stored MIME type; ETag is its CID.", body = Vec<u8>, content_type = "application/octet-stream"),
        (status = 304, description = "Not modified (If-None-Match matched)."),
        (status = 403, description = "Unsigned, expired or tampered URL.", body = DrfError),
        (status = 404, description = "No such file.", body = DrfError),
    ),
)]
pub(crate) async fn media(State(reg): State<Arc<Registry>>, uri: Uri) -> Response {
    let path = uri.path();
    if let Err(e) = reg.signer.verify(path, uri.query(), unix_now()) {
        return error(
            StatusCode::FORBIDDEN,
            "forbidden",
            &format!("Invalid media URL: {e}."),
            serde_json::Value::Null,
        );
    }
    let not_found = || {
        error(
            StatusCode::NOT_FOUND,
            "not_found",
            "No such media file.",
            serde_json::Value::Null,
        )
    };
    // A file under its CID is content-addressed: the CID is its ETag.
    let etag = path
        .strip_prefix("/media/a/")
        .and_then(|cid| HeaderValue::from_str(&format!("\"{cid}\"")).ok());
    let (mime, bytes): (String, Vec<u8>) = if let Some(cid) = path.strip_prefix("/media/a/") {
        match reg.store.file(cid.to_owned()).await {
            Ok(file) => match file.source {
                FileSource::Seed(i) => (file.mime, seed_file(i).1),
                FileSource::Stored(rel) => {
                    match tokio::fs::read(reg.cfg.media_dir.join(&rel)).await {
                        Ok(b) => (file.mime, b),
                        Err(e) => {
                            tracing::error!(error = %e, path = %rel, "stored media file is missing");
                            return not_found();
                        }
                    }
                }
            },
            Err(StoreError::NotFound) => return not_found(),
            Err(e) => return store_error(&e),
        }
    } else if let Some(tail) = path.strip_prefix("/media/g/") {
        match super::media::Derived::generate(tail) {
            Some((mime, b)) => (mime.to_owned(), b),
            None => return not_found(),
        }
    } else {
        return not_found();
    };
    let content_type = HeaderValue::from_str(&mime)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let mut response = (
        [
            (header::CONTENT_TYPE, content_type),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("private, max-age=60"),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            // An uploaded file keeps the MIME type its uploader declared (text/html, image/svg+xml...):
            // never let it run script in this server's origin.
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "sandbox; default-src 'none'; img-src 'self'; media-src 'self'",
                ),
            ),
        ],
        bytes,
    )
        .into_response();
    if let Some(etag) = etag {
        response.headers_mut().insert(header::ETAG, etag);
    }
    response
}

/// `GET /api/v3/assets/{cid}/`: one asset, the same record as in the list (JSON, or the browsable page).
#[utoipa::path(
    get,
    path = "/api/v3/assets/{cid}/",
    tag = "registry",
    operation_id = "getAsset",
    summary = "One asset: the same record as in the list",
    description = "`format=api` or an Accept that prefers text/html renders DRF's browsable page.",
    params(("cid" = String, Path, description = "The asset's CIDv1.")),
    responses(
        (status = 200, description = "The asset record.", body = Object),
        (status = 404, description = "No such asset (DRF's shape).", body = super::drf::Detail<'static>),
    ),
)]
pub(crate) async fn detail(
    State(reg): State<Arc<Registry>>,
    cid: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Response {
    let cid = cid.map(|Path(c)| c).unwrap_or_default();
    match record_of(&reg, cid).await {
        Ok(Some(json)) => (
            [(header::CONTENT_TYPE, "application/json")],
            bytes::Bytes::from(json),
        )
            .into_response(),
        Ok(None) => super::drf::detail(StatusCode::NOT_FOUND, "No Asset matches the given query."),
        Err(r) => r,
    }
}

/// The rendered record (JSON) of the asset `cid`: `Ok(None)` when there is none (a path that does not decode
/// to UTF-8, an empty or overlong CID names no asset), `Err` with the answer when storage failed.
async fn record_of(reg: &Registry, cid: String) -> Result<Option<Vec<u8>>, Response> {
    if cid.is_empty() || cid.len() > 128 {
        return Ok(None);
    }
    let (id, tpl) = match reg.store.template(cid).await {
        Ok(t) => t,
        Err(StoreError::NotFound) => return Ok(None),
        Err(e) => return Err(store_error(&e)),
    };
    render_one(reg, id, &tpl).map(Some)
}

/// `GET /verify/{cid}`: the public verification page linked by `certificate_link`.
#[utoipa::path(
    get,
    path = "/verify/{cid}",
    tag = "registry",
    operation_id = "verifyAsset",
    summary = "The public verification page of an asset (its `certificate_link`)",
    params(("cid" = String, Path, description = "The asset's CIDv1.")),
    responses(
        (status = 200, description = "An HTML page.", body = String, content_type = "text/html"),
        (status = 404, description = "No such asset.", body = DrfError),
    ),
)]
pub(crate) async fn verify_page(
    State(reg): State<Arc<Registry>>,
    cid: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Response {
    let cid = cid.map(|Path(c)| c).unwrap_or_default();
    let json = match record_of(&reg, cid).await {
        Ok(Some(json)) => json,
        Ok(None) => {
            return error(
                StatusCode::NOT_FOUND,
                "not_found",
                "No such asset.",
                serde_json::Value::Null,
            );
        }
        Err(r) => return r,
    };
    let rec: serde_json::Value = serde_json::from_slice(&json).unwrap_or_default();
    let s = |k: &str| rec[k].as_str().unwrap_or("").to_owned();
    let integrity = rec["integrity_info"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| {
                    let e = |k: &str| i[k].as_str().unwrap_or("").to_owned();
                    Integrity {
                        provider: e("integrity_provider"),
                        explorer_url: e("explorer_url"),
                        search_id: e("search_id"),
                        created_at: e("created_at"),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    crate::web::pages::render(&VerifyPage {
        cid: s("cid"),
        proof_hash: s("proof_hash"),
        file_url: s("asset_file"),
        file_name: s("asset_file_name"),
        mime: s("asset_file_mime_type"),
        owner: s("owner_profile_display_name"),
        uploaded_at: s("uploaded_at"),
        integrity,
    })
}

/// One integrity record on the verification page.
struct Integrity {
    provider: String,
    explorer_url: String,
    search_id: String,
    created_at: String,
}

#[derive(askama::Template)]
#[template(path = "verify.html")]
struct VerifyPage {
    cid: String,
    proof_hash: String,
    file_url: String,
    file_name: String,
    mime: String,
    owner: String,
    uploaded_at: String,
    integrity: Vec<Integrity>,
}
