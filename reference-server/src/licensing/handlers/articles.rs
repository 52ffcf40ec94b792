//! The catalog and the paid article: `/x402Article/list`, `/x402Article`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use x402_tower::extensions::offer_receipt::SignedReceipt;
use x402_tower::proto::checksum;

use crate::domain::{Article, Receipt};
use crate::licensing::Licensing;
use crate::licensing::articles::ForSale;
use crate::licensing::offers::LicenseChoice;
use crate::licensing::payment::PaidBy;
use crate::licensing::receipt::{self};
use crate::store::StoreError;
use crate::web::clock::now_rfc3339;
use crate::web::error::{ApiError, Problem};

/// Longest `articleId` accepted (ids are short slugs).
pub const MAX_ARTICLE_ID_LEN: usize = 128;

/// One element of `GET /x402Article/list`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CatalogEntry {
    /// The `articleId` to buy it with.
    id: String,
    /// Title.
    title: String,
    /// A free excerpt.
    excerpt: String,
    /// `YYYY-MM-DD`.
    #[schema(format = Date)]
    published_date: String,
    /// Price in USDC (the 402 carries it in atomic units).
    price_amount: f64,
}

/// `GET /x402Article/list`: the free catalog (for a browser, the landing page, which lists it for people).
#[utoipa::path(
    get,
    path = "/x402Article/list",
    tag = "licensing",
    operation_id = "listArticles",
    summary = "The catalog of published articles (free)",
    responses((status = 200, description = "Published articles, newest first (an `Accept` preferring text/html gets them as a page).", body = Vec<CatalogEntry>)),
)]
pub async fn list_articles(
    State(state): State<Arc<Licensing>>,
    headers: axum::http::HeaderMap,
) -> Response {
    let vary = (header::VARY, HeaderValue::from_static("accept"));
    if x402_tower::layer::prefers_html(&headers) {
        let page = crate::licensing::landing::landing(State(state)).await;
        return ([vary], page).into_response();
    }
    (
        [(header::LINK, state.license_link.clone()), vary],
        Json(
            state
                .articles
                .list()
                .iter()
                .map(|a| CatalogEntry {
                    price_amount: crate::licensing::usdc_amount(a.price_atomic),
                    id: a.id.clone(),
                    title: a.title.clone(),
                    excerpt: a.excerpt.clone(),
                    published_date: a.published_date.clone(),
                })
                .collect::<Vec<_>>(),
        ),
    )
        .into_response()
}

/// `Link: <…/license.xml>; rel="license"; type="application/rsl+xml"` (RSL discovery).
pub fn license_link(public_url: &str) -> HeaderValue {
    HeaderValue::try_from(format!(
        "<{public_url}/license.xml>; rel=\"license\"; type=\"{}\"",
        crate::domain::license::RSL_MEDIA_TYPE
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("</license.xml>; rel=\"license\""))
}

/// Query of `GET /x402Article`.
#[derive(Debug, Deserialize)]
pub struct ArticleQuery {
    #[serde(rename = "articleId")]
    pub(crate) article_id: Option<String>,
    /// One of the article's licenses (`inference`, `training`...); absent: every license is offered.
    pub(crate) license: Option<String>,
}

/// In front of the x402 layer on `/x402Article` (the paid route's middleware in `licensing/routes.rs`): the
/// request with its article,
/// license terms and license choice in its extensions, where the x402 layer reads its price and the
/// handler its text; or the 400 (no `articleId`) or 404 (an unknown or unpublished article, never a 402)
/// to answer instead.
pub fn with_article(state: &Licensing, mut request: Request) -> Result<Request, ApiError> {
    let query = Query::<ArticleQuery>::try_from_uri(request.uri());
    let (id, license) = match query {
        Ok(Query(ArticleQuery {
            article_id: Some(id),
            license,
        })) if !id.trim().is_empty() => (id, license),
        Ok(_) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "missing_article_id",
                "the query parameter articleId is required, e.g. /x402Article?articleId=<id from /x402Article/list>",
            ));
        }
        Err(e) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                e.body_text(),
            ));
        }
    };
    if id.len() > MAX_ARTICLE_ID_LEN {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_article_id",
            format!("articleId is longer than {MAX_ARTICLE_ID_LEN} bytes"),
        ));
    }
    // From the in-memory catalog: no database read for a 402 (or before a purchase).
    let Some(ForSale {
        article,
        terms,
        offers,
        ..
    }) = state.articles.for_sale(&id)
    else {
        return Err(ApiError::not_found(format!(
            "no published article has id {id:?}"
        )));
    };
    let choice = match license.as_deref().filter(|l| !l.is_empty()) {
        None => LicenseChoice(None),
        Some(l) => match article.licenses.iter().position(|x| x.id == l) {
            Some(i) => LicenseChoice(Some(i)),
            None => {
                let ids: Vec<&str> = article.licenses.iter().map(|x| x.id.as_str()).collect();
                return Err(ApiError::not_found(format!(
                    "article {id:?} has no license {:?}; its licenses: {}",
                    l.chars().take(MAX_ARTICLE_ID_LEN).collect::<String>(),
                    ids.join(", ")
                )));
            }
        },
    };
    request.extensions_mut().insert(article);
    request.extensions_mut().insert(terms);
    if let Some(details) = offers.paywall(choice) {
        request.extensions_mut().insert(details);
    }
    request.extensions_mut().insert(offers);
    request.extensions_mut().insert(choice);
    Ok(request)
}

