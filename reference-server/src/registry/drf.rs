//! The Django REST Framework surface of the collection (pagination.md section 4): `format`, `Accept`
//! negotiation (JSON or the browsable HTML page), HEAD, OPTIONS metadata, 405, and the `Allow` /
//! `Vary` headers on every response.

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde_json::json;

use crate::html::html_escape as escape;

/// `Allow` of the collection.
pub(crate) const ALLOW: &str = "GET, POST, HEAD, OPTIONS";

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

/// Middleware around the collection: early 404/406, HEAD as GET without a body, HTML rendering, and
/// `Allow` / `Vary` / `Content-Length` on every response.
pub(crate) async fn surface(req: Request, next: Next) -> Response {
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
    let mut response = match renderer {
        Err(early) => finish(early, Renderer::Json, &request_line).await,
        Ok(renderer) => {
            let mut req = req;
            if is_head {
                *req.method_mut() = Method::GET;
            }
            let response = next.run(req).await;
            finish(response, renderer, &request_line).await
        }
    };
    let headers = response.headers_mut();
    headers.insert(header::ALLOW, HeaderValue::from_static(ALLOW));
    headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    if is_head {
        *response.body_mut() = Body::empty();
    }
    response
}

/// Buffer the body (to give every answer an exact `Content-Length`, kept on HEAD) and render it as HTML
/// when asked.
async fn finish(response: Response, renderer: Renderer, request_line: &str) -> Response {
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
            return (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(json!({"error": {"type": "internal_error", "message": "response failed", "details": null}}))).into_response();
        }
    };
    let is_json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let bytes = if renderer == Renderer::Html && is_json {
        let page = html_page(parts.status, &bytes, request_line);
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

/// The browsable rendering: the same body pretty-printed, absolute URLs clickable, next/previous links.
fn html_page(status: StatusCode, json_bytes: &[u8], request_line: &str) -> String {
    let value: serde_json::Value =
        serde_json::from_slice(json_bytes).unwrap_or(serde_json::Value::Null);
    let pretty = serde_json::to_string_pretty(&value).unwrap_or_default();
    let mut nav = String::new();
    for key in ["previous", "next"] {
        if let Some(url) = value.get(key).and_then(|v| v.as_str()) {
            let url = escape(url);
            nav.push_str(&format!(
                "<a class=\"btn\" rel=\"{key}\" href=\"{url}\">{key}</a> "
            ));
        }
    }
    let count = value
        .get("count")
        .and_then(|c| c.as_u64())
        .map(|c| format!("<p>{c} assets</p>"))
        .unwrap_or_default();
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Asset List – Registry API</title>\
<style>body{{font-family:system-ui,sans-serif;margin:2em}}pre{{background:#f6f8fa;padding:1em;overflow:auto;white-space:pre-wrap}}\
.btn{{display:inline-block;padding:.3em .8em;border:1px solid #888;border-radius:4px;text-decoration:none;margin-right:.5em}}</style></head>\
<body><h1>Asset List</h1>{count}<nav>{nav}</nav><p><code>{}</code></p>\
<pre><b>HTTP {} {}</b>\n<b>Allow:</b> {ALLOW}\n<b>Content-Type:</b> application/json\n<b>Vary:</b> Accept\n\n{}</pre>\
<p><a href=\"?format=json\">format=json</a></p></body></html>\n",
        escape(request_line),
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        linkify(&pretty)
    )
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
                out.push_str(&escape(&line[..start]));
                out.push_str(&format!(
                    "<a href=\"{}\">{}</a>",
                    escape(&raw),
                    escape(&line[start..end])
                ));
                out.push_str(&escape(&line[end..]));
            }
            _ => out.push_str(&escape(line)),
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

    #[test]
    fn links_are_clickable_and_text_escaped() {
        let html = html_page(StatusCode::OK, br#"{"count":1,"next":"http://h/?a=1&b=2","previous":null,"results":[{"caption":"<b>x</b>"}]}"#, "GET /");
        assert!(
            html.contains(r#"<a href="http://h/?a=1&amp;b=2">http://h/?a=1&amp;b=2</a>"#),
            "{html}"
        );
        assert!(html.contains("&lt;b&gt;x&lt;/b&gt;"));
        assert!(html.contains(r#"rel="next""#));
    }
}
