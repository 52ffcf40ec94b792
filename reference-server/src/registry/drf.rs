//! The Django REST Framework surface of the collection (pagination.md section 4): `format`, `Accept`
//! negotiation (JSON or the browsable HTML page), HEAD, OPTIONS metadata, 405, and the `Allow` /
//! `Vary` headers on every response.

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde_json::json;

use crate::web::html::{escape, escape_text};

/// `Allow` of the collection.
pub(crate) const ALLOW: &str = "GET, POST, HEAD, OPTIONS";
/// `Allow` of one asset.
pub(crate) const DETAIL_ALLOW: &str = "GET, HEAD, OPTIONS";

/// Largest response body the surface buffers (a page of 200 records is well under 2 MiB).
const MAX_BUFFER: usize = 64 * 1024 * 1024;

/// The chosen renderer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renderer {
    Json,
    Html,
}

/// Pick a renderer from `format` and `Accept`. `Err` is the early answer (404 or 406).
#[allow(
    clippy::result_large_err,
    reason = "the error is the early HTTP answer itself"
)]
pub(crate) fn negotiate(query: Option<&str>, headers: &HeaderMap) -> Result<Renderer, Response> {
    let format = query.and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .filter(|(k, _)| k == "format")
            .map(|(_, v)| v.into_owned())
            .last()
    });
    match format.as_deref() {
        Some("json") => return Ok(Renderer::Json),
        Some("api") => return Ok(Renderer::Html),
        Some(_) => return Err(detail(StatusCode::NOT_FOUND, "Not found.")),
        None => {}
    }
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    if accept.len() > 4096 {
        return Err(detail(
            StatusCode::NOT_ACCEPTABLE,
            "Could not satisfy the request Accept header.",
        ));
    }
    if accept.trim().is_empty() {
        return Ok(Renderer::Json);
    }
    // For each renderer: the q of the most specific matching range (specificity 2 = exact, 1 = type/*,
    // 0 = */*). The best q wins; ties go to the more specific match, then to JSON (DRF's first renderer).
    let mut best: [(f32, i8); 2] = [(0.0, -1), (0.0, -1)];
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let mut q = 1.0f32;
        for p in parts {
            if let Some(v) = p.trim().strip_prefix("q=") {
                q = v.trim().parse().unwrap_or(0.0);
            }
        }
        let (ty, sub) = media.split_once('/').unwrap_or((media.as_str(), ""));
        for (i, (rty, rsub)) in [("application", "json"), ("text", "html")]
            .into_iter()
            .enumerate()
        {
            let spec = match (ty, sub) {
                (t, s) if t == rty && s == rsub => 2,
                (t, "*") if t == rty => 1,
                ("*", "*") => 0,
                _ => continue,
            };
            if spec > best[i].1 {
                best[i] = (q, spec);
            }
        }
    }
    let [(jq, js), (hq, hs)] = best;
    let json_ok = js >= 0 && jq > 0.0;
    let html_ok = hs >= 0 && hq > 0.0;
    match (json_ok, html_ok) {
        (false, false) => Err(detail(
            StatusCode::NOT_ACCEPTABLE,
            "Could not satisfy the request Accept header.",
        )),
        (true, false) => Ok(Renderer::Json),
        (false, true) => Ok(Renderer::Html),
        (true, true) if hq > jq || (hq == jq && hs > js) => Ok(Renderer::Html),
        _ => Ok(Renderer::Json),
    }
}

/// DRF's `{"detail": "..."}` answer (unknown page, unsupported `Accept`, method not allowed).
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct Detail<'a> {
    /// For people.
    detail: &'a str,
}

/// DRF's `{"detail": "..."}` answer.
pub(crate) fn detail(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(Detail { detail: message })).into_response()
}

/// Which resource a [`surface`] wraps.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Resource {
    /// The collection, in pages of at most `page_size`.
    Collection {
        /// The page size (default and maximum `limit`).
        page_size: u64,
    },
    /// One asset.
    Detail,
}

