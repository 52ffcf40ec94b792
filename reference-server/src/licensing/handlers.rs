//! Thin axum handlers of interface A.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{ConnectInfo, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use x402_tower::extensions::offer_receipt::SignedReceipt;
use x402_tower::proto::checksum;

use super::articles::ForSale;
use super::payment::{LicenseChoice, PaidBy};
use super::receipt::{self, ReceiptView};
use crate::app::AppState;
use crate::domain::{Article, Receipt};
use crate::store::StoreError;
use crate::store::settlements::{SettlementOutcome, SettlementRecord};
use crate::web::clock::now_rfc3339;
use crate::web::error::{ApiError, ErrorBody};

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

/// `GET /x402Article/list`: the free catalog.
#[utoipa::path(
    get,
    path = "/x402Article/list",
    tag = "licensing",
    operation_id = "listArticles",
    summary = "The catalog of published articles (free)",
    responses((status = 200, description = "Published articles, newest first.", body = Vec<CatalogEntry>)),
)]
pub async fn list_articles(
    State(state): State<Arc<AppState>>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        [(header::LINK, state.license_link.clone())],
        Json(
            state
                .articles
                .list()
                .iter()
                .map(|a| CatalogEntry {
                    price_amount: super::usdc_amount(a.price_atomic),
                    id: a.id.clone(),
                    title: a.title.clone(),
                    excerpt: a.excerpt.clone(),
                    published_date: a.published_date.clone(),
                })
                .collect::<Vec<_>>(),
        ),
    ))
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
    article_id: Option<String>,
    /// One of the article's licenses (`inference`, `training`...); absent: every license is offered.
    license: Option<String>,
}

/// In front of the x402 layer on `/x402Article` (`app::paid_article`): the request with its article,
/// license terms and license choice in its extensions, where the x402 layer reads its price and the
/// handler its text; or the 400 (no `articleId`) or 404 (an unknown or unpublished article, never a 402)
/// to answer instead.
pub fn with_article(state: &AppState, mut request: Request) -> Result<Request, ApiError> {
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
    request.extensions_mut().insert(offers);
    request.extensions_mut().insert(choice);
    Ok(request)
}

