//! The layer under axum: `Paginated`, the `Page` extractor, HEAD, other routes, nesting.

use axum::{Router, routing::get};
use bytes::Bytes;
use http::{Method, StatusCode};
use registry_pagination::{JsonArrayBody, Page, Paginated, PaginationLayer};
use tower::{Layer, ServiceExt};

use crate::support::{registry_layer, send};

async fn numbers(page: Page) -> Paginated {
    let range = page.range(1234);
    let results: Vec<u64> = (range.start + 1..range.end + 1).collect();
    Paginated::new(1234, serde_json::to_vec(&results).unwrap_or_default())
}

async fn fragments(page: Page) -> Paginated {
    let range = page.range(3);
    let records: Vec<Bytes> = (range.start..range.end)
        .map(|i| Bytes::from(format!("{{\"id\":{i}}}")))
        .collect();
    Paginated::new(3, JsonArrayBody::new(records))
}

fn app(layer: PaginationLayer) -> Router {
    Router::new()
        .route("/api/v3/assets/", get(numbers))
        .route("/fragments/", get(fragments))
        .route("/plain", get(|| async { "not a page" }))
        .layer(layer)
}

#[tokio::test]
async fn router_pages_and_other_routes() {
    let seen = send::<_, axum::body::Body, _>(
        app(registry_layer()),
        Method::GET,
        "/api/v3/assets/?offset=1200",
        &[],
    )
    .await;
    assert_eq!(seen.status, 200);
    assert_eq!(seen.results().len(), 34);
    assert_eq!(
        seen.previous().as_deref(),
        Some("http://h/api/v3/assets/?limit=200&offset=1000")
    );
    assert_eq!(seen.headers["content-type"], "application/json");

    let plain =
        send::<_, axum::body::Body, _>(app(registry_layer()), Method::GET, "/plain?limit=5", &[])
            .await;
    assert_eq!(
        (plain.status, plain.body.as_ref()),
        (StatusCode::OK, b"not a page".as_ref())
    );
    assert_eq!(plain.headers["content-type"], "text/plain; charset=utf-8");
    assert!(plain.headers.get("link").is_none());

    let missing =
        send::<_, axum::body::Body, _>(app(registry_layer()), Method::GET, "/nope", &[]).await;
    assert_eq!(missing.status, 404);
    assert!(missing.body.is_empty());

    let fragments = send::<_, axum::body::Body, _>(
        app(registry_layer()),
        Method::GET,
        "/fragments/?limit=2",
        &[],
    )
    .await;
    assert_eq!(
        fragments.body,
        "{\"count\":3,\"next\":\"http://h/fragments/?limit=2&offset=2\",\"previous\":null,\"results\":[{\"id\":0},{\"id\":1}]}"
    );
}

#[tokio::test]
async fn head_through_axum_has_get_headers() {
    for outside in [false, true] {
        // Inside: `Router::layer`. Outside: the layer wraps the whole router, which empties HEAD bodies itself.
        let service = |method| {
            let router = if outside {
                app_without_layer()
            } else {
                app(registry_layer())
            };
            let uri = "/api/v3/assets/?limit=3";
            async move {
                if outside {
                    send::<_, axum::body::Body, _>(registry_layer().layer(router), method, uri, &[])
                        .await
                } else {
                    send::<_, axum::body::Body, _>(router, method, uri, &[]).await
                }
            }
        };
        let get = service(Method::GET).await;
        let head = service(Method::HEAD).await;
        assert!(head.body.is_empty(), "outside={outside}");
        assert_eq!(
            head.headers["content-length"],
            get.body.len().to_string().as_str(),
            "outside={outside}"
        );
        assert_eq!(
            head.headers["link"], get.headers["link"],
            "outside={outside}"
        );
    }
}

fn app_without_layer() -> Router {
    Router::new().route("/api/v3/assets/", get(numbers))
}

#[tokio::test]
async fn nested_router_links_keep_the_full_path() {
    let inner = Router::new()
        .route("/assets/", get(numbers))
        .layer(registry_layer());
    let app = Router::new().nest("/api/v3", inner);
    let seen =
        send::<_, axum::body::Body, _>(app, Method::GET, "/api/v3/assets/?limit=5", &[]).await;
    assert_eq!(
        seen.next().as_deref(),
        Some("http://h/api/v3/assets/?limit=5&offset=5")
    );
}

#[tokio::test]
async fn extractor_without_layer_uses_defaults() {
    let app = app_without_layer();
    let response = app.oneshot(
        http::Request::get("/api/v3/assets/?limit=7")
            .body(axum::body::Body::empty())
            .expect("request"),
    );
    let response = response.await.expect("infallible");
    // No layer: the handler still gets a page, the body is the bare array.
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .expect("body")
        .to_bytes();
    assert_eq!(body, "[1,2,3,4,5,6,7]");
}
