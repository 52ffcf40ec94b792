//! License receipts: `/receipts/signer`, `/receipts/{token_id}`, `/receipts/{token_id}/certificate`.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::Html;
use serde::Serialize;

use crate::domain::{Article, Receipt};
use crate::licensing::Licensing;
use crate::licensing::receipt::{self, ReceiptView};
use crate::web::error::{ApiError, Problem};

fn valid_token_id(token: &str) -> bool {
    !token.is_empty() && token.len() <= 78 && token.bytes().all(|b| b.is_ascii_digit())
}

async fn load_receipt(
    state: &Licensing,
    token: &str,
) -> Result<(Receipt, Option<Article>), ApiError> {
    let missing = || ApiError::not_found(format!("no receipt has token id {token:?}"));
    if !valid_token_id(token) {
        return Err(missing());
    }
    let r = state.licensing.receipt(token).await?.ok_or_else(missing)?;
    let article = state.licensing.article(&r.article_id).await?;
    Ok((r, article))
}

/// `GET /receipts/signer`: the key this server signs offers and receipts with.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptSigner {
    /// The address a signed offer's or receipt's EIP-712 signature recovers to.
    address: String,
    /// The extension whose signatures these are.
    extension: &'static str,
    /// The EIP-712 domains (no verifying contract; chainId 1 whatever the payment network).
    domains: [serde_json::Value; 2],
    /// Where the verification steps are written.
    how_to_verify: &'static str,
}

/// `GET /receipts/signer`: the published receipt key.
#[utoipa::path(
    get,
    path = "/receipts/signer",
    tag = "licensing",
    operation_id = "getReceiptSigner",
    summary = "The address that signs this server's offers and receipts (x402 offer-receipt)",
    responses((status = 200, description = "The receipt key's address.", body = ReceiptSigner)),
)]
pub async fn receipt_signer(State(state): State<Arc<Licensing>>) -> Json<ReceiptSigner> {
    Json(ReceiptSigner {
        address: state
            .settings
            .receipt_key
            .signer()
            .address()
            .to_checksum(None),
        extension: x402_tower::extensions::offer_receipt::KEY,
        domains: [
            serde_json::json!({"name": "x402 offer", "version": "1", "chainId": 1}),
            serde_json::json!({"name": "x402 receipt", "version": "1", "chainId": 1}),
        ],
        how_to_verify: "docs/interfaces.md#signed-offers-and-receipts-offer-receipt",
    })
}

/// `GET /receipts/{tokenId}`: the receipt as JSON (the `verifyUrl`).
#[utoipa::path(
    get,
    path = "/receipts/{tokenId}",
    tag = "licensing",
    operation_id = "getReceipt",
    summary = "A license receipt as stored (the `verifyUrl` of a paid answer)",
    params(("tokenId" = String, Path, description = "The receipt's token id.")),
    responses(
        (status = 200, description = "The receipt.", body = ReceiptView),
        (status = 404, description = "No such receipt.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn receipt_json(
    State(state): State<Arc<Licensing>>,
    token: Result<Path<String>, PathRejection>,
) -> Result<Json<ReceiptView>, ApiError> {
    // A path that does not decode to UTF-8 names no receipt: the same JSON 404.
    let token = token.map(|Path(t)| t).unwrap_or_default();
    let (r, article) = load_receipt(&state, &token).await?;
    let title = article.as_ref().map_or("", |a| a.title.as_str());
    let mut view = ReceiptView::new(
        &r,
        title,
        &state.public_url,
        state.settings.receipt_key.signer().address(),
        state.articles.for_sale(&r.article_id).as_ref(),
    );
    view.license_token = Some(receipt::LicenseTokenView::of(&r, &state).await);
    Ok(Json(view))
}

/// `GET /receipts/{tokenId}/certificate`: the HTML certificate.
#[utoipa::path(
    get,
    path = "/receipts/{tokenId}/certificate",
    tag = "licensing",
    operation_id = "getReceiptCertificate",
    summary = "A printable HTML license certificate (the `certificate.url` of a paid answer)",
    params(("tokenId" = String, Path, description = "The receipt's token id.")),
    responses(
        (status = 200, description = "The certificate.", body = String, content_type = "text/html"),
        (status = 404, description = "No such receipt.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn receipt_certificate(
    State(state): State<Arc<Licensing>>,
    token: Result<Path<String>, PathRejection>,
) -> Result<Html<String>, ApiError> {
    let token = token.map(|Path(t)| t).unwrap_or_default();
    let (r, article) = load_receipt(&state, &token).await?;
    let token = receipt::LicenseTokenView::of(&r, &state).await;
    Ok(Html(receipt::certificate_html(
        &r,
        article.as_ref(),
        state.settings.receipt_key.signer().address(),
        &state.public_url,
        &token,
    )))
}
