//! The layer under a bare `tower::Service`: pass-through, readiness, headers, HEAD, streaming bodies.

use std::{convert::Infallible, time::Duration};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use registry_pagination::{JsonArrayBody, Links, PageCount, PaginationLayer};
use tower::{Layer, ServiceBuilder, ServiceExt, service_fn};

use crate::support::{number_service, numbers, registry_layer, send};

#[tokio::test]
async fn unmarked_responses_pass_through_untouched() {
    let service = registry_layer().layer(service_fn(|_req: Request<()>| async {
        let response = Response::builder()
            .status(StatusCode::NOT_FOUND)
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from_static(
                b"{\"detail\":\"Not found.\"}",
            )))
            .expect("response");
        Ok::<_, Infallible>(response)
    }));
    let seen = send(service, Method::GET, "/x/?limit=5", &[]).await;
    assert_eq!(seen.status, 404);
    assert_eq!(seen.body, "{\"detail\":\"Not found.\"}");
    assert_eq!(seen.headers["content-type"], "text/plain");
    assert!(seen.headers.get("link").is_none());
}

#[tokio::test]
async fn link_header_and_extension() {
    let service = number_service(&registry_layer(), 1234);
    let response = service
        .oneshot(
            Request::get("/a/?offset=400&limit=200")
                .body(())
                .expect("request"),
        )
        .await;
    let response = response.expect("infallible");
    assert_eq!(
        response.headers()["link"],
        "<http://h/a/?limit=200&offset=600>; rel=\"next\", <http://h/a/?limit=200&offset=200>; rel=\"prev\", \
         <http://h/a/?limit=200>; rel=\"first\", <http://h/a/?limit=200&offset=1200>; rel=\"last\""
    );
    let links = response
        .extensions()
        .get::<Links>()
        .expect("links extension");
    assert_eq!(
        links.next.as_deref(),
        Some("http://h/a/?limit=200&offset=600")
    );
    let no_header = number_service(&registry_layer().link_header(false), 10);
    let seen = send(no_header, Method::GET, "/", &[]).await;
    assert!(seen.headers.get("link").is_none());
}

#[tokio::test]
async fn inner_service_that_is_not_always_ready() {
    // ConcurrencyLimit(1) and Buffer are not ready until polled: the layer must call the service it polled.
    let service = ServiceBuilder::new()
        .layer(registry_layer())
        .buffer(4)
        .concurrency_limit(1)
        .service(service_fn(|req: Request<()>| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok::<_, Infallible>(numbers(50, &req))
        }));
    let mut tasks = Vec::new();
    for offset in 0..8u64 {
        let service = service.clone();
        tasks.push(tokio::spawn(async move {
            send(
                service,
                Method::GET,
                &format!("/n/?limit=5&offset={offset}"),
                &[],
            )
            .await
        }));
    }
    for (offset, task) in (0..8u64).zip(tasks) {
        let seen = task.await.expect("task");
        assert_eq!(
            seen.results(),
            (offset + 1..=offset + 5).collect::<Vec<_>>()
        );
    }
}

#[tokio::test]
async fn head_keeps_get_headers_without_body() {
    let layer = registry_layer();
    let get = send(number_service(&layer, 1234), Method::GET, "/a/", &[]).await;
    let head = send(number_service(&layer, 1234), Method::HEAD, "/a/", &[]).await;
    assert!(head.body.is_empty());
    assert_eq!(
        head.headers["content-length"],
        get.body.len().to_string().as_str()
    );
    assert_eq!(
        head.headers["content-length"],
        get.headers["content-length"]
    );
    assert_eq!(head.headers["link"], get.headers["link"]);

    // A HEAD whose body was already emptied by an inner router, which kept the GET Content-Length.
    let emptied = layer.layer(service_fn(|req: Request<()>| async move {
        let full = numbers(1234, &req);
        let len = http_body::Body::size_hint(full.body())
            .exact()
            .expect("exact");
        let mut response = Response::new(Full::new(Bytes::new()));
        response.headers_mut().insert("content-length", len.into());
        response.extensions_mut().insert(PageCount(1234));
        Ok::<_, Infallible>(response)
    }));
    let head = send(emptied, Method::HEAD, "/a/", &[]).await;
    assert_eq!(
        head.headers["content-length"],
        get.headers["content-length"]
    );
}

