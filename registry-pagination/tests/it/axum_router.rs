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

/// Over a real socket (hyper on 127.0.0.1): HEAD carries the GET headers, `Content-Length` included, and no body.
#[tokio::test]
async fn head_and_get_over_a_socket() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let server = tokio::spawn(async move { axum::serve(listener, app(registry_layer())).await });
    let exchange = |method: &'static str| async move {
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .expect("connect");
        let request = format!(
            "{method} /api/v3/assets/?limit=3&offset=6 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.expect("read");
        String::from_utf8(raw).expect("utf-8")
    };
    let get = exchange("GET").await;
    let head = exchange("HEAD").await;
    server.abort();

    let (get_head, get_body) = get.split_once("\r\n\r\n").expect("GET head and body");
    let (head_head, head_body) = head.split_once("\r\n\r\n").expect("HEAD head");
    assert!(head_body.is_empty(), "HEAD has no body: {head_body:?}");
    assert_eq!(
        get_body,
        "{\"count\":1234,\"next\":\"http://h/api/v3/assets/?limit=3&offset=9\",\
         \"previous\":\"http://h/api/v3/assets/?limit=3&offset=3\",\"results\":[7,8,9]}"
    );
    let headers = |head: &str| {
        let mut lines: Vec<String> = head
            .lines()
            .skip(1)
            .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
            .map(str::to_ascii_lowercase)
            .collect();
        lines.sort();
        lines
    };
    assert_eq!(headers(head_head), headers(get_head));
    assert!(headers(get_head).contains(&format!("content-length: {}", get_body.len())));
}