/// Middleware around the collection or one asset: early 404/406, HEAD as GET without a body, HTML
/// rendering, and `Allow` / `Vary` / `Content-Length` on every response.
pub(crate) async fn surface(
    axum::extract::State(resource): axum::extract::State<Resource>,
    req: Request,
    next: Next,
) -> Response {
    let renderer = negotiate(req.uri().query(), req.headers());
    let is_head = req.method() == Method::HEAD;
    // HEAD shows the GET page (same bytes, so the same Content-Length).
    let request_line = format!(
        "{} {}",
        if is_head {
            "GET"
        } else {
            req.method().as_str()
        },
        req.uri()
    );
    let path_and_query = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
    let ctx = HtmlContext {
        request_line,
        page: match resource {
            Resource::Collection { page_size } => Some(registry_pagination::Page::from_query(
                req.uri().query(),
                page_size,
                Some(page_size),
            )),
            Resource::Detail => None,
        },
        collection: super::COLLECTION_PATH.to_owned(),
        path_and_query,
    };
    let mut response = match renderer {
        Err(early) => finish(early, Renderer::Json, &ctx).await,
        Ok(renderer) => {
            let mut req = req;
            if is_head {
                *req.method_mut() = Method::GET;
            }
            let response = next.run(req).await;
            finish(response, renderer, &ctx).await
        }
    };
    let headers = response.headers_mut();
    let allow = match resource {
        Resource::Collection { .. } => ALLOW,
        Resource::Detail => DETAIL_ALLOW,
    };
    headers.insert(header::ALLOW, HeaderValue::from_static(allow));
    headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    if is_head {
        *response.body_mut() = Body::empty();
    }
    response
}

/// Buffer the body (to give every answer an exact `Content-Length`, kept on HEAD) and render it as HTML
/// when asked.
async fn finish(response: Response, renderer: Renderer, ctx: &HtmlContext) -> Response {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if renderer == Renderer::Json || !is_json {
        // No re-rendering: pass the body through, with its exact length when known (a page always is).
        if let Some(len) = axum::body::HttpBody::size_hint(response.body()).exact() {
            let mut response = response;
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
            if is_json {
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
            }
            return response;
        }
    }
    let (mut parts, body) = response.into_parts();
    let bytes = match to_bytes(body, MAX_BUFFER).await {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(error = %e, "collection response body failed");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(json!({"detail": "A server error occurred."})),
            )
                .into_response();
        }
    };
    let is_json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let bytes = if renderer == Renderer::Html && is_json {
        let page = html_page(parts.status, &bytes, ctx);
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        bytes::Bytes::from(page)
    } else {
        if is_json {
            parts.headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        bytes
    };
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    Response::from_parts(parts, Body::from(bytes))
}

/// One page-number control (DRF's `get_html_context`): `None` is an ellipsis.
struct PageLink {
    number: u64,
    url: String,
    current: bool,
}

/// An image of the page, shown inline.
struct Thumb {
    href: String,
    src: String,
    alt: String,
}

#[derive(askama::Template)]
#[template(path = "browsable.html")]
struct Browsable<'a> {
    name: &'a str,
    description: &'a str,
    api_url: String,
    json_url: String,
    collection_url: &'a str,
    pages: Vec<Option<PageLink>>,
    previous: Option<String>,
    next: Option<String>,
    thumbs: Vec<Thumb>,
    request_line: &'a str,
    status: String,
    allow: &'static str,
    body: String,
    show_form: bool,
    max_caption: usize,
    max_headline: usize,
}

/// What the browsable page needs to know of the request.
pub(crate) struct HtmlContext {
    /// `METHOD path?query`.
    pub(crate) request_line: String,
    /// Path and query of the request.
    pub(crate) path_and_query: String,
    /// The page asked for (collections), with the collection's page size.
    pub(crate) page: Option<registry_pagination::Page>,
    /// The collection's path (`/api/v3/assets/`), where the POST form posts.
    pub(crate) collection: String,
}

/// `path_and_query` with `key` set to `value` (or removed with `None`), other parameters kept in order.
fn with_param(path_and_query: &str, key: &str, value: Option<&str>) -> String {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k != key {
            q.append_pair(&k, &v);
        }
    }
    if let Some(v) = value {
        q.append_pair(key, v);
    }
    let q = q.finish();
    if q.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{q}")
    }
}