#[tokio::test]
async fn streaming_body_without_known_length_is_wrapped_frame_by_frame() {
    let service = registry_layer().layer(service_fn(|_req: Request<()>| async {
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
            Ok(Frame::data(Bytes::from_static(b"[1,"))),
            Ok(Frame::data(Bytes::from_static(b"2]"))),
            Ok(Frame::trailers(HeaderMap::from_iter([(
                http::header::HeaderName::from_static("x-checksum"),
                http::HeaderValue::from_static("abc"),
            )]))),
        ];
        let mut response = Response::new(StreamBody::new(futures_stream(frames)));
        response.extensions_mut().insert(PageCount(2));
        Ok::<_, Infallible>(response)
    }));
    let response = service
        .oneshot(Request::get("/s/").body(()).expect("request"))
        .await
        .expect("infallible");
    assert!(response.headers().get("content-length").is_none());
    let collected = response.into_body().collect().await.expect("body");
    assert_eq!(
        collected.trailers().map(|t| &t["x-checksum"]),
        Some(&http::HeaderValue::from_static("abc"))
    );
    assert_eq!(
        collected.to_bytes(),
        "{\"count\":2,\"next\":null,\"previous\":null,\"results\":[1,2]}"
    );
}

#[tokio::test]
async fn body_errors_pass_through() {
    let service = registry_layer().layer(service_fn(|_req: Request<()>| async {
        let frames: Vec<Result<Frame<Bytes>, &'static str>> = vec![
            Ok(Frame::data(Bytes::from_static(b"[1"))),
            Err("database went away"),
        ];
        let mut response = Response::new(StreamBody::new(futures_stream(frames)));
        response.extensions_mut().insert(PageCount(2));
        Ok::<_, Infallible>(response)
    }));
    let response = service
        .oneshot(Request::get("/s/").body(()).expect("request"))
        .await
        .expect("infallible");
    assert_eq!(
        response.into_body().collect().await.err(),
        Some("database went away")
    );
}

#[tokio::test]
async fn json_array_body_from_record_fragments() {
    let service = registry_layer().layer(service_fn(|_req: Request<()>| async {
        let records = vec![
            Bytes::from_static(b"{\"id\":\"a\"}"),
            Bytes::from_static(b"{\"id\":\"b\"}"),
        ];
        let mut response = Response::new(JsonArrayBody::new(records));
        response.extensions_mut().insert(PageCount(2));
        Ok::<_, Infallible>(response)
    }));
    let seen = send(service, Method::GET, "/r/", &[]).await;
    assert_eq!(
        seen.json()["results"],
        serde_json::json!([{"id": "a"}, {"id": "b"}])
    );
    assert_eq!(
        seen.headers["content-length"],
        seen.body.len().to_string().as_str()
    );
    let empty = registry_layer().layer(service_fn(|_req: Request<()>| async {
        let mut response = Response::new(JsonArrayBody::new(Vec::new()));
        response.extensions_mut().insert(PageCount(0));
        Ok::<_, Infallible>(response)
    }));
    assert_eq!(
        send(empty, Method::GET, "/r/", &[]).await.json()["results"],
        serde_json::json!([])
    );
}

#[tokio::test]
async fn forwarded_headers_are_ignored_unless_trusted() {
    let headers = [
        ("host", "evil.example"),
        ("x-forwarded-proto", "https"),
        ("x-forwarded-host", "pub.example"),
    ];
    let untrusted = send(
        number_service(&registry_layer(), 500),
        Method::GET,
        "/a/",
        &headers,
    )
    .await;
    assert_eq!(
        untrusted.next().as_deref(),
        Some("http://h/a/?limit=200&offset=200")
    );
    let trusting = registry_layer().trust_forwarded_headers(true);
    let trusted = send(number_service(&trusting, 500), Method::GET, "/a/", &headers).await;
    assert_eq!(
        trusted.next().as_deref(),
        Some("https://pub.example/a/?limit=200&offset=200")
    );
    let host_only = send(
        number_service(&trusting, 500),
        Method::GET,
        "/a/",
        &[("host", "Other:81")],
    )
    .await;
    assert_eq!(
        host_only.next().as_deref(),
        Some("http://other:81/a/?limit=200&offset=200")
    );
    let forwarded = [("forwarded", "for=1.2.3.4;host=f.example;proto=https")];
    let seen = send(
        number_service(&trusting, 500),
        Method::GET,
        "/a/",
        &forwarded,
    )
    .await;
    assert_eq!(
        seen.next().as_deref(),
        Some("https://f.example/a/?limit=200&offset=200")
    );
}

#[test]
fn invalid_configuration_fails_when_built() {
    assert!(PaginationLayer::try_new("ftp://h").is_err());
    assert!(PaginationLayer::try_new("/relative").is_err());
    assert!(std::panic::catch_unwind(|| registry_layer().default_limit(0)).is_err());
    assert!(std::panic::catch_unwind(|| registry_layer().max_limit(Some(0))).is_err());
}

/// A stream over ready items.
fn futures_stream<T>(items: Vec<T>) -> futures_util::stream::Iter<std::vec::IntoIter<T>> {
    futures_util::stream::iter(items)
}