/// The license terms' `Link`, on the 402 and on the paid article alike (RSL discovery).
pub fn with_license_link(state: &Licensing, mut response: Response) -> Response {
    if matches!(
        response.status(),
        StatusCode::OK | StatusCode::PAYMENT_REQUIRED
    ) {
        response
            .headers_mut()
            .append(header::LINK, state.license_link.clone());
    }
    response
}

/// `GET /x402Article?articleId=` after a valid payment: store the receipt, then answer the article.
#[utoipa::path(
    get,
    path = "/x402Article",
    tag = "licensing",
    operation_id = "getArticle",
    summary = "One article, sold at its own price",
    description = "Without a payment: 402 with the offer (x402 v1 body, v2 `PAYMENT-REQUIRED` header). With a \
        valid payment: the article and its license receipt. A browser (Accept prefers text/html) gets the \
        402 as a paywall page. `HEAD` answers the 402 and its headers and never takes a payment.",
    params(
        ("articleId" = String, Query, description = "An `id` from the catalog (at most 128 bytes)."),
        ("license" = Option<String>, Query, description = "One of the article's licenses (`/license.xml`); without it every license is offered, one offer each."),
        x402_tower::layer::openapi::PaymentHeaders,
    ),
    responses(
        (status = 200, description = "Paid: the article and its license receipt.", body = PaidArticle<'static>,
            headers(
                ("PAYMENT-RESPONSE" = String, description = "x402 v2 (paid with PAYMENT-SIGNATURE): Base64 of the JSON SettleResponse."),
                ("X-PAYMENT-RESPONSE" = String, description = "x402 v1 (paid with X-PAYMENT): Base64 of the JSON SettleResponse."),
            )),
        (status = 400, description = "`articleId` missing or too long.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No published article has this id, or it has no such license (never a 402).", body = Problem, content_type = "application/problem+json"),
        x402_tower::layer::openapi::PaymentRequired,
        (status = 502, description = "The facilitator failed or answered garbage; nothing was charged.", body = x402_tower::proto::PaymentRequiredV1),
        (status = 503, description = "The payment store is unavailable; retry later. Nothing was charged. Or (a problem document with code `receipt_not_stored`, `PAYMENT-RESPONSE` and `Retry-After`): the payment settled but its receipt could not be stored; resend the identical payment to get the article, it is not charged again.", body = x402_tower::proto::PaymentRequiredV1),
    ),
)]
pub async fn get_article(
    State(state): State<Arc<Licensing>>,
    request: Request,
) -> Result<Response, ApiError> {
    if let (Some(article), Some(signed)) = (
        request.extensions().get::<Arc<Article>>(),
        request
            .extensions()
            .get::<x402_tower::extensions::siwx::SignedIn>(),
    ) {
        let choice = request
            .extensions()
            .get::<LicenseChoice>()
            .copied()
            .unwrap_or(LicenseChoice(None));
        return read_again(&state, article, choice, signed, request.uri()).await;
    }
    let choice = request
        .extensions()
        .get::<LicenseChoice>()
        .copied()
        .unwrap_or(LicenseChoice(None));
    let (article, payment) = match (
        request.extensions().get::<Arc<Article>>(),
        PaidBy::from_extensions(request.extensions()),
    ) {
        (Some(a), Some(p)) => (a.clone(), p),
        _ => {
            // Only a wiring mistake gets here: the route is always behind with_article and x402.
            tracing::error!("article handler reached without an article or a verified payment");
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "payment_layer_missing",
                "the server is misconfigured",
            ));
        }
    };
    let token_id = crate::domain::token::token_id(
        &payment.network,
        &payment.asset,
        &payment.payer,
        &payment.nonce,
        payment.valid_before,
    );
    // The license the payment bought: the one its offer sells (offers are in license order, per method).
    let license = crate::licensing::offers::license_of_offer(&article, choice, payment.offer_index);
    let record = Arc::new(Receipt {
        license_id: license.map(|l| l.id.clone()),
        // The version its 402 declared (computed once per catalog load, not per purchase).
        license_version: request
            .extensions()
            .get::<Arc<x402_tower::extensions::terms::Terms>>()
            .and_then(|t| t.info().version.clone()),
        agent: request
            .extensions()
            .get::<crate::licensing::bot_auth::VerifiedAgent>()
            .map(|a| a.agent.clone()),
        token_id: token_id.clone(),
        article_id: article.id.clone(),
        payer: payment.payer.clone(),
        pay_to: payment.pay_to.clone(),
        amount_atomic: payment.amount.clone(),
        network: payment.network.clone(),
        asset: payment.asset.clone(),
        nonce: payment.nonce.clone(),
        x402_version: payment.x402_version,
        settlement: payment.transaction.clone(),
        created_at: now_rfc3339(),
        signed: payment.signed.as_ref().map(|s| s.get().to_owned()),
    });
    match state.licensing.insert_receipt(record.clone()).await {
        Ok(()) => {
            state.metrics.record_receipt(true);
            // The license token is minted after the receipt is durable, in the background.
            if let Some(m) = &state.minter {
                m.nudge();
            }
        }
        Err(StoreError::Conflict(_)) => {
            // A receipt for this payment exists. The engine lets a payment through twice only as the
            // redelivery of the identical payment for the same article (the buyer lost the first answer):
            // answer that receipt again. Anything else is a replay the receipts' unique key caught (the last
            // line of defence behind the engine's payment records).
            match state.licensing.receipt(&token_id).await? {
                Some(existing) if existing.article_id == article.id => {
                    tracing::info!(article = %article.id, payer = %payment.payer, token_id = %token_id,
                        redelivered = payment.redelivered, "license delivered again");
                    return Ok(stored_article_response(&state, &article, &existing));
                }
                _ => {
                    tracing::warn!(payer = %payment.payer, nonce = %payment.nonce, "payment already used for a receipt");
                    return Ok(replayed_payment(&state, &article, choice, request.uri()));
                }
            }
        }
        Err(e) => {
            state.metrics.record_receipt(false);
            tracing::error!(
                error = %e, payer = %payment.payer, nonce = %payment.nonce, article = %article.id,
                transaction = ?payment.transaction, "PAID REQUEST WITHOUT RECEIPT: receipt write failed"
            );
            // The payment is settled (the x402 layer adds its PAYMENT-RESPONSE to this answer) and its
            // record says so: the identical resend is let through again, without a second settlement, and
            // stores the receipt then.
            return Ok(receipt_not_stored());
        }
    }
    tracing::info!(article = %article.id, payer = %payment.payer, token_id = %token_id, "license issued");
    // The signed receipt as the layer gave it: `record.signed` is the same text, for the store.
    Ok(article_response(
        &state,
        &article,
        &record,
        payment.signed.as_deref(),
    ))
}

