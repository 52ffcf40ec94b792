//! Graceful shutdown: in-flight requests finish, but a client that never completes its request cannot keep
//! the server from stopping.

use std::time::Duration;

use reference_server::{Config, Server};
use tokio::io::AsyncWriteExt as _;

#[tokio::test]
async fn a_client_stuck_mid_request_cannot_hold_shutdown_forever() {
    let mut config = Config::for_tests();
    config.registry.seed_assets = 2;
    let server = Server::bind(config.validate().unwrap()).await.unwrap();
    let addr = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run_with_grace(
        async {
            let _ = stopped.await;
        },
        Duration::from_millis(200),
    ));

    let client = crate::common::test_client();
    let ok = client
        .get(format!("http://{addr}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);

    // Half a request: headers never finished, the connection kept open.
    let mut stuck = tokio::net::TcpStream::connect(addr).await.unwrap();
    stuck
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    stuck.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;

    stop.send(()).unwrap();
    // Watchdog only: without the grace period this waits for as long as the client keeps its socket.
    let stopped = tokio::time::timeout(Duration::from_secs(60), task).await;
    let result = stopped.expect("the server stopped although a client kept a request half-sent");
    result.unwrap().unwrap();
    drop(stuck);
}
