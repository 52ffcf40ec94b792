//! What an operator reads: request ids, the access log, `/version`, `/readyz`.

use std::io::BufRead as _;

use serde_json::Value;

use crate::common::*;

#[tokio::test]
async fn every_response_carries_a_request_id_and_a_callers_id_is_kept() {
    let server = TestServer::start().await;
    let generated = server.get("/healthz").await;
    let id = generated.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let other = server.get("/healthz").await;
    assert_ne!(other.headers()["x-request-id"], id.as_str());
    let kept = server
        .get_with(server.url("/nope"), "x-request-id", "trace-7f3a")
        .await;
    assert_eq!(kept.status(), 404);
    assert_eq!(kept.headers()["x-request-id"], "trace-7f3a");
}

#[tokio::test]
async fn version_and_readiness() {
    let server = TestServer::start().await;
    let v: Value = server.get("/version").await.json().await.unwrap();
    assert_eq!(v["name"], "reference-server");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert!(v["commit"].as_str().is_some_and(|c| !c.is_empty()), "{v}");
    assert!(v["x402_tower"].is_string() && v["rustc"].is_string(), "{v}");
    let ready = server.get("/readyz").await;
    assert_eq!(ready.status(), 200);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["status"], "ready");
    assert!(
        ready["database"].as_str().unwrap().ends_with(" ok"),
        "{ready}"
    );
    assert!(
        ready["settlement"]
            .as_str()
            .unwrap()
            .starts_with("verify-only")
    );
}

#[tokio::test]
async fn the_access_log_is_json_lines_with_request_id_client_agent_and_latency_in_ms() {
    let dir = TempDir::new();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_reference-server"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--seed-assets",
            "1",
            "--database",
        ])
        .arg(dir.path().join("db.sqlite3"))
        .env("RUST_LOG", "info")
        // stderr is a pipe, not a terminal: `--log-format auto` (the default) writes JSON.
        .env_remove("REFERENCE_SERVER_LOG_FORMAT")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn binary");
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let first = lines.next().expect("banner").expect("utf-8");
    std::thread::spawn(move || lines.for_each(drop));
    let base = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("listen URL")
        .to_owned();
    let resp = test_client()
        .get(format!("{base}/healthz"))
        .header("x-request-id", "log-check-1")
        .header("user-agent", "ops-test/1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Let the line reach the pipe, then stop the server and read what it wrote.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains('\u{1b}'),
        "no ANSI colour codes in a log file"
    );
    let line: Value = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["fields"]["message"] == "answered" && l["span"]["request_id"] == "log-check-1")
        .unwrap_or_else(|| panic!("no JSON access line for the request in:\n{stderr}"));
    assert_eq!(line["fields"]["status"], 200, "{line}");
    assert!(line["fields"]["latency_ms"].is_f64(), "{line}");
    assert_eq!(line["span"]["user_agent"], "ops-test/1.0", "{line}");
    assert!(
        line["span"]["client"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:"),
        "{line}"
    );
    assert_eq!(line["span"]["path"], "/healthz");
}
