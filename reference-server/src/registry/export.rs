//! `GET /api/v3/assets/export/?limit=<n>&offset=<m>`: a licensed bulk export of registry records, sold with
//! x402 `upto`. The buyer signs a maximum of `limit` records at the per-record price; the answer is charged
//! for the records it actually holds (an offset past the end holds none and charges nothing).

use std::sync::Arc;

use alloy_primitives::Address;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use x402_tower::network::{Network, Token};
use x402_tower::pricing::{Offers, PriceDecision};
use x402_tower::scheme::{Charge, FACILITATOR_ADDRESS};
use x402_tower::{PaymentOffer, Price};

use super::Registry;
use super::handlers::error;
use super::model::Template;
use crate::store::StoreError;
use crate::web::clock::unix_now;

/// The export's path.
pub const EXPORT_PATH: &str = "/api/v3/assets/export/";

/// What the export is sold for: a price per record on a network and token, paid to an address, settled by
/// `facilitator` (the address the `upto` proxy lets settle, which the buyer signs).
#[derive(Debug, Clone)]
pub struct ExportPricing {
    /// The network.
    pub network: Network,
    /// The token (any ERC-20: `upto` pays over Permit2).
    pub token: Token,
    /// Who is paid.
    pub pay_to: Address,
    /// Atomic units per record.
    pub per_record: u64,
    /// `extra.facilitatorAddress`: the address that settles.
    pub facilitator: Address,
}

/// One export request: `limit` records from `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    limit: u64,
    offset: u64,
}

/// Reads `limit` (1 to `max`, required) and `offset` (default 0) from a query; the refusal in words.
fn span(query: Option<&str>, max: u64) -> Result<Span, String> {
    let mut limit = None;
    let mut offset = 0;
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*k {
            "limit" => {
                limit = Some(
                    v.parse::<u64>()
                        .ok()
                        .filter(|l| (1..=max).contains(l))
                        .ok_or(format!("limit must be a whole number from 1 to {max}"))?,
                );
            }
            "offset" => {
                offset = v
                    .parse::<u64>()
                    .map_err(|_| "offset must be a whole number".to_owned())?;
            }
            _ => {}
        }
    }
    let limit = limit.ok_or(format!(
        "limit is required: how many records to export (1 to {max}); the payment's maximum is limit x the per-record price"
    ))?;
    Ok(Span { limit, offset })
}

impl ExportPricing {
    /// The `upto` offer for `limit` records: its amount is the maximum, `limit` x the per-record price.
    fn offer(&self, limit: u64) -> PaymentOffer {
        PaymentOffer::new(
            self.network.clone(),
            self.token.clone(),
            self.pay_to,
            Price::from(alloy_primitives::U256::from(self.per_record) * alloy_primitives::U256::from(limit)),
        )
        .scheme(x402_tower::scheme::SCHEME_UPTO)
        .extra(FACILITATOR_ADDRESS, self.facilitator.to_string())
        .description(format!(
            "Registry export: up to {limit} records, {} atomic units each, charged for the records returned",
            self.per_record
        ))
        .mime_type("application/json")
    }

    /// The offers of every `limit` from 1 to `max`, built once: a request takes its list's clone, which
    /// the x402 layer has compiled already, rather than formatting and compiling an offer each time.
    pub fn prices(&self, max: u64) -> ExportPrices {
        ExportPrices {
            max,
            offers: (1..=max)
                .map(|limit| Offers::new(vec![self.offer(limit)]))
                .collect(),
        }
    }
}

/// The export's offers by `limit` ([`ExportPricing::prices`]).
#[derive(Debug, Clone)]
pub struct ExportPrices {
    max: u64,
    offers: Arc<[Offers]>,
}

