//! What the examples share: one plain HTTP/1.1 request to themselves, to check they answer.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The status code of `GET path` on `addr` (HTTP/1.1, one request, no client library).
pub(crate) async fn status_of(addr: SocketAddr, path: &str) -> std::io::Result<u16> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await?;
    std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("not an HTTP/1.1 status line"))
}