/// The license terms' `Link`, on the 402 and on the paid article alike (RSL discovery).
pub fn with_license_link(state: &AppState, mut response: Response) -> Response {
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
        (status = 200, description = "Paid: the article and its license receipt.", body = PaidArticle,
            headers(
                ("PAYMENT-RESPONSE" = String, description = "x402 v2 (paid with PAYMENT-SIGNATURE): Base64 of the JSON SettleResponse."),
                ("X-PAYMENT-RESPONSE" = String, description = "x402 v1 (paid with X-PAYMENT): Base64 of the JSON SettleResponse."),
            )),
        (status = 400, description = "`articleId` missing or too long.", body = ErrorBody),
        (status = 404, description = "No published article has this id, or it has no such license (never a 402).", body = ErrorBody),
        x402_tower::layer::openapi::PaymentRequired,
        (status = 502, description = "The facilitator failed or answered garbage; nothing was charged.", body = x402_tower::proto::PaymentRequiredV1),
        (status = 503, description = "The payment store is unavailable; retry later. Nothing was charged.", body = x402_tower::proto::PaymentRequiredV1),
    ),
)]
pub async fn get_article(
    State(state): State<Arc<AppState>>,
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
    // The license the payment bought: the one its offer sells (offers are in license order).
    let license = super::payment::licenses_offered(&article, choice).get(payment.offer_index);
    let record = Arc::new(Receipt {
        license_id: license.map(|l| l.id.clone()),
        // The version its 402 declared (computed once per catalog load, not per purchase).
        license_version: request
            .extensions()
            .get::<Arc<x402_tower::extensions::terms::Terms>>()
            .and_then(|t| t.info().version.clone()),
        agent: request
            .extensions()
            .get::<super::bot_auth::VerifiedAgent>()
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
            return Err(e.into());
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

/// A buyer who signed in with x (sign-in-with-x) reads an article it bought again: the same answer as its
/// purchase, with the receipt it got then; the read is recorded, no new receipt is issued.
async fn read_again(
    state: &AppState,
    article: &Article,
    choice: LicenseChoice,
    signed: &x402_tower::extensions::siwx::SignedIn,
    uri: &axum::http::Uri,
) -> Result<Response, ApiError> {
    let payer = checksum(&signed.address);
    let Some(receipt) = state.licensing.receipt_of(&payer, &article.id).await? else {
        // The layer's check found a receipt a moment ago; answer as if it had not.
        let offers = super::payment::article_offers(
            &state.settings.payment,
            state.settings.pay_to,
            article,
            choice,
        );
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        return Ok(x402_tower::layer::payment_required_response(
            &offers,
            &format!("{}{}", state.public_url, path),
            x402_tower::extensions::siwx::Refusal::NotPaid.as_str(),
        )
        .into_response());
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
fn stored_article_response(state: &AppState, article: &Article, receipt: &Receipt) -> Response {
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
    state: &AppState,
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
    state: &AppState,
    article: &Article,
    choice: LicenseChoice,
    uri: &axum::http::Uri,
) -> Response {
    let offers = super::payment::article_offers(
        &state.settings.payment,
        state.settings.pay_to,
        article,
        choice,
    );
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    x402_tower::layer::payment_required_response(
        &offers,
        &format!("{}{}", state.public_url, path),
        x402_tower::verify::RejectReason::NonceAlreadyUsed.as_str(),
    )
    .into_response()
}

/// `GET /serveLlmsTxt`: the licensing instructions; each call is recorded as interest in licensing.
#[utoipa::path(
    get,
    path = "/serveLlmsTxt",
    tag = "licensing",
    operation_id = "serveLlmsTxt",
    summary = "Licensing instructions for machines (llms.txt)",
    description = "Each request is recorded as interest in licensing (client address and user agent).",
    responses((status = 200, description = "Plain-text instructions.", body = String, content_type = "text/plain")),
)]
pub async fn serve_llms_txt(
    State(state): State<Arc<AppState>>,
    request: Request,
) -> Result<Response, ApiError> {
    state.interest.record(
        time::OffsetDateTime::now_utc(),
        &request
            .headers()
            .get(header::USER_AGENT)
            .map(|v| String::from_utf8_lossy(v.as_bytes()))
            .unwrap_or_default(),
        request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip()),
        request
            .extensions()
            .get::<super::bot_auth::VerifiedAgent>()
            .map(|a| a.agent.as_str()),
    );
    let articles = state.articles.list();
    let text = super::llms_txt::render(
        &state.public_url,
        &state.settings.payment,
        &state.settings.pay_to.to_checksum(None),
        &articles,
    );
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

/// `GET /license.xml[?articleId=]`: the RSL 1.0 document of the catalog, or of one article (the `terms` URL
/// of its 402).
#[utoipa::path(
    get,
    path = "/license.xml",
    tag = "licensing",
    operation_id = "getLicenseTerms",
    summary = "License terms for machines (RSL 1.0)",
    params(("articleId" = Option<String>, Query, description = "One article's terms only.")),
    responses(
        (status = 200, description = "The RSL document.", body = String, content_type = "application/rsl+xml"),
        (status = 404, description = "No published article has this id.", body = ErrorBody),
    ),
)]
pub async fn license_xml(
    State(state): State<Arc<AppState>>,
    query: Result<Query<ArticleQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e.body_text()))?;
    let articles = match query.article_id.as_deref().filter(|id| !id.is_empty()) {
        Some(id) => vec![state.articles.published(id).ok_or_else(|| {
            ApiError::not_found(format!(
                "no published article has id {:?}",
                id.chars().take(MAX_ARTICLE_ID_LEN).collect::<String>()
            ))
        })?],
        None => state.articles.list(),
    };
    let contents: Vec<_> = articles
        .iter()
        .map(|a| crate::licensing::rsl::rsl_content(&state.public_url, &a.id, &a.licenses))
        .collect();
    Ok((
        [(header::CONTENT_TYPE, crate::domain::license::RSL_MEDIA_TYPE)],
        crate::licensing::rsl::rsl_document(&state.public_url, &contents),
    )
        .into_response())
}

