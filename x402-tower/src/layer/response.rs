//! The answers the layer writes itself: the 402 (headers, v1 body, HTML page), receipts, 5xx.

use base64::Engine as _;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::Full;

use super::config::Shared;
use crate::engine::Answer;
use crate::header::*;
use crate::layer::paywall::{Paywall, PaywallPage};
use crate::offer::PaymentOffer;
use crate::proto::{ResourceInfo, SettleResponse};
use crate::scheme::CompiledOffer;

/// Which optional headers a 402 carries.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HeaderOptions {
    /// `Access-Control-Expose-Headers`.
    pub(crate) expose: bool,
    /// `X-Payment-Required`.
    pub(crate) x_payment_required: bool,
}

/// What the layer knows about the request when it answers.
#[derive(Debug, Clone)]
pub(crate) struct RequestInfo {
    pub(crate) resource_url: String,
    pub(crate) wants_html: bool,
    /// The `terms` this request's 402 declares.
    pub(crate) terms: Option<std::sync::Arc<crate::extensions::terms::Terms>>,
    /// What the service says about the paywall page (a browser's request only).
    pub(crate) paywall: Option<std::sync::Arc<crate::layer::paywall::PaywallDetails>>,
}

/// Whether two requests' paywall details are the same ones (shared, so compared by address).
fn same_details(
    a: &Option<std::sync::Arc<crate::layer::paywall::PaywallDetails>>,
    b: &Option<std::sync::Arc<crate::layer::paywall::PaywallDetails>>,
) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
        _ => false,
    }
}

/// Whether the `Accept` header prefers HTML (a person in a browser): the media range with the highest `q`
/// (first wins on ties) is `text/html` or `application/xhtml+xml`. How the layer tells a browser (which
/// gets the paywall) from a program; a service can tell its own answers apart the same way.
///
/// ```
/// use http::{HeaderMap, HeaderValue, header::ACCEPT};
/// use x402_tower::layer::prefers_html;
///
/// let mut h = HeaderMap::new();
/// h.insert(ACCEPT, HeaderValue::from_static("text/html,application/xhtml+xml,*/*;q=0.8"));
/// assert!(prefers_html(&h));
/// h.insert(ACCEPT, HeaderValue::from_static("application/json, text/html;q=0.5"));
/// assert!(!prefers_html(&h));
/// ```
pub fn prefers_html(headers: &HeaderMap) -> bool {
    let Some(accept) = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let mut best: Option<(&str, u32)> = None;
    for item in accept.split(',').take(32) {
        let mut parts = item.split(';');
        let media = parts.next().unwrap_or("").trim();
        let q = parts
            .find_map(|p| p.trim().strip_prefix("q="))
            .and_then(|q| q.trim().parse::<f32>().ok())
            .map_or(1000, |q| (q.clamp(0.0, 1.0) * 1000.0) as u32);
        if best.is_none_or(|(_, bq)| q > bq) {
            best = Some((media, q));
        }
    }
    matches!(best, Some((m, q)) if q > 0 && (m.eq_ignore_ascii_case("text/html") || m.eq_ignore_ascii_case("application/xhtml+xml")))
}

