//! The operator views of licensing: `/operator/licensing`, `/operator/llms-txt`, `/operator/settlements`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::licensing::Licensing;
use crate::store::settlements::{SettlementOutcome, SettlementRecord};
use crate::web::error::ApiError;

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
    daily_purchases: Vec<crate::store::licensing::DailyPurchases>,
    /// Per day and agent, newest first.
    daily_llms_txt: Vec<crate::store::licensing::DailyInterest>,
}

/// `GET /operator/licensing[?days=n]`: interest (llms.txt) and purchases per verified agent (Web Bot Auth)
/// and per license, over the last `n` days (default 30), with the per-day rows. `agent` `""` gathers
/// unsigned requests. Same operator-token rule as `/operator/llms-txt`.
pub async fn licensing_view(
    State(state): State<Arc<Licensing>>,
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

/// The operator endpoints always require the operator token (`Authorization: token <t>`):
/// `Some(401 response)` when it is missing or wrong, `None` when the request may proceed.
fn operator_auth(state: &Licensing, headers: &HeaderMap) -> Option<Response> {
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
    State(state): State<Arc<Licensing>>,
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
/// first (every settlement attempt the x402 layer reported, see [`crate::licensing::settlements`]). `unknown` rows are
/// the ones to reconcile against the chain. Same operator-token rule as `/operator/llms-txt`.
pub async fn settlements(
    State(state): State<Arc<Licensing>>,
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
