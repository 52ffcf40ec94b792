//! A paginated JSON listing in DRF's envelope with axum: `GET /items/?limit=&offset=`.
//!
//! ```sh
//! cargo run -p registry-pagination --example listing              # serves on 127.0.0.1:3003 until Ctrl-C
//! cargo run -p registry-pagination --example listing -- --check   # asks itself for a page, checks it, exits
//! ```
//!
//! The layer reads `limit` and `offset` with DRF's rules and hands the handler a [`Page`]; the handler
//! answers that page's results as a JSON array with the total; the layer writes
//! `{"count","next","previous","results"}` around them without copying, and a `Link` header.

use axum::{Router, routing::get};
use registry_pagination::{Page, Paginated, PaginationLayer};
use serde::Serialize;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[derive(Serialize)]
struct Item {
    id: u64,
    name: String,
}

/// 95 items, read from a "database".
async fn items(page: Page) -> Paginated {
    let total = 95;
    let range = page.range(total);
    let results: Vec<Item> = (range.start..range.end)
        .map(|id| Item {
            id: id + 1,
            name: format!("item {}", id + 1),
        })
        .collect();
    Paginated::new(total, serde_json::to_vec(&results).unwrap_or_default())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let check = std::env::args().any(|a| a == "--check");
    let listener = tokio::net::TcpListener::bind(if check {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:3003"
    })
    .await?;
    let addr = listener.local_addr()?;
    let pages = PaginationLayer::try_new(&format!("http://{addr}"))?
        .default_limit(20)
        .max_limit(Some(50));
    let app = Router::new().route("/items/", get(items).layer(pages));

    if !check {
        println!("listing http://{addr}/items/ (try ?limit=10&offset=90)");
        axum::serve(listener, app).await?;
        return Ok(());
    }
    tokio::spawn(async move { axum::serve(listener, app).await });
    let body = fetch(addr, "/items/?limit=2&offset=4").await?;
    let page: serde_json::Value = serde_json::from_str(&body)?;
    let expected = serde_json::json!({
        "count": 95,
        "next": format!("http://{addr}/items/?limit=2&offset=6"),
        "previous": format!("http://{addr}/items/?limit=2&offset=2"),
        "results": [{"id": 5, "name": "item 5"}, {"id": 6, "name": "item 6"}],
    });
    println!("{page}");
    if page == expected {
        Ok(())
    } else {
        Err(format!("expected {expected}").into())
    }
}

/// The body of `GET path` on `addr` (HTTP/1.1, one request, no client library).
async fn fetch(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no HTTP head"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(format!("not a 200: {head}")));
    }
    Ok(body.to_owned())
}