/// `GET /robots.txt`: crawling allowed; the `License:` line points at the RSL terms.
pub async fn robots_txt(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!(
            "# Content on this site is licensed per article over x402 (HTTP 402, USDC).\n\
             # Machine-readable terms (RSL 1.0): what each license permits, prohibits and costs.\n\
             License: {url}/license.xml\n\n\
             User-agent: *\n\
             Allow: /\n",
            url = state.public_url
        ),
    )
        .into_response()
}

/// Query of `GET /operator/licensing`.
#[derive(Debug, Deserialize)]
pub struct LicensingViewQuery {
    days: Option<String>,
}

/// Most days `GET /operator/licensing` looks back (and its default).
pub const MAX_LICENSING_DAYS: u32 = 366;

/// Purchases and interest of one verified agent (or of unsigned requests: `agent` = `""`).
#[derive(Debug, Default, Serialize)]
pub struct AgentActivity {
    agent: String,
    llms_txt_requests: u64,
    purchases: u64,
    amount_atomic: u64,
    /// Purchases per license id.
    licenses: std::collections::BTreeMap<String, u64>,
}

/// Purchases of one article's license.
#[derive(Debug, Default, Serialize)]
pub struct LicenseActivity {
    article_id: String,
    license_id: String,
    purchases: u64,
    amount_atomic: u64,
    /// Distinct verified agents that bought it.
    agents: std::collections::BTreeSet<String>,
}

/// The answer of `GET /operator/licensing`.
#[derive(Debug, Serialize)]
pub struct LicensingView {
    since: String,
    by_agent: Vec<AgentActivity>,
    by_license: Vec<LicenseActivity>,
    /// Per day, agent and license, newest first.
    daily_purchases: Vec<crate::store::articles::DailyPurchases>,
    /// Per day and agent, newest first.
    daily_llms_txt: Vec<crate::store::articles::DailyInterest>,
}

/// `GET /operator/licensing[?days=n]`: interest (llms.txt) and purchases per verified agent (Web Bot Auth)
/// and per license, over the last `n` days (default 30), with the per-day rows. `agent` `""` gathers
/// unsigned requests. Same operator-token rule as `/operator/llms-txt`.
pub async fn licensing_view(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    query: Result<Query<LicensingViewQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    if let Some(denied) = operator_auth(&state, &headers) {
        return Ok(denied);
    }
    let Query(query) = query
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e.body_text()))?;
    let days = match query.days.as_deref() {
        None | Some("") => 30,
        Some(d) => d
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_LICENSING_DAYS).contains(n))
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_days",
                    format!("days must be 1 to {MAX_LICENSING_DAYS}"),
                )
            })?,
    };
    let since =
        (time::OffsetDateTime::now_utc() - time::Duration::days(i64::from(days) - 1)).date();
    let since = format!(
        "{:04}-{:02}-{:02}",
        since.year(),
        u8::from(since.month()),
        since.day()
    );
    let (purchases, interest) = state.licensing.licensing_activity(since.clone()).await?;
    let mut by_agent: std::collections::BTreeMap<String, AgentActivity> = Default::default();
    let mut by_license: std::collections::BTreeMap<(String, String), LicenseActivity> =
        Default::default();
    for p in &purchases {
        let a = by_agent.entry(p.agent.clone()).or_default();
        a.purchases += p.purchases;
        a.amount_atomic += p.amount_atomic;
        *a.licenses.entry(p.license_id.clone()).or_default() += p.purchases;
        let l = by_license
            .entry((p.article_id.clone(), p.license_id.clone()))
            .or_default();
        l.purchases += p.purchases;
        l.amount_atomic += p.amount_atomic;
        if !p.agent.is_empty() {
            l.agents.insert(p.agent.clone());
        }
    }
    for i in &interest {
        by_agent
            .entry(i.agent.clone())
            .or_default()
            .llms_txt_requests += i.requests;
    }
    let mut by_agent: Vec<AgentActivity> = by_agent
        .into_iter()
        .map(|(agent, a)| AgentActivity { agent, ..a })
        .collect();
    by_agent.sort_by(|x, y| y.purchases.cmp(&x.purchases).then(x.agent.cmp(&y.agent)));
    let mut by_license: Vec<LicenseActivity> = by_license
        .into_iter()
        .map(|((article_id, license_id), l)| LicenseActivity {
            article_id,
            license_id,
            ..l
        })
        .collect();
    by_license.sort_by_key(|l| std::cmp::Reverse(l.purchases));
    Ok(Json(LicensingView {
        since,
        by_agent,
        by_license,
        daily_purchases: purchases,
        daily_llms_txt: interest,
    })
    .into_response())
}

