//! The `bazaar` extension (x402 v2 `specs/extensions/bazaar.md`): a paid route says how it is called (method,
//! query parameters or body, an example of its output) in its 402, the client echoes that into its payment,
//! and a facilitator that settles the payment can list the resource in its discovery catalogue
//! (`GET /discovery/resources`), where agents find what they can buy.
//!
//! This module knows nothing of Tower: [`Discovery`] builds the declaration a layer sends
//! ([`X402Config::discovery`](crate::X402Config::discovery)); [`DiscoveryResource`] and [`DiscoveryList`]
//! are the discovery API's wire types (for a facilitator that serves it and a client that reads it), and
//! [`catalog_entry`] reads what a settled payment tells a facilitator.
//!
//! ```
//! use x402_tower::extensions::bazaar::Discovery;
//!
//! let discovery = Discovery::query(http::Method::GET)
//!     .query_param("articleId", "a1", "The article's id from the catalog")
//!     .output_example(serde_json::json!({"article": {"title": "…"}}));
//! let declaration = discovery.declaration();
//! assert_eq!(declaration["info"]["input"]["queryParams"]["articleId"], "a1");
//! ```

use http::Method;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The extension's key in `extensions`.
pub const KEY: &str = "bazaar";

/// What a facilitator may show about a route: how to call it and what it answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovery {
    method: Method,
    body_type: Option<&'static str>,
    params: Map<String, Value>,
    param_schemas: Map<String, Value>,
    required: Vec<String>,
    body: Option<Value>,
    output: Option<Value>,
}

impl Discovery {
    /// A route called with a query (`GET`, `HEAD`, `DELETE`; any other method is declared as `GET`).
    pub fn query(method: Method) -> Self {
        let method = if [Method::GET, Method::HEAD, Method::DELETE].contains(&method) {
            method
        } else {
            Method::GET
        };
        Discovery {
            method,
            body_type: None,
            params: Map::new(),
            param_schemas: Map::new(),
            required: Vec::new(),
            body: None,
            output: None,
        }
    }

    /// A route called with a JSON body (`POST`, `PUT`, `PATCH`; any other method is declared as `POST`), with
    /// an example body.
    pub fn json_body(method: Method, example: Value) -> Self {
        let method = if [Method::POST, Method::PUT, Method::PATCH].contains(&method) {
            method
        } else {
            Method::POST
        };
        Discovery {
            body_type: Some("json"),
            body: Some(example),
            ..Discovery::query(Method::GET)
        }
        .with_method(method)
    }

    fn with_method(mut self, method: Method) -> Self {
        self.method = method;
        self
    }

    /// A required query parameter, with an example value and a description.
    pub fn query_param(
        mut self,
        name: impl Into<String>,
        example: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        let name = name.into();
        self.params
            .insert(name.clone(), Value::String(example.into()));
        self.param_schemas.insert(
            name.clone(),
            json!({"type": "string", "description": description.into()}),
        );
        self.required.push(name);
        self
    }

    /// An example of the paid answer (JSON).
    pub fn output_example(mut self, example: Value) -> Self {
        self.output = Some(example);
        self
    }

    /// The method declared.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The declaration sent in a 402's `extensions.bazaar`: `info` and the JSON Schema (2020-12) it obeys,
    /// in the shape the official `declareDiscoveryExtension` produces (the method pinned to the route's).
    pub fn declaration(&self) -> Value {
        let mut input = Map::new();
        input.insert("type".into(), json!("http"));
        input.insert("method".into(), json!(self.method.as_str()));
        let mut input_props = Map::new();
        input_props.insert("type".into(), json!({"type": "string", "const": "http"}));
        input_props.insert(
            "method".into(),
            json!({"type": "string", "enum": [self.method.as_str()]}),
        );
        if !self.params.is_empty() || self.body_type.is_none() {
            input.insert("queryParams".into(), Value::Object(self.params.clone()));
            input_props.insert(
                "queryParams".into(),
                json!({"type": "object", "properties": self.param_schemas, "required": self.required}),
            );
        }
        let mut required_input = vec![json!("type"), json!("method")];
        if let (Some(body_type), Some(body)) = (self.body_type, &self.body) {
            input.insert("bodyType".into(), json!(body_type));
            input.insert("body".into(), body.clone());
            input_props.insert(
                "bodyType".into(),
                json!({"type": "string", "enum": ["json", "form-data", "text"]}),
            );
            input_props.insert("body".into(), json!({}));
            required_input.push(json!("bodyType"));
            required_input.push(json!("body"));
        }
        let mut info = Map::new();
        info.insert("input".into(), Value::Object(input));
        let mut props = Map::new();
        props.insert(
            "input".into(),
            json!({
                "type": "object",
                "properties": input_props,
                "required": required_input,
                "additionalProperties": false
            }),
        );
        if let Some(example) = &self.output {
            info.insert("output".into(), json!({"type": "json", "example": example}));
            props.insert(
                "output".into(),
                json!({"type": "object", "properties": {"type": {"type": "string"}, "example": {}}, "required": ["type"]}),
            );
        }
        json!({
            "info": info,
            "schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": props,
                "required": ["input"]
            }
        })
    }
}