/// DRF's `_get_displayed_page_numbers`: first, last, the current page and its neighbours, with ellipses.
fn displayed_pages(current: u64, last: u64) -> Vec<Option<u64>> {
    if last <= 5 {
        return (1..=last).map(Some).collect();
    }
    let mut included = std::collections::BTreeSet::from([
        1,
        current.saturating_sub(1),
        current,
        current + 1,
        last,
    ]);
    if current <= 4 {
        included.extend([2, 3]);
    }
    if current + 3 >= last {
        included.extend([last - 1, last - 2]);
    }
    let mut pages: Vec<Option<u64>> = included
        .into_iter()
        .filter(|&i| i > 0 && i <= last)
        .map(Some)
        .collect();
    if current > 4 {
        pages.insert(1, None);
    }
    if current + 3 < last {
        let at = pages.len() - 1;
        pages.insert(at, None);
    }
    pages
}

/// DRF's `LimitOffsetPagination.get_html_context`: page controls for `page` of `count` records.
fn page_links(
    ctx: &HtmlContext,
    page: registry_pagination::Page,
    count: u64,
) -> Vec<Option<PageLink>> {
    let ceil = |a: u64, b: u64| a.div_ceil(b);
    if page.limit == 0 {
        return Vec::new();
    }
    let current = ceil(page.offset, page.limit) + 1;
    let last = (ceil(count.saturating_sub(page.offset), page.limit)
        + ceil(page.offset, page.limit))
    .max(1);
    let current = current.min(last);
    if last <= 1 {
        return Vec::new();
    }
    displayed_pages(current, last)
        .into_iter()
        .map(|p| {
            p.map(|number| {
                let url = if number == 1 {
                    with_param(&ctx.path_and_query, "offset", None)
                } else {
                    let offset = i128::from(page.offset)
                        + (i128::from(number) - i128::from(current)) * i128::from(page.limit);
                    with_param(
                        &ctx.path_and_query,
                        "offset",
                        Some(&offset.max(0).to_string()),
                    )
                };
                PageLink {
                    number,
                    url,
                    current: number == current,
                }
            })
        })
        .collect()
}