fn b64(bytes: &[u8]) -> HeaderValue {
    let s = base64::engine::general_purpose::STANDARD.encode(bytes);
    // Base64 is always a valid header value.
    HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The v2 PaymentRequired (JSON), assembled from the offers' pre-serialized requirements.
pub(crate) fn payment_required_document(
    offers: &[CompiledOffer],
    info: &RequestInfo,
    error: &str,
    extensions: Option<&str>,
) -> String {
    let first = offers.first().map(|o| &o.offer);
    let resource = ResourceInfo {
        url: info.resource_url.clone(),
        description: first.map(|o| o.description.clone()),
        mime_type: first.map(|o| o.mime_type.clone()),
    };
    let mut s =
        String::with_capacity(256 + offers.iter().map(|o| o.v2_json.len() + 1).sum::<usize>());
    s.push_str(r#"{"x402Version":2,"error":"#);
    s.push_str(&serde_json::to_string(error).unwrap_or_default());
    s.push_str(r#","resource":"#);
    s.push_str(&serde_json::to_string(&resource).unwrap_or_default());
    s.push_str(r#","accepts":["#);
    for (i, o) in offers.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&o.v2_json);
    }
    s.push(']');
    if let Some(ext) = extensions {
        s.push_str(r#","extensions":"#);
        s.push_str(ext);
    }
    s.push('}');
    s
}

fn v1_body(offers: &[CompiledOffer], info: &RequestInfo, error: &str) -> Vec<u8> {
    // A v1 client is told of its own header.
    let error = if error == super::NO_PAYMENT_ERROR {
        super::NO_PAYMENT_ERROR_V1
    } else {
        error
    };
    let accepts: Vec<_> = offers
        .iter()
        .filter(|o| o.offer.network.legacy_v1_name().is_some())
        .filter_map(|o| o.v1_requirements(&info.resource_url))
        .collect();
    let body = crate::proto::PaymentRequiredV1 {
        x402_version: 1,
        error: error.to_owned(),
        accepts,
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// The 402 answer: `PAYMENT-REQUIRED` (the v2 document), `X-Payment-Required` (the same without its
/// `extensions`, which only v2 clients read, and they read `PAYMENT-REQUIRED`), `Cache-Control: no-store`, a
/// v1 JSON body (or an HTML page for a browser), and optionally a `success:false` receipt.
pub(crate) fn payment_required(
    offers: &[CompiledOffer],
    info: &RequestInfo,
    error: &str,
    receipt: Option<(HeaderName, HeaderValue)>,
    options: HeaderOptions,
    extensions: Option<&str>,
    paywall: &Paywall,
) -> Response<Full<Bytes>> {
    let (headers, body, _) =
        payment_required_parts(offers, info, error, receipt, options, extensions, paywall);
    response_402(&headers, &body)
}

/// A 402 from its parts (cheap: the header values and the body are reference-counted).
fn response_402(headers: &HeaderMap, body: &Bytes) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(body.clone()));
    *res.status_mut() = StatusCode::PAYMENT_REQUIRED;
    *res.headers_mut() = headers.clone();
    res
}

/// The headers and body of [`payment_required`].
fn payment_required_parts(
    offers: &[CompiledOffer],
    info: &RequestInfo,
    error: &str,
    receipt: Option<(HeaderName, HeaderValue)>,
    options: HeaderOptions,
    extensions: Option<&str>,
    paywall: &Paywall,
) -> (HeaderMap, Bytes, String) {
    let document = payment_required_document(offers, info, error, extensions);
    let header = b64(document.as_bytes());
    let legacy = options.x_payment_required.then(|| match extensions {
        Some(_) => b64(payment_required_document(offers, info, error, None).as_bytes()),
        None => header.clone(),
    });
    let mut h = HeaderMap::with_capacity(7);
    let page = info
        .wants_html
        .then(|| {
            let plain: Vec<PaymentOffer> = offers.iter().map(|o| o.offer.clone()).collect();
            let page = PaywallPage {
                resource_url: &info.resource_url,
                error,
                offers: &plain,
                payment_required: &document,
                details: info.paywall.as_deref(),
            };
            crate::layer::paywall::render(paywall, &page)
        })
        .flatten();
    let (body, content_type) = match page {
        Some((html, csp)) => {
            if let Some(csp) = csp {
                h.insert(http::header::CONTENT_SECURITY_POLICY, csp);
            }
            (html.into_bytes(), "text/html; charset=utf-8")
        }
        None => (v1_body(offers, info, error), "application/json"),
    };
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(PAYMENT_REQUIRED, header);
    if let Some(legacy) = legacy {
        h.insert(X_PAYMENT_REQUIRED, legacy);
    }
    if let Some((name, value)) = receipt {
        h.insert(name, value);
    }
    if options.expose {
        add_expose_headers(&mut h);
    }
    (h, Bytes::from(body), document)
}

/// Where the nonce goes in a pre-built sign-in-with-x 402: as long as a nonce, and nothing JSON escapes.
const NONCE_PLACEHOLDER: &str = "@@x402-tower-sign-in-nonce-@@@@@";
const _: () = assert!(NONCE_PLACEHOLDER.len() == crate::extensions::siwx::NONCE_HEX_LEN);

/// Distinct resources whose no-payment 402 is kept ready; past it the cache starts over.
const PREBUILT_402S: usize = 4096;

/// The no-payment 402s of one resource URL, one per offer list and page kind.
#[derive(Default)]
pub(crate) struct Prebuilt402s {
    /// Entries behind an `Arc`: the lock is held for the lookup only, never while a copy is made (a worker
    /// preempted while holding it would stall the other's 402s).
    by_resource: std::sync::Mutex<std::collections::HashMap<String, Vec<std::sync::Arc<Prebuilt>>>>,
}

struct Prebuilt {
    /// Held, so the offers' address cannot be reused by other offers while the entry lives.
    offers: std::sync::Arc<[CompiledOffer]>,
    wants_html: bool,
    terms: Option<std::sync::Arc<crate::extensions::terms::Terms>>,
    paywall: Option<std::sync::Arc<crate::layer::paywall::PaywallDetails>>,
    /// Built in this second (unix seconds)...
    since: u64,
    /// ...and sent again until then (signed offers expire; a sign-in nonce binds its second).
    until: u64,
    /// With a sign-in-with-x nonce: without `PAYMENT-REQUIRED`, which [`Spliced`] makes per copy
    /// (`X-Payment-Required` has no extensions, so no nonce).
    headers: HeaderMap,
    body: Bytes,
    sign_in: Option<Spliced>,
}

/// The Base64 `PAYMENT-REQUIRED` of a 402 declaring sign-in-with-x, cut around its nonce so that a copy
/// with a fresh nonce encodes some 50 bytes instead of the whole document. Base64 maps 3 bytes to 4
/// characters, so the document is cut at multiples of 3: `before` and `after` are encoded once, and the
/// bytes between them (up to two of the document on either side of the nonce, and the nonce) per copy.
/// The result is exactly the Base64 of the whole document.
struct Spliced {
    /// The `issuedAt` of the document, which each copy's nonce is tagged with.
    issued_at: String,
    before: String,
    head: Vec<u8>,
    tail: Vec<u8>,
    after: String,
}

impl Spliced {
    /// Cuts `document` (issued at `issued_at`) around the placeholder nonce `placeholder`; `None` unless it
    /// occurs exactly once.
    fn new(document: &str, placeholder: &str, issued_at: String) -> Option<Self> {
        let pos = document.find(placeholder)?;
        if document.rfind(placeholder) != Some(pos) {
            return None;
        }
        let bytes = document.as_bytes();
        let end = pos + placeholder.len();
        let cut = pos - pos % 3;
        let take = ((3 - (pos - cut + placeholder.len()) % 3) % 3).min(bytes.len() - end);
        let b64 = &base64::engine::general_purpose::STANDARD;
        Some(Self {
            issued_at,
            before: b64.encode(&bytes[..cut]),
            head: bytes[cut..pos].to_vec(),
            tail: bytes[end..end + take].to_vec(),
            after: b64.encode(&bytes[end + take..]),
        })
    }

    /// The header value with `nonce` in place of the placeholder.
    fn with_nonce(&self, nonce: &str) -> HeaderValue {
        let mut middle = Vec::with_capacity(self.head.len() + nonce.len() + self.tail.len());
        middle.extend_from_slice(&self.head);
        middle.extend_from_slice(nonce.as_bytes());
        middle.extend_from_slice(&self.tail);
        let mut s = String::with_capacity(self.before.len() + 64 + self.after.len());
        s.push_str(&self.before);
        base64::engine::general_purpose::STANDARD.encode_string(&middle, &mut s);
        s.push_str(&self.after);
        // Base64 is always a valid header value.
        HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

impl Prebuilt402s {
    /// The 402 for a request without payment: built once per (offers, resource, HTML or not, terms), then
    /// copied. With `sign_in` (the layer declares sign-in-with-x), each copy carries a fresh nonce: the JSON
    /// 402 is built once per second around a placeholder (the nonce's tag binds its second), an HTML page
    /// every time.
    pub(crate) fn answer(
        &self,
        shared: &Shared,
        offers: &std::sync::Arc<[CompiledOffer]>,
        info: &RequestInfo,
        sign_in: bool,
    ) -> Response<Full<Bytes>> {
        shared.engine.metrics.payment_required();
        let now = shared.engine.now();
        let siwx = shared.siwx.as_ref().filter(|_| sign_in);
        let spliceable = !info.wants_html;
        if siwx.is_some() && !spliceable {
            return fresh_sign_in_402(shared, offers, info, super::NO_PAYMENT_ERROR, now);
        }
        let lock = || self.by_resource.lock().unwrap_or_else(|e| e.into_inner());
        let found = lock().get(info.resource_url.as_str()).and_then(|list| {
            list.iter()
                .find(|p| {
                    std::sync::Arc::ptr_eq(&p.offers, offers)
                        && p.wants_html == info.wants_html
                        && p.terms == info.terms
                        && same_details(&p.paywall, &info.paywall)
                        && p.sign_in.is_some() == siwx.is_some()
                        && p.since <= now
                        && now < p.until
                })
                .cloned()
        });
        if let Some(p) = found {
            return copy(&p, siwx.map(|s| &**s));
        }
        let (extensions, until) =
            shared.extensions_for(offers, info, siwx.map(|_| NONCE_PLACEHOLDER), now);
        let (mut headers, body, document) = payment_required_parts(
            offers,
            info,
            super::NO_PAYMENT_ERROR,
            None,
            shared.header_options(),
            extensions.as_deref(),
            &shared.paywall,
        );
        let spliced = match siwx {
            Some(_) => match Spliced::new(
                &document,
                NONCE_PLACEHOLDER,
                crate::extensions::siwx::SignInWithX::issued_at(now),
            ) {
                Some(spliced) => Some(spliced),
                // Not cut (the placeholder is not where the nonce goes): built for this request alone.
                None => {
                    return fresh_sign_in_402(shared, offers, info, super::NO_PAYMENT_ERROR, now);
                }
            },
            None => None,
        };
        if spliced.is_some() {
            headers.remove(PAYMENT_REQUIRED);
        }
        let entry = Prebuilt {
            offers: offers.clone(),
            wants_html: info.wants_html,
            terms: info.terms.clone(),
            paywall: info.paywall.clone(),
            since: now,
            until,
            headers,
            body,
            sign_in: spliced,
        };
        let res = copy(&entry, siwx.map(|s| &**s));
        let mut map = lock();
        if map.len() >= PREBUILT_402S {
            map.clear();
        }
        let list = map.entry(info.resource_url.clone()).or_default();
        list.retain(|p| now < p.until);
        if list.len() < 8 {
            list.push(std::sync::Arc::new(entry));
        }
        res
    }
}

/// A copy of a pre-built 402, with a fresh nonce of `siwx` in its document when it declares sign-in-with-x.
fn copy(
    p: &Prebuilt,
    siwx: Option<&crate::extensions::siwx::SignInWithX>,
) -> Response<Full<Bytes>> {
    let mut res = response_402(&p.headers, &p.body);
    if let (Some(spliced), Some(siwx)) = (&p.sign_in, siwx) {
        let value = spliced.with_nonce(&siwx.nonce_issued_at(&spliced.issued_at));
        res.headers_mut().insert(PAYMENT_REQUIRED, value);
    }
    res
}

/// A 402 declaring sign-in-with-x with a fresh nonce issued at `now`, built whole (an HTML page, or a
/// refused sign-in's reason). The caller counts it.
pub(crate) fn fresh_sign_in_402(
    shared: &Shared,
    offers: &[CompiledOffer],
    info: &RequestInfo,
    error: &str,
    now: u64,
) -> Response<Full<Bytes>> {
    let nonce = shared.siwx.as_ref().map(|s| s.nonce(now));
    let (extensions, _) = shared.extensions_for(offers, info, nonce.as_deref(), now);
    payment_required(
        offers,
        info,
        error,
        None,
        shared.header_options(),
        extensions.as_deref(),
        &shared.paywall,
    )
}

/// The 402 the layer answers for `offers` at `resource_url` (the full URL of the request), with `error` as
/// the reason: `PAYMENT-REQUIRED` and `X-Payment-Required` (Base64 v2 PaymentRequired; no extensions here,
/// so both are the same), `Cache-Control: no-store` and the v1 JSON body (`x402Version`, `error`,
/// `accepts`).
///
/// For an application that refuses a payment after the layer let it through (for example a durable
/// "already used" check in the handler), so its 402 tells the client what to pay exactly like the layer's.
///
/// ```
/// use alloy_primitives::address;
/// use x402_tower::header::PAYMENT_REQUIRED;
/// use x402_tower::layer::payment_required_response;
/// use x402_tower::network::{Network, Token};
/// use x402_tower::{PaymentOffer, Price};
///
/// let network = Network::from_v1_name("base-sepolia").unwrap();
/// let offer = PaymentOffer::new(
///     network.clone(),
///     Token::usdc(&network).unwrap(),
///     address!("209693Bc6afc0C5328bA36FaF03C514EF312287C"),
///     Price::from(10_000u64),
/// );
/// let res = payment_required_response(&[offer], "https://example.org/a", "nonce_already_used");
/// assert_eq!(res.status(), 402);
/// assert!(res.headers().contains_key(PAYMENT_REQUIRED));
/// ```
pub fn payment_required_response(
    offers: &[PaymentOffer],
    resource_url: &str,
    error: &str,
) -> Response<Full<Bytes>> {
    let compiled = crate::scheme::Schemes::default().compile(offers.to_vec());
    let info = RequestInfo {
        resource_url: resource_url.to_owned(),
        wants_html: false,
        terms: None,
        paywall: None,
    };
    payment_required(
        &compiled,
        &info,
        error,
        None,
        HeaderOptions::default(),
        None,
        &Paywall::Off,
    )
}

/// The layer's answer for an engine [`Answer`].
pub(crate) fn render(
    shared: &Shared,
    offers: &[CompiledOffer],
    info: &RequestInfo,
    answer: Answer,
) -> Response<Full<Bytes>> {
    match answer {
        Answer::PaymentRequired {
            error,
            receipt: settle,
            version,
        } => {
            shared.engine.metrics.payment_required();
            let (extensions, _) = shared.extensions_for(offers, info, None, shared.engine.now());
            let mut response = payment_required(
                offers,
                info,
                &error,
                settle.map(|sr| receipt(version, &sr)),
                shared.header_options(),
                extensions.as_deref(),
                &shared.paywall,
            );
            if error == crate::scheme::PERMIT2_ALLOWANCE_REQUIRED {
                // As the official servers answer it: the payment is good, but the payer has not approved
                // Permit2 for the token; paying again will not help until it does.
                *response.status_mut() = StatusCode::PRECONDITION_FAILED;
            }
            response
        }
        Answer::BadRequest { error, message } => {
            json_error(StatusCode::BAD_REQUEST, error, &message)
        }
        Answer::Conflict { message } => json_error(
            StatusCode::CONFLICT,
            "payment_identifier_conflict",
            &message,
        ),
        Answer::Unavailable { status, message } => plain_error(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            message,
        ),
    }
}

/// 405 for a method the layer does not sell, with `Allow`.
pub(crate) fn method_not_allowed(allow: &HeaderValue) -> Response<Full<Bytes>> {
    let mut res = plain_error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    res.headers_mut().insert(http::header::ALLOW, allow.clone());
    res
}

/// A served response with the receipt (if any) in the client's version's header and `Cache-Control:
/// private`.
pub(crate) fn add_receipt<B>(
    res: Response<B>,
    version: u8,
    settlement: Option<SettleResponse>,
    expose: bool,
) -> Response<super::ResponseBody<B>> {
    let mut res = res.map(super::ResponseBody::inner);
    if let Some(sr) = settlement {
        let (name, value) = receipt(version, &sr);
        let h = res.headers_mut();
        h.insert(name, value);
        make_private(h);
        if expose {
            add_expose_headers(h);
        }
    }
    res
}

/// An uncacheable RFC 9457 problem document (`application/problem+json`): `type` `about:blank`, `title`
/// the status's phrase, `status`, `detail` (what went wrong, for people) and `code` (a stable name for
/// programs). Every answer of the layer other than a 402 or a receipt is one.
fn json_error(status: StatusCode, code: &str, detail: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
        "code": code,
    });
    let mut res = Response::new(Full::new(Bytes::from(
        serde_json::to_vec(&body).unwrap_or_default(),
    )));
    *res.status_mut() = status;
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    res.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

/// Adds the x402 headers to `Access-Control-Expose-Headers`.
pub(crate) fn add_expose_headers(h: &mut HeaderMap) {
    h.append(
        http::header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(EXPOSE_HEADERS_VALUE),
    );
}

/// The receipt header of the client's version.
pub(crate) fn receipt(version: u8, settle: &SettleResponse) -> (HeaderName, HeaderValue) {
    let name = if version == 1 {
        X_PAYMENT_RESPONSE
    } else {
        PAYMENT_RESPONSE
    };
    (name, b64(&settle.to_json().unwrap_or_default()))
}

/// Merges `private` into a paid response's `Cache-Control` (dropping `public`).
pub(crate) fn make_private(h: &mut HeaderMap) {
    let existing: Vec<String> = h
        .get_all(CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|d| d.trim().to_owned())
        .filter(|d| {
            !d.is_empty() && !d.eq_ignore_ascii_case("public") && !d.eq_ignore_ascii_case("private")
        })
        .collect();
    let value = if existing.is_empty() {
        "private".to_owned()
    } else {
        format!("private, {}", existing.join(", "))
    };
    if let Ok(v) = HeaderValue::try_from(value) {
        h.insert(CACHE_CONTROL, v);
    }
}

/// A problem document whose code is the status's (502 `bad_gateway` when the settler failed, 503
/// `service_unavailable` when the payment store failed, 500 `internal_server_error` for a pricing bug).
pub(crate) fn plain_error(status: StatusCode, detail: &str) -> Response<Full<Bytes>> {
    let code = match status {
        StatusCode::BAD_GATEWAY => "bad_gateway",
        StatusCode::SERVICE_UNAVAILABLE => "service_unavailable",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        _ => "internal_server_error",
    };
    json_error(status, code, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> bool {
        let mut h = HeaderMap::new();
        h.insert(http::header::ACCEPT, HeaderValue::from_str(v).unwrap());
        prefers_html(&h)
    }

    /// Cut anywhere (every position modulo 3, the nonce at either end), the spliced value is the Base64 of
    /// the document with the nonce in place of the placeholder.
    #[test]
    fn a_spliced_value_is_the_base64_of_the_whole_document() {
        let nonce = "0123456789abcdef0123456789abcdef";
        for before in 0..7 {
            for after in 0..7 {
                let document = format!(
                    "{}{NONCE_PLACEHOLDER}{}",
                    "{\"a\":\"".repeat(before),
                    "\"}".repeat(after)
                );
                let spliced = Spliced::new(&document, NONCE_PLACEHOLDER, String::new()).unwrap();
                let whole = document.replace(NONCE_PLACEHOLDER, nonce);
                assert_eq!(
                    spliced.with_nonce(nonce).as_bytes(),
                    base64::engine::general_purpose::STANDARD
                        .encode(whole)
                        .as_bytes(),
                    "{before} {after}"
                );
            }
        }
        let twice = format!("{NONCE_PLACEHOLDER}{NONCE_PLACEHOLDER}");
        assert!(Spliced::new(&twice, NONCE_PLACEHOLDER, String::new()).is_none());
        assert!(Spliced::new("{}", NONCE_PLACEHOLDER, String::new()).is_none());
    }

    #[test]
    fn accept_negotiation() {
        assert!(accept(
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
        ));
        assert!(!accept("application/json"));
        assert!(!accept("*/*"));
        assert!(!accept("application/json, text/html;q=0.5"));
        assert!(!accept("text/html;q=0"));
        assert!(!accept("text/html;q=NaN, application/json;q=0.1"));
        assert!(!accept(&"a/b;q=0.1,".repeat(500)));
        assert!(!prefers_html(&HeaderMap::new()));
    }

    #[tokio::test]
    async fn public_payment_required_response_is_the_layers_402() {
        use http_body_util::BodyExt as _;
        let network = crate::network::Network::from_v1_name("base-sepolia").unwrap();
        let offer = PaymentOffer::new(
            network.clone(),
            crate::network::Token::usdc(&network).unwrap(),
            alloy_primitives::Address::repeat_byte(0x11),
            crate::Price::from(10_000u64),
        )
        .description("an article");
        let res = payment_required_response(
            std::slice::from_ref(&offer),
            "https://example.org/a?id=1",
            "invalid_exact_evm_nonce_already_used",
        );
        assert_eq!(res.status(), StatusCode::PAYMENT_REQUIRED);
        let h = res.headers();
        assert_eq!(h[CONTENT_TYPE], "application/json");
        assert_eq!(h[CACHE_CONTROL], "no-store");
        assert!(!h.contains_key(X_PAYMENT_REQUIRED));
        let compiled = crate::scheme::Schemes::default().compile(vec![offer.clone()]);
        let info = RequestInfo {
            resource_url: "https://example.org/a?id=1".into(),
            wants_html: false,
            terms: None,
            paywall: None,
        };
        let expected = payment_required(
            &compiled,
            &info,
            "invalid_exact_evm_nonce_already_used",
            None,
            HeaderOptions::default(),
            None,
            &Paywall::Off,
        );
        assert_eq!(h[PAYMENT_REQUIRED], expected.headers()[PAYMENT_REQUIRED]);
        let v2: serde_json::Value = serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(h[PAYMENT_REQUIRED].as_bytes())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(v2["x402Version"], 2);
        assert_eq!(v2["resource"]["url"], "https://example.org/a?id=1");
        assert_eq!(v2["accepts"][0]["network"], "eip155:84532");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            body,
            v1_body(&compiled, &info, "invalid_exact_evm_nonce_already_used")
        );
        let v1: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v1["x402Version"], 1);
        assert_eq!(v1["error"], "invalid_exact_evm_nonce_already_used");
        assert_eq!(v1["accepts"][0]["network"], "base-sepolia");
        assert_eq!(v1["accepts"][0]["resource"], "https://example.org/a?id=1");
    }

    #[test]
    fn private_merge() {
        let mut h = HeaderMap::new();
        make_private(&mut h);
        assert_eq!(h[CACHE_CONTROL], "private");
        h.insert(
            CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=60"),
        );
        make_private(&mut h);
        assert_eq!(h[CACHE_CONTROL], "private, max-age=60");
    }
}