/// One resource of a discovery listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryResource {
    /// The resource's URL.
    pub resource: String,
    /// `http` (or `mcp`).
    #[serde(rename = "type")]
    pub kind: String,
    /// The x402 version of its payment requirements.
    pub x402_version: u8,
    /// How to pay for it (payment requirements of that version).
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub accepts: Vec<Value>,
    /// When it was last seen, unix seconds (the spec's number; the TypeScript type says an ISO string, which
    /// [`DiscoveryResource::last_updated_unix`] also reads).
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub last_updated: Value,
    /// The bazaar `info` (input, output), description and MIME type when known.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub metadata: Map<String, Value>,
}

impl DiscoveryResource {
    /// `lastUpdated` as unix seconds, whether sent as a number or an RFC 3339 string.
    pub fn last_updated_unix(&self) -> Option<i64> {
        match &self.last_updated {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => {
                time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                    .ok()
                    .map(|t| t.unix_timestamp())
            }
            _ => None,
        }
    }
}

/// `pagination` of a [`DiscoveryList`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DiscoveryPagination {
    /// Page size (1 to 100).
    pub limit: u64,
    /// Index of the first item.
    pub offset: u64,
    /// Items in the whole catalogue (of the requested type).
    pub total: u64,
}

/// `GET /discovery/resources`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryList {
    /// 2.
    pub x402_version: u8,
    /// The page.
    pub items: Vec<DiscoveryResource>,
    /// Where the page is.
    pub pagination: DiscoveryPagination,
}

/// What to ask a facilitator's discovery listing for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoveryQuery {
    /// `http` or `mcp`.
    pub kind: Option<String>,
    /// Page size (the facilitator clamps it to 1-100).
    pub limit: Option<u64>,
    /// Index of the first item.
    pub offset: Option<u64>,
}