/// How long a buyer whose receipt could not be stored is asked to wait before resending (seconds).
const RESEND_AFTER_SECS: &str = "2";

/// 503 for a paid request whose license receipt could not be stored: the payment is settled, the article
/// withheld until its receipt is durable; the identical resend gets both.
fn receipt_not_stored() -> Response {
    let mut response = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "receipt_not_stored",
        "your payment is settled (see PAYMENT-RESPONSE) but its license receipt could not be stored; send          the identical request again, with the same PAYMENT-SIGNATURE, to get the article and its receipt:          it will not be charged again",
    )
    .into_response();
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RESEND_AFTER_SECS),
    );
    response
}

/// A buyer who signed in with x (sign-in-with-x) reads an article it bought again: the same answer as its
/// purchase, with the receipt it got then; the read is recorded, no new receipt is issued.
async fn read_again(
    state: &Licensing,
    article: &Article,
    choice: LicenseChoice,
    signed: &x402_tower::extensions::siwx::SignedIn,
    uri: &axum::http::Uri,
) -> Result<Response, ApiError> {
    let payer = checksum(&signed.address);
    let Some(receipt) = state.licensing.receipt_of(&payer, &article.id).await? else {
        // The layer's check found a receipt a moment ago; answer as if it had not.
        let offers = crate::licensing::offers::article_offers(
            &state.settings.payment,
            state.settings.pay_to,
            article,
            choice,
        );
        return Ok(interface_402(
            state,
            &offers,
            uri,
            x402_tower::extensions::siwx::Refusal::NotPaid.as_str(),
        ));
    };
    state
        .licensing
        .record_read(receipt.token_id.clone(), now_rfc3339())
        .await?;
    state.metrics.record_reread();
    tracing::info!(article = %article.id, payer = %payer, token_id = %receipt.token_id,
        "license read again (signed in with x)");
    Ok(stored_article_response(state, article, &receipt))
}

/// The paid answer of `GET /x402Article`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PaidArticle<'a> {
    /// The article.
    article: ArticleText<'a>,
    /// Where its license receipt is.
    receipt: ReceiptLinks<'a>,
}