impl ExportPrices {
    /// The price of a request: the `upto` offer for its `limit`, or a 400 naming what is wrong.
    pub fn decide(&self, query: Option<&str>) -> PriceDecision {
        let offers = span(query, self.max).and_then(|span| {
            let at = usize::try_from(span.limit - 1).map_err(|e| e.to_string())?;
            self.offers
                .get(at)
                .cloned()
                .ok_or_else(|| "limit out of range".to_owned())
        });
        match offers {
            Ok(offers) => PriceDecision::Charge(offers),
            Err(message) => {
                // DRF's ValidationError, as the collection answers a bad `limit`.
                let body = serde_json::json!({ "limit": [message] }).to_string();
                let mut response =
                    http::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
                *response.status_mut() = StatusCode::BAD_REQUEST;
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                PriceDecision::Respond(response)
            }
        }
    }
}

/// `GET /api/v3/assets/export/`: the records of the paid span, as a JSON array of the collection's
/// records, charged per record returned ([`Charge`], in the response's extensions: the x402 layer settles
/// it).
#[utoipa::path(
    get,
    path = "/api/v3/assets/export/",
    tag = "registry",
    operation_id = "exportAssets",
    summary = "A licensed bulk export of registry records, paid per record returned (x402 `upto`)",
    description = "Without a payment: 402 offering `upto` over Permit2 with the maximum `limit` x the \
        per-record price (`extra.facilitatorAddress` names the address that settles). With a payment: the \
        records, newest upload first, and a receipt whose `amount` is what was charged: the records \
        returned x the per-record price, `0` (and no transaction) for an export past the end. A resend of \
        the same payment gets the same answer and is charged once.",
    params(
        ("limit" = u64, Query, description = "Records to export, 1 to 200 (required): sets the payment's maximum."),
        ("offset" = Option<u64>, Query, description = "Records to skip (default 0)."),
        x402_tower::layer::openapi::PaymentHeaders,
    ),
    responses(
        (status = 200, description = "Paid: the records.", body = Vec<super::model::AssetRecord>,
            headers(("PAYMENT-RESPONSE" = String, description = "Base64 of the JSON SettleResponse, with `amount` charged."))),
        (status = 400, description = "`limit` missing or out of range, or `offset` not a whole number (DRF's ValidationError map).", body = super::handlers::DrfInvalid),
        x402_tower::layer::openapi::PaymentRequired,
    ),
)]
pub(crate) async fn export(State(reg): State<Arc<Registry>>, uri: http::Uri) -> Response {
    let Ok(span) = span(uri.query(), reg.cfg.page_size) else {
        return error(
            StatusCode::BAD_REQUEST,
            "validation_error",
            "limit and offset",
            serde_json::Value::Null,
        );
    };
    let page = match reg.store.page(span.offset, span.limit).await {
        Ok(page) => page,
        Err(e) => return super::handlers::store_error(&e),
    };
    let base = reg.cfg.public_base_url.clone();
    let signing = reg.signer.page(reg.signer.expires_at(unix_now()));
    let mut body = Vec::with_capacity(page.rows.iter().map(|(_, t)| t.len()).sum::<usize>() + 2);
    body.push(b'[');
    for (i, (id, tpl)) in page.rows.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        if let Err(e) = signing.with_record(*id, |rs| Template::render(tpl, &mut body, &base, rs)) {
            return super::handlers::store_error(&StoreError::Invalid(e.to_string()));
        }
    }
    body.push(b']');
    let records = page.rows.len() as u128;
    let per_record = reg.cfg.export_per_record;
    let mut response = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response();
    // What this answer used: the layer settles it (nothing for an empty export), never above the maximum.
    response
        .extensions_mut()
        .insert(Charge::atomic(u128::from(per_record) * records));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_needs_a_limit_within_the_page_size() {
        assert_eq!(
            span(Some("limit=3&offset=7"), 200),
            Ok(Span {
                limit: 3,
                offset: 7
            })
        );
        assert_eq!(
            span(Some("limit=200"), 200),
            Ok(Span {
                limit: 200,
                offset: 0
            })
        );
        for bad in [
            None,
            Some("offset=1"),
            Some("limit=0"),
            Some("limit=201"),
            Some("limit=x"),
            Some("limit=2&offset=-1"),
        ] {
            assert!(span(bad, 200).is_err(), "{bad:?}");
        }
    }
}