/// The browsable rendering (DRF's): the request line, status and headers and the body in the JSON's own key
/// order with absolute URLs clickable first, page-number controls and format buttons above, an OPTIONS button,
/// the page's images as previews folded away below (not loaded until opened), the POST form.
fn html_page(status: StatusCode, json_bytes: &[u8], ctx: &HtmlContext) -> String {
    use askama::Template as _;
    let value: serde_json::Value =
        serde_json::from_slice(json_bytes).unwrap_or(serde_json::Value::Null);
    let link = |key: &str| value.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    let records: Vec<&serde_json::Value> = match value.get("results").and_then(|r| r.as_array()) {
        Some(list) => list.iter().collect(),
        None if value.get("cid").is_some() => vec![&value],
        None => Vec::new(),
    };
    let thumbs = records
        .iter()
        .filter(|r| {
            r["asset_file_mime_type"]
                .as_str()
                .is_some_and(|m| m.starts_with("image/"))
        })
        .filter_map(|r| {
            Some(Thumb {
                href: format!("{}{}/?format=api", ctx.collection, r["cid"].as_str()?),
                src: r["asset_file"].as_str()?.to_owned(),
                alt: r["asset_file_name"].as_str().unwrap_or("").to_owned(),
            })
        })
        .collect();
    let pages = match (ctx.page, value.get("count").and_then(|c| c.as_u64())) {
        (Some(page), Some(count)) => page_links(ctx, page, count),
        _ => Vec::new(),
    };
    let detail = ctx.page.is_none();
    Browsable {
        name: if detail {
            "Asset Instance"
        } else {
            "Asset List"
        },
        description: if detail {
            "One registered media asset, the same record as in the list."
        } else {
            "Registered media assets, newest first, in pages (`limit`, `offset`)."
        },
        api_url: with_param(&ctx.path_and_query, "format", Some("api")),
        json_url: with_param(&ctx.path_and_query, "format", Some("json")),
        collection_url: &ctx.collection,
        pages,
        previous: link("previous"),
        next: link("next"),
        thumbs,
        request_line: &ctx.request_line,
        status: format!(
            "{} {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        ),
        allow: if detail { DETAIL_ALLOW } else { ALLOW },
        body: linkify(&crate::web::html::pretty_json(json_bytes)),
        show_form: !detail,
        max_caption: super::upload::MAX_CAPTION,
        max_headline: super::upload::MAX_HEADLINE,
    }
    .render()
    .unwrap_or_else(|e| format!("page unavailable: {e}"))
}

/// Escape pretty JSON and turn string values that are absolute http(s) URLs into links.
fn linkify(pretty: &str) -> String {
    let mut out = String::with_capacity(pretty.len() + pretty.len() / 8);
    for line in pretty.lines() {
        // A value line looks like `    "key": "https://...",` (pretty JSON never splits a string).
        let trimmed = line.trim_end();
        let body = trimmed.strip_suffix(',').unwrap_or(trimmed);
        let start = line
            .find("\"http://")
            .or_else(|| line.find("\"https://"))
            .map(|i| i + 1);
        match start {
            Some(start)
                if body.ends_with('"')
                    && body.len() > start + 1
                    && !line[..start - 1].ends_with('\\') =>
            {
                let end = body.len() - 1;
                let raw: String = serde_json::from_str(&line[start - 1..=end]).unwrap_or_default();
                out.push_str(&escape_text(&line[..start]));
                out.push_str(&format!(
                    "<a href=\"{}\">{}</a>",
                    escape(&raw),
                    escape_text(&line[start..end])
                ));
                out.push_str(&escape_text(&line[end..]));
            }
            _ => out.push_str(&escape_text(line)),
        }
        out.push('\n');
    }
    out
}

/// OPTIONS: DRF `SimpleMetadata` of the collection.
#[utoipa::path(
    options,
    path = "/api/v3/assets/",
    tag = "registry",
    operation_id = "describeAssets",
    summary = "DRF's metadata of the collection (name, renders, parses, the POST fields)",
    responses((status = 200, description = "DRF SimpleMetadata.", body = Object)),
)]
pub(crate) async fn options() -> Response {
    let field = |ty: &str, required: bool, label: &str, extra: serde_json::Value| {
        let mut f = json!({"type": ty, "required": required, "read_only": false, "label": label});
        if let (Some(obj), Some(extra)) = (f.as_object_mut(), extra.as_object()) {
            obj.extend(extra.clone());
        }
        f
    };
    let body = json!({
        "name": "Asset List",
        "description": "Registered media assets, newest first. GET lists them in pages of up to 200 (`limit`, `offset`); POST registers a file (multipart/form-data, `Authorization: token <t>`).",
        "renders": ["application/json", "text/html"],
        "parses": ["multipart/form-data"],
        "actions": {"POST": {
            "asset_file": field("file", true, "Asset file", json!({"help_text": "The media file; its CIDv1 and SHA-256 are computed by the server."})),
            "caption": field("string", false, "Caption", json!({"max_length": super::upload::MAX_CAPTION})),
            "headline": field("string", false, "Headline", json!({"max_length": super::upload::MAX_HEADLINE})),
            "meta": field("json", false, "Meta", json!({"help_text": "JSON object; `proof` and `information` fill the record's `information`."})),
            "signed_metadata": field("json", false, "Signed metadata", json!({"help_text": "JSON object, stored as a string."})),
            "signature": field("json", false, "Signature", json!({"help_text": "JSON array of {provider, proofHash, signature?, publicKey?, integritySha?}."})),
            "nit_commit_custom": field("json", false, "Nit commit custom", json!({"help_text": "JSON object."})),
        }},
    });
    axum::Json(body).into_response()
}

/// OPTIONS of one asset: DRF `SimpleMetadata` of a read-only detail view.
pub(crate) async fn detail_options() -> Response {
    axum::Json(json!({
        "name": "Asset Instance",
        "description": "One registered media asset, the same record as in the list.",
        "renders": ["application/json", "text/html"],
        "parses": ["multipart/form-data"],
    }))
    .into_response()
}