fn valid_token_id(token: &str) -> bool {
    !token.is_empty() && token.len() <= 78 && token.bytes().all(|b| b.is_ascii_digit())
}

async fn load_receipt(
    state: &AppState,
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
pub async fn receipt_signer(State(state): State<Arc<AppState>>) -> Json<ReceiptSigner> {
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
        (status = 404, description = "No such receipt.", body = ErrorBody),
    ),
)]
pub async fn receipt_json(
    State(state): State<Arc<AppState>>,
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
        (status = 404, description = "No such receipt.", body = ErrorBody),
    ),
)]
pub async fn receipt_certificate(
    State(state): State<Arc<AppState>>,
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

/// The operator endpoints always require the operator token (`Authorization: token <t>`):
/// `Some(401 response)` when it is missing or wrong, `None` when the request may proceed.
fn operator_auth(state: &AppState, headers: &HeaderMap) -> Option<Response> {
    let expected = state.settings.operator_token.as_str();
    if crate::web::auth::carries(headers, "token", expected) {
        return None;
    }
    let mut resp = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "send the operator token as `Authorization: token <t>` (--api-token, or the one the server printed at start)",
    )
    .into_response();
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Token"));
    Some(resp)
}

/// `GET /operator/llms-txt`: llms.txt interest for the operator (totals, by user agent, recent hits).
/// Requires the operator token (`Authorization: token <t>`: `--api-token`, or the one printed at start):
/// the rows hold client addresses.
pub async fn llms_txt_stats(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if let Some(denied) = operator_auth(&state, &headers) {
        return Ok(denied);
    }
    let stats = state.licensing.llms_txt_stats().await?;
    Ok(Json(stats).into_response())
}

/// Most rows `GET /operator/settlements` returns (and its default `limit`).
pub const MAX_SETTLEMENTS_LISTED: u32 = 1000;

/// Query of `GET /operator/settlements`.
#[derive(Debug, Deserialize)]
pub struct SettlementsQuery {
    outcome: Option<String>,
    limit: Option<String>,
}

/// The answer of `GET /operator/settlements`.
#[derive(Debug, Serialize)]
pub struct SettlementsView {
    /// All-time number of recorded settlement attempts per outcome.
    totals: std::collections::BTreeMap<&'static str, u64>,
    /// The most recent rows (newest first) matching the query.
    settlements: Vec<SettlementRecord>,
}

/// `GET /operator/settlements[?outcome=settled|failed|unknown][&limit=n]`: the settlement log, newest
/// first (every settlement attempt the x402 layer reported, see [`super::settlements`]). `unknown` rows are
/// the ones to reconcile against the chain. Same operator-token rule as `/operator/llms-txt`.
pub async fn settlements(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    query: Result<Query<SettlementsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    if let Some(denied) = operator_auth(&state, &headers) {
        return Ok(denied);
    }
    let Query(query) = query
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e.body_text()))?;
    let outcome = match query.outcome.as_deref() {
        None | Some("") => None,
        Some(o) => Some(SettlementOutcome::parse(o).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_outcome",
                "outcome must be settled, failed or unknown",
            )
        })?),
    };
    let limit = match query.limit.as_deref() {
        None | Some("") => MAX_SETTLEMENTS_LISTED,
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_SETTLEMENTS_LISTED).contains(n))
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_limit",
                    format!("limit must be 1 to {MAX_SETTLEMENTS_LISTED}"),
                )
            })?,
    };
    let store = state.settlements.store();
    let totals = store
        .count_by_outcome()
        .await?
        .into_iter()
        .map(|(o, n)| (o.as_str(), n))
        .collect();
    let settlements = store.recent(outcome, limit).await?;
    Ok(Json(SettlementsView {
        totals,
        settlements,
    })
    .into_response())
}