/// `article` of a [`PaidArticle`].
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ArticleText<'a> {
    /// Title.
    title: &'a str,
    /// The full text.
    content: &'a str,
    /// Author.
    author_name: &'a str,
}

/// `receipt` of a [`PaidArticle`].
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReceiptLinks<'a> {
    /// The receipt's token.
    nft: ReceiptToken,
    /// The printable certificate.
    certificate: CertificateLink,
    /// The receipt signed by the server's receipt key (x402 offer-receipt, EIP-712): check it offline
    /// against the key the server publishes (`receiptSigner` of the verify URL). The same as in
    /// `PAYMENT-RESPONSE`; absent only for receipts issued before signing existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<SignedReceipt>)]
    signed: Option<&'a RawValue>,
    /// The license bought (its id, the terms version, the RSL document).
    #[serde(skip_serializing_if = "Option::is_none")]
    license: Option<receipt::LicenseBought>,
}

/// `receipt.nft`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptToken {
    /// The receipt's id (a decimal number).
    token_id: String,
    /// `GET` it for the stored receipt (JSON).
    #[schema(format = "uri")]
    verify_url: String,
}

/// `receipt.certificate`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CertificateLink {
    /// The HTML certificate.
    #[schema(format = "uri")]
    url: String,
}

/// The paid answer for a stored receipt (a resend, a sign-in-with-x re-read): its signed form read from the
/// store.
fn stored_article_response(state: &Licensing, article: &Article, receipt: &Receipt) -> Response {
    // Shown when it reads as a signed receipt, as the text it was stored as.
    let signed = receipt
        .signed
        .as_deref()
        .filter(|text| receipt::parse_signed(Some(text)).is_some())
        .and_then(|text| serde_json::from_str::<&RawValue>(text).ok());
    article_response(state, article, receipt, signed)
}

/// The paid answer: the article and its receipt links, with `signed`, the receipt's signed form (the one it
/// was just written from, or [`stored_article_response`]'s read).
fn article_response(
    state: &Licensing,
    article: &Article,
    receipt: &Receipt,
    signed: Option<&RawValue>,
) -> Response {
    let token_id = receipt.token_id.as_str();
    let license = receipt::LicenseBought::of(
        receipt,
        &state.public_url,
        state.articles.for_sale(&article.id).as_ref(),
    );
    let paid = PaidArticle {
        article: ArticleText {
            title: &article.title,
            content: &article.content,
            author_name: &article.author_name,
        },
        receipt: ReceiptLinks {
            nft: ReceiptToken {
                token_id: token_id.to_owned(),
                verify_url: receipt::verify_url(&state.public_url, token_id),
            },
            certificate: CertificateLink {
                url: receipt::certificate_url(&state.public_url, token_id),
            },
            signed,
            license,
        },
    };
    // Written into one buffer of about its size: axum's `Json` starts at 128 bytes and doubles up to the
    // ~4 KB of an article, copying it each time (five growths per purchase).
    let guess = 2048 + article.title.len() + article.content.len() + article.author_name.len();
    let mut body = Vec::with_capacity(guess + signed.map_or(0, |s| s.get().len()));
    match serde_json::to_writer(&mut body, &paid) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response(),
        // Not reached (strings and numbers only); answered as `Json` answers it.
        Err(_) => Json(paid).into_response(),
    }
}

/// The 402 for a payment the receipts table already holds: the x402 layer's 402 for the article's offer
/// (requirements headers and v1 body), with the layer's nonce-reuse reason.
fn replayed_payment(
    state: &Licensing,
    article: &Article,
    choice: LicenseChoice,
    uri: &axum::http::Uri,
) -> Response {
    let offers = crate::licensing::offers::article_offers(
        &state.settings.payment,
        state.settings.pay_to,
        article,
        choice,
    );
    interface_402(
        state,
        &offers,
        uri,
        x402_tower::verify::RejectReason::NonceAlreadyUsed.as_str(),
    )
}

/// A 402 of a handler (after the layer let the request through) with `error`, headed like the layer's:
/// `PAYMENT-REQUIRED`, and `X-Payment-Required` as interface A names it (the same here: no extensions).
fn interface_402(
    state: &Licensing,
    offers: &[x402_tower::PaymentOffer],
    uri: &axum::http::Uri,
    error: &str,
) -> Response {
    use x402_tower::header::{PAYMENT_REQUIRED, X_PAYMENT_REQUIRED};
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut res = x402_tower::layer::payment_required_response(
        offers,
        &format!("{}{}", state.public_url, path),
        error,
    );
    if let Some(requirements) = res.headers().get(PAYMENT_REQUIRED).cloned() {
        res.headers_mut().insert(X_PAYMENT_REQUIRED, requirements);
    }
    res.into_response()
}