/// 405 for every method the collection does not support.
pub(crate) async fn method_not_allowed(method: Method) -> Response {
    detail(
        StatusCode::METHOD_NOT_ALLOWED,
        &format!("Method \"{method}\" not allowed."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(q: Option<&str>, accept: Option<&str>) -> Result<Renderer, StatusCode> {
        let mut h = HeaderMap::new();
        if let Some(a) = accept {
            h.insert(header::ACCEPT, HeaderValue::from_str(a).unwrap());
        }
        negotiate(q, &h).map_err(|r| r.status())
    }

    #[test]
    fn negotiation() {
        assert_eq!(pick(None, None), Ok(Renderer::Json));
        assert_eq!(pick(None, Some("*/*")), Ok(Renderer::Json));
        assert_eq!(
            pick(
                None,
                Some("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
            ),
            Ok(Renderer::Html)
        );
        assert_eq!(
            pick(None, Some("application/json, text/html")),
            Ok(Renderer::Json)
        );
        assert_eq!(pick(None, Some("text/*")), Ok(Renderer::Html));
        assert_eq!(
            pick(None, Some("image/png")),
            Err(StatusCode::NOT_ACCEPTABLE)
        );
        assert_eq!(
            pick(None, Some("application/json;q=0")),
            Err(StatusCode::NOT_ACCEPTABLE)
        );
        assert_eq!(
            pick(Some("format=api"), Some("image/png")),
            Ok(Renderer::Html)
        );
        assert_eq!(pick(Some("format=json&limit=2"), None), Ok(Renderer::Json));
        assert_eq!(pick(Some("format=xml"), None), Err(StatusCode::NOT_FOUND));
    }

    fn ctx(path_and_query: &str, page: Option<registry_pagination::Page>) -> HtmlContext {
        HtmlContext {
            request_line: format!("GET {path_and_query}"),
            path_and_query: path_and_query.to_owned(),
            page,
            collection: "/api/v3/assets/".into(),
        }
    }

    #[test]
    fn links_are_clickable_and_text_escaped() {
        let html = html_page(
            StatusCode::OK,
            br#"{"count":1,"next":"http://h/?a=1&b=2","previous":null,"results":[{"caption":"<b>x</b>"}]}"#,
            &ctx("/api/v3/assets/", Some(registry_pagination::Page { limit: 1, offset: 0 })),
        );
        assert!(
            html.contains(r#"<a href="http://h/?a=1&#38;b=2">http://h/?a=1&amp;b=2</a>"#),
            "{html}"
        );
        assert!(html.contains(r#""caption": "&lt;b&gt;x&lt;/b&gt;""#));
        assert!(html.contains(r#"rel="next""#));
    }

    #[test]
    fn page_numbers_are_drfs() {
        let none = |v: &[u64]| v.iter().map(|&n| Some(n)).collect::<Vec<_>>();
        assert_eq!(displayed_pages(1, 5), none(&[1, 2, 3, 4, 5]));
        assert_eq!(
            displayed_pages(1, 10),
            vec![Some(1), Some(2), Some(3), None, Some(10)]
        );
        assert_eq!(
            displayed_pages(5, 10),
            vec![Some(1), None, Some(4), Some(5), Some(6), None, Some(10)]
        );
        assert_eq!(
            displayed_pages(10, 10),
            vec![Some(1), None, Some(8), Some(9), Some(10)]
        );
        // 1,234 records, 200 per page, at offset 400: page 3 of 7; page 1 drops the offset.
        let links = page_links(
            &ctx("/api/v3/assets/?offset=400&format=api", None),
            registry_pagination::Page {
                limit: 200,
                offset: 400,
            },
            1234,
        );
        let shown: Vec<(u64, String, bool)> = links
            .into_iter()
            .flatten()
            .map(|l| (l.number, l.url, l.current))
            .collect();
        assert_eq!(
            shown[0],
            (1, "/api/v3/assets/?format=api".to_owned(), false)
        );
        assert_eq!(
            shown[2],
            (3, "/api/v3/assets/?format=api&offset=400".to_owned(), true)
        );
        assert_eq!(shown.last().unwrap().0, 7);
        assert_eq!(
            shown.last().unwrap().1,
            "/api/v3/assets/?format=api&offset=1200"
        );
    }
}
