//! The results body is handed on, not copied: the 1 MB buffer that goes in is the one that comes out.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use registry_pagination::PageCount;
use tower::{Layer, ServiceExt, service_fn};

use crate::support::registry_layer;

#[tokio::test]
async fn one_megabyte_page_is_not_copied() {
    let mut json = Vec::with_capacity(1 << 20);
    json.push(b'[');
    while json.len() < (1 << 20) - 16 {
        json.extend_from_slice(b"{\"id\":\"x\"},");
    }
    json.pop();
    json.push(b']');
    let results = Bytes::from(json);
    let (pointer, len) = (results.as_ptr(), results.len());

    let service = registry_layer().layer(service_fn(move |_req: Request<()>| {
        let results = results.clone();
        async move {
            let mut response = Response::new(Full::new(results));
            response.extensions_mut().insert(PageCount(100_000));
            Ok::<_, Infallible>(response)
        }
    }));
    let response = service
        .oneshot(Request::get("/big/").body(()).expect("request"))
        .await
        .expect("infallible");
    let declared: usize = response.headers()["content-length"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("number");
    let mut body = response.into_body();
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        frames.push(frame.expect("infallible").into_data().expect("data frame"));
    }
    assert_eq!(frames.len(), 3, "prefix, results, suffix");
    assert!(
        frames[0].starts_with(b"{\"count\":100000,\"next\":\"http://h/big/?limit=200&offset=200\"")
    );
    assert_eq!(
        (frames[1].as_ptr(), frames[1].len()),
        (pointer, len),
        "the results buffer itself"
    );
    assert_eq!(frames[2], "}");
    assert_eq!(declared, frames.iter().map(Bytes::len).sum::<usize>());
}
