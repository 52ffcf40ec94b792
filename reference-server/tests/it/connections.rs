//! Connection hygiene of the server loop (`src/server/serve.rs`): header-read and idle timeouts, a cap on open
//! connections, and clients that stop reading. Each test runs the real binary with short limits; every wait
//! is bounded.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::*;
use crate::payments::Instance;

fn addr(instance: &Instance) -> String {
    instance.base.trim_start_matches("http://").to_owned()
}

/// Reads until the server closes the connection (EOF or reset); `None` if it is still open after `wait`.
async fn closed_within(stream: &mut TcpStream, wait: Duration) -> Option<usize> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(total),
            Ok(Ok(n)) => total += n,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_and_idle_connections_are_closed_after_the_header_timeout() {
    let dir = TempDir::new();
    let db = fresh_database(dir.path(), "db.sqlite3").await;
    let server = Instance::start_with(
        &db,
        &dir.path().join("media"),
        &["--header-read-timeout-secs", "1"],
    );
    // Half a request line, then nothing.
    let mut half = TcpStream::connect(addr(&server)).await.unwrap();
    half.write_all(b"GET /healthz HT").await.unwrap();
    // A kept-alive connection that finished one request and then sits idle.
    let mut idle = TcpStream::connect(addr(&server)).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    for stream in [&mut half, &mut idle] {
        assert!(
            closed_within(stream, Duration::from_secs(10))
                .await
                .is_some(),
            "the server kept a silent connection open past its header timeout"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_idle_sockets_do_not_stop_healthz_and_the_cap_refuses_beyond_it() {
    let dir = TempDir::new();
    let db = fresh_database(dir.path(), "db.sqlite3").await;
    let server = Instance::start_with(
        &db,
        &dir.path().join("media"),
        &[
            "--header-read-timeout-secs",
            "30",
            "--max-connections",
            "2100",
        ],
    );
    let mut idle = Vec::with_capacity(2000);
    for _ in 0..2000 {
        idle.push(
            TcpStream::connect(addr(&server))
                .await
                .expect("connect (check ulimit -n)"),
        );
    }
    let client = test_client();
    let health = client
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        health.status(),
        200,
        "/healthz answers beside 2,000 idle sockets"
    );
    // Past the cap, connections are closed on accept (not queued until descriptors run out).
    let mut extra = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let mut s = TcpStream::connect(addr(&server)).await.unwrap();
        extra.spawn(async move {
            let _ = s
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .await;
            // Refused: closed without a byte. Accepted: answered, then kept alive.
            closed_within(&mut s, Duration::from_secs(3)).await == Some(0)
        });
    }
    let refused = extra.join_all().await.into_iter().filter(|r| *r).count();
    assert!(
        refused >= 90,
        "{refused} of 200 connections over the cap were refused"
    );
    drop(idle);
    // The slots come back: a new client is served, and the refusals are counted.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let ok = client
            .get(format!("{}/healthz", server.base))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        if ok || std::time::Instant::now() > deadline {
            assert!(ok, "the server did not recover its connection slots");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(metric(&client, &server.base, "http_connections_refused_total").await >= 90);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_dropped_after_the_write_stall_timeout() {
    let dir = TempDir::new();
    let db = fresh_database(dir.path(), "db.sqlite3").await;
    let server = Instance::start_with(
        &db,
        &dir.path().join("media"),
        &["--write-stall-timeout-secs", "1", "--seed-assets", "200"],
    );
    // Twenty 1.28 MB pages asked for on one connection, none read: far more than the socket buffers hold.
    let mut stream = TcpStream::connect(addr(&server)).await.unwrap();
    let request = b"GET /api/v3/assets/?limit=200 HTTP/1.1\r\nHost: x\r\n\r\n".repeat(20);
    stream.write_all(&request).await.unwrap();
    let client = test_client();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while metric(
        &client,
        &server.base,
        "http_connections_write_stalled_total",
    )
    .await
        == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "a connection whose client stopped reading was not dropped"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // What the kernel had buffered can still be drained, then the connection is closed.
    let got = closed_within(&mut stream, Duration::from_secs(10)).await;
    let got = got.expect("the stalled connection was closed");
    assert!(
        got < 20 * 1_276_000,
        "{got} bytes: the server did not stop at the stall"
    );
}