/// Why a discovery listing could not be read.
#[cfg(feature = "facilitator")]
#[cfg_attr(docsrs, doc(cfg(feature = "facilitator")))]
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListError {
    /// The facilitator URL is not a URL.
    #[error("bad facilitator URL: {0}")]
    Url(String),
    /// The request failed, or the answer is not a listing.
    #[error("discovery request failed: {0}")]
    Http(#[from] reqwest::Error),
    /// The facilitator answered an error status.
    #[error("the facilitator answered {0}")]
    Status(u16),
    /// The answer is larger than 4 MiB.
    #[error("the listing is larger than 4 MiB")]
    TooLarge,
    /// The answer is not a discovery listing.
    #[error("the answer is not a discovery listing: {0}")]
    Invalid(#[source] serde_json::Error),
}

/// Reads one page of a facilitator's discovery listing (`GET {facilitator}/discovery/resources`), as the
/// official `withBazaar(client).extensions.bazaar.listResources()` does. Answers above 4 MiB are refused.
///
/// ```no_run
/// # async fn f() -> Result<(), x402_tower::extensions::bazaar::ListError> {
/// use x402_tower::extensions::bazaar::{DiscoveryQuery, list_resources};
/// let page = list_resources(&reqwest::Client::new(), "https://x402.example/facilitator",
///     &DiscoveryQuery { kind: Some("http".into()), ..Default::default() }).await?;
/// for item in page.items {
///     println!("{} for {}", item.resource, item.accepts[0]["amount"]);
/// }
/// # Ok(()) }
/// ```
#[cfg(feature = "facilitator")]
#[cfg_attr(docsrs, doc(cfg(feature = "facilitator")))]
pub async fn list_resources(
    http: &reqwest::Client,
    facilitator_url: &str,
    query: &DiscoveryQuery,
) -> Result<DiscoveryList, ListError> {
    let mut url = reqwest::Url::parse(&format!(
        "{}/discovery/resources",
        facilitator_url.trim_end_matches('/')
    ))
    .map_err(|e| ListError::Url(e.to_string()))?;
    {
        let mut pairs = url.query_pairs_mut();
        if let Some(k) = &query.kind {
            pairs.append_pair("type", k);
        }
        if let Some(l) = query.limit {
            pairs.append_pair("limit", &l.to_string());
        }
        if let Some(o) = query.offset {
            pairs.append_pair("offset", &o.to_string());
        }
    }
    let mut response = http.get(url).send().await?;
    if !response.status().is_success() {
        return Err(ListError::Status(response.status().as_u16()));
    }
    const MAX: usize = 4 << 20;
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > MAX {
            return Err(ListError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(ListError::Invalid)
}

/// Why a payment's bazaar declaration is not catalogued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// The payment echoed no `extensions.bazaar` (nothing to catalogue; not an error of the payment).
    #[error("no bazaar extension in the payment")]
    Absent,
    /// The declaration does not have the extension's shape.
    #[error("invalid bazaar extension: {0}")]
    Invalid(&'static str),
    /// The resource URL is not an absolute http(s) URL.
    #[error("the resource URL is not an absolute http(s) URL")]
    BadResource,
}

/// What a settled v2 payment payload (its JSON, with `resource` and the echoed `extensions.bazaar`) tells a
/// facilitator to catalogue, checked for the extension's shape (`info.input.type` `http` with a known
/// method, `bodyType` only with a body method; `schema` an object without external `$ref`/`$id`). The
/// resource is keyed as the official facilitator keys it: origin and path (the query dropped), or origin
/// and a valid `routeTemplate`. Validating `info` against `schema` is the caller's (it needs a JSON Schema
/// engine).
pub fn catalog_entry(
    payload: &Value,
    requirements: &Value,
    now: u64,
) -> Result<DiscoveryResource, CatalogError> {
    let ext = payload
        .get("extensions")
        .and_then(|e| e.get(KEY))
        .ok_or(CatalogError::Absent)?;
    let info = ext
        .get("info")
        .filter(|i| i.is_object())
        .ok_or(CatalogError::Invalid("info must be an object"))?;
    if !ext.get("schema").is_some_and(Value::is_object) {
        return Err(CatalogError::Invalid("schema must be an object"));
    }
    if external_ref(&ext["schema"]) {
        return Err(CatalogError::Invalid(
            "schema must not contain external $ref/$id references",
        ));
    }
    let input = info
        .get("input")
        .filter(|i| i.is_object())
        .ok_or(CatalogError::Invalid("info.input must be an object"))?;
    match input.get("type").and_then(Value::as_str) {
        Some("http") => {
            let method = input.get("method").and_then(Value::as_str);
            let body_methods = ["POST", "PUT", "PATCH"];
            if let Some(m) = method
                && !["GET", "HEAD", "DELETE", "POST", "PUT", "PATCH"].contains(&m)
            {
                return Err(CatalogError::Invalid(
                    "info.input.method is not an HTTP method",
                ));
            }
            if let Some(bt) = input.get("bodyType") {
                if !matches!(bt.as_str(), Some("json" | "form-data" | "text")) {
                    return Err(CatalogError::Invalid(
                        "info.input.bodyType must be json, form-data or text",
                    ));
                }
                if method.is_some_and(|m| !body_methods.contains(&m)) {
                    return Err(CatalogError::Invalid(
                        "info.input.bodyType needs a body method",
                    ));
                }
            }
        }
        Some("mcp") => {
            let tool = input
                .get("toolName")
                .or_else(|| input.get("tool"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if tool.is_empty() {
                return Err(CatalogError::Invalid("info.input.toolName is required"));
            }
        }
        _ => return Err(CatalogError::Invalid("info.input.type must be http or mcp")),
    }
    let resource = payload.get("resource").unwrap_or(&Value::Null);
    let url = resource
        .get("url")
        .and_then(Value::as_str)
        .ok_or(CatalogError::BadResource)?;
    let uri: http::Uri = url.parse().map_err(|_| CatalogError::BadResource)?;
    let (Some(scheme @ ("http" | "https")), Some(authority)) = (uri.scheme_str(), uri.authority())
    else {
        return Err(CatalogError::BadResource);
    };
    let path = ext
        .get("routeTemplate")
        .and_then(Value::as_str)
        .filter(|t| valid_route_template(t))
        .unwrap_or(uri.path());
    let mut metadata = Map::new();
    metadata.insert("bazaar".into(), info.clone());
    for key in ["description", "mimeType"] {
        if let Some(v) = resource.get(key).filter(|v| v.is_string()) {
            metadata.insert(key.into(), v.clone());
        }
    }
    Ok(DiscoveryResource {
        resource: format!("{scheme}://{authority}{path}"),
        kind: input["type"].as_str().unwrap_or("http").to_owned(),
        x402_version: 2,
        accepts: vec![requirements.clone()],
        last_updated: json!(now),
        metadata,
    })
}

/// The extension's rule for `routeTemplate`: after percent-decoding, `^/[a-zA-Z0-9_/:.\-~%]+$` without
/// `..` or `://`.
pub fn valid_route_template(template: &str) -> bool {
    let decoded: String = percent_decode(template);
    decoded.starts_with('/')
        && decoded.len() > 1
        && decoded
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_/:.-~%".contains(&b))
        && !decoded.contains("..")
        && !decoded.contains("://")
}

fn percent_decode(s: &str) -> String {
    let mut out = s.to_owned();
    // Decoded until stable (at most 5 passes, as the official check), so `%252e%252e` cannot hide `..`.
    for _ in 0..5 {
        let next: String = form_decode(&out);
        if next == out {
            break;
        }
        out = next;
    }
    out
}

fn form_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

fn external_ref(node: &Value) -> bool {
    match node {
        Value::Array(a) => a.iter().any(external_ref),
        Value::Object(m) => m.iter().any(|(k, v)| {
            ((k == "$ref" || k == "$id") && !v.as_str().is_some_and(|s| s.starts_with('#')))
                || external_ref(v)
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(ext: Value) -> Value {
        json!({"x402Version": 2, "resource": {"url": "https://shop.example/a?id=1", "description": "A"},
               "extensions": {"bazaar": ext}})
    }

    #[test]
    fn a_declaration_is_catalogued_by_origin_and_path() {
        let d = Discovery::query(Method::GET)
            .query_param("id", "1", "which")
            .declaration();
        let e = catalog_entry(&payload(d.clone()), &json!({"scheme": "exact"}), 7).unwrap();
        assert_eq!(e.resource, "https://shop.example/a");
        assert_eq!(e.kind, "http");
        assert_eq!(e.last_updated_unix(), Some(7));
        assert_eq!(e.metadata["bazaar"], d["info"]);
        assert_eq!(e.metadata["description"], "A");
        let mut templated = d.clone();
        templated["routeTemplate"] = json!("/a/:id");
        let e = catalog_entry(&payload(templated), &json!({}), 7).unwrap();
        assert_eq!(e.resource, "https://shop.example/a/:id");
    }

    #[test]
    fn each_malformed_declaration_is_refused_with_its_reason() {
        let good = Discovery::query(Method::GET).declaration();
        let cases: Vec<(Value, &str)> = vec![
            (json!({"schema": {}}), "info must be an object"),
            (json!({"info": {}, "schema": 1}), "schema must be an object"),
            (
                json!({"info": {"input": {"type": "http"}}, "schema": {"$ref": "https://evil/x"}}),
                "schema must not contain external $ref/$id references",
            ),
            (
                json!({"info": {}, "schema": {}}),
                "info.input must be an object",
            ),
            (
                json!({"info": {"input": {"type": "ftp"}}, "schema": {}}),
                "info.input.type must be http or mcp",
            ),
            (
                json!({"info": {"input": {"type": "http", "method": "TRACE"}}, "schema": {}}),
                "info.input.method is not an HTTP method",
            ),
            (
                json!({"info": {"input": {"type": "http", "method": "GET", "bodyType": "json"}}, "schema": {}}),
                "info.input.bodyType needs a body method",
            ),
            (
                json!({"info": {"input": {"type": "http", "method": "POST", "bodyType": "xml"}}, "schema": {}}),
                "info.input.bodyType must be json, form-data or text",
            ),
            (
                json!({"info": {"input": {"type": "mcp"}}, "schema": {}}),
                "info.input.toolName is required",
            ),
        ];
        for (ext, why) in cases {
            assert_eq!(
                catalog_entry(&payload(ext), &json!({}), 0),
                Err(CatalogError::Invalid(why)),
                "{why}"
            );
        }
        assert_eq!(
            catalog_entry(&json!({"x402Version": 2}), &json!({}), 0),
            Err(CatalogError::Absent)
        );
        let mut bad_url = payload(good);
        bad_url["resource"]["url"] = json!("/relative");
        assert_eq!(
            catalog_entry(&bad_url, &json!({}), 0),
            Err(CatalogError::BadResource)
        );
    }

    #[test]
    fn route_templates() {
        assert!(valid_route_template("/users/:userId"));
        assert!(!valid_route_template("/a/../b"));
        assert!(!valid_route_template("/a/%2e%2e/b"));
        assert!(!valid_route_template("/a/%252e%252e/b"));
        assert!(!valid_route_template("http://x/y"));
        assert!(!valid_route_template("/a b"));
        assert!(!valid_route_template("/"));
    }

    #[test]
    fn body_routes() {
        let d = Discovery::json_body(Method::POST, json!({"q": "x"})).declaration();
        assert_eq!(d["info"]["input"]["method"], "POST");
        assert_eq!(d["info"]["input"]["bodyType"], "json");
        assert_eq!(d["info"]["input"]["body"]["q"], "x");
        assert!(catalog_entry(&payload(d), &json!({}), 0).is_ok());
    }
}
