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
    // The id is in the error body too (what a user copies into a report).
    let body: Value = kept.json().await.unwrap();
    assert_eq!(body["request_id"], "trace-7f3a", "{body}");
    assert_eq!(body["code"], "not_found");
    let registry_error: Value = server
        .get_with(
            server.url("/api/v3/assets/?format=xml"),
            "x-request-id",
            "trace-2",
        )
        .await
        .json()
        .await
        .unwrap();
    // Interface B answers Django REST Framework's error exactly (the id is in the header).
    assert_eq!(
        registry_error,
        serde_json::json!({"detail": "Not found."}),
        "{registry_error}"
    );
    // A 402 is an x402 document: left as the protocol defines it.
    let unpaid = server
        .get_with(
            server.url("/x402Article?articleId=c2pa-explained"),
            "x-request-id",
            "trace-3",
        )
        .await;
    assert_eq!(unpaid.status(), 402);
    assert_eq!(unpaid.headers()["x-request-id"], "trace-3");
    let doc: Value = unpaid.json().await.unwrap();
    assert!(doc.get("request_id").is_none(), "{doc}");
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
    let mut child = binary(&dir, "1")
        .env("RUST_LOG", "info")
        // stderr is a pipe, not a terminal: `--log-format auto` (the default) writes JSON.
        .env_remove("REFERENCE_SERVER_LOG_FORMAT")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn binary");
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let first = lines.next().expect("banner").expect("utf-8");
    std::thread::spawn(move || lines.for_each(drop));
    let base = banner_url(&first);
    let resp = test_client()
        .get(format!("{base}/healthz"))
        .header("x-request-id", "log-check-1")
        .header("user-agent", "ops-test/1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Read the log as it is written until the request's line comes (bounded), then stop the server.
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut seen = String::new();
    let line: Value = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok(l) = rx.recv_timeout(left) else {
            let _ = child.kill();
            panic!("no JSON access line for the request within 30 s in:\n{seen}");
        };
        seen.push_str(&l);
        seen.push('\n');
        if let Ok(v) = serde_json::from_str::<Value>(&l)
            && v["fields"]["message"] == "answered"
            && v["span"]["request_id"] == "log-check-1"
        {
            break v;
        }
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !seen.contains('\u{1b}'),
        "no ANSI colour codes in a log file"
    );
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

/// Access lines are written by a thread of their own: a log sink that stops reading (a full pipe) makes the
/// server drop and count lines, never stop answering. Written in place, every request would block on the
/// full pipe after ~64 KiB of lines.
#[tokio::test]
async fn a_log_sink_that_stops_reading_never_stops_the_server() {
    let dir = TempDir::new();
    let mut child = binary(&dir, "0")
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn binary");
    // Held and never read: the pipe fills, and its writer waits.
    let _unread = child.stderr.take();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = stdout.next().expect("banner").expect("utf-8");
    std::thread::spawn(move || stdout.for_each(drop));
    let base = banner_url(&first);
    // More access lines than the writer's queue (16 Ki lines) and the pipe (64 KiB) hold together.
    const TASKS: usize = 32;
    const EACH: usize = 560;
    let client = test_client();
    let answered = tokio::time::timeout(std::time::Duration::from_secs(120), async {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..TASKS {
            let (client, url) = (client.clone(), format!("{base}/version"));
            tasks.spawn(async move {
                let mut ok = 0;
                for _ in 0..EACH {
                    ok += usize::from(client.get(&url).send().await.unwrap().status() == 200);
                }
                ok
            });
        }
        tasks.join_all().await.into_iter().sum::<usize>()
    })
    .await;
    let dropped = match answered {
        Ok(n) => {
            assert_eq!(n, TASKS * EACH);
            Some(metric(&client, &base, "log_lines_dropped_total").await)
        }
        Err(_) => None,
    };
    child.kill().unwrap();
    let _ = child.wait();
    let dropped = dropped.expect("the server stopped answering");
    assert!(dropped > 0, "{dropped} lines dropped");
}

fn decode(encoding: &str, body: &[u8]) -> Vec<u8> {
    use std::io::Read as _;
    let mut out = Vec::new();
    match encoding {
        "gzip" => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        "br" => {
            brotli::Decompressor::new(body, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        "zstd" => out = zstd::decode_all(body).unwrap(),
        other => panic!("unexpected encoding {other}"),
    }
    out
}

#[tokio::test]
async fn listing_pages_are_compressed_once_tagged_and_answered_304_until_the_collection_changes() {
    let server = TestServer::start_with(|c| c.registry.api_token = Some("tok".into())).await;
    let url = server.url("/api/v3/assets/?limit=200");
    let plain = server.client.get(&url).send().await.unwrap();
    assert!(plain.headers().get("content-encoding").is_none());
    let etag = plain.headers()["etag"].clone();
    let plain = plain.bytes().await.unwrap();
    assert!(plain.len() > 100_000, "{} bytes", plain.len());
    for encoding in ["gzip", "br", "zstd"] {
        let r = server.get_with(&url, "accept-encoding", encoding).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-encoding"], encoding);
        assert_eq!(
            r.headers()["etag"],
            etag,
            "one page, one ETag, every encoding"
        );
        assert_eq!(r.headers()["vary"], "Accept, Accept-Encoding");
        let body = r.bytes().await.unwrap();
        assert!(
            body.len() * 3 < plain.len(),
            "{encoding}: {} of {}",
            body.len(),
            plain.len()
        );
        assert_eq!(
            decode(encoding, &body),
            plain,
            "{encoding} decodes to the same page"
        );
    }
    let r = server
        .get_with(&url, "if-none-match", etag.to_str().unwrap())
        .await;
    assert_eq!(r.status(), 304);
    assert_eq!(r.headers()["etag"], etag);
    // A new asset changes the collection: the old ETag no longer matches.
    let file: Vec<u8> = (0..3000u32).flat_map(|i| i.to_be_bytes()).collect();
    let boundary = "b0undary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"asset_file\"; filename=\"n.jpg\"\r\nContent-Type: image/jpeg\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(&file);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let created = server
        .client
        .post(server.url("/api/v3/assets/"))
        .header("authorization", "token tok")
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let r = server
        .get_with(&url, "if-none-match", etag.to_str().unwrap())
        .await;
    assert_eq!(r.status(), 200);
    assert_ne!(r.headers()["etag"], etag);
    let page: Value = r.json().await.unwrap();
    assert_eq!(page["count"], 41);
}

#[tokio::test]
async fn catalog_openapi_and_receipts_are_tagged_and_compressed() {
    let server = TestServer::start().await;
    for path in ["/x402Article/list", "/openapi.json"] {
        let r = server.get(path).await;
        assert_eq!(r.status(), 200);
        let etag = r.headers()["etag"].to_str().unwrap().to_owned();
        let again = server
            .get_with(&server.url(path), "if-none-match", &etag)
            .await;
        assert_eq!(again.status(), 304, "{path}");
        let gz = server
            .get_with(&server.url(path), "accept-encoding", "gzip")
            .await;
        assert_eq!(gz.headers()["content-encoding"], "gzip", "{path}");
        // Dynamic answers are compressed with zstd or gzip, never br (docs/interfaces.md, "Compression").
        let zst = server
            .get_with(&server.url(path), "accept-encoding", "br, zstd, gzip")
            .await;
        assert_eq!(zst.headers()["content-encoding"], "zstd", "{path}");
        let br = server
            .get_with(&server.url(path), "accept-encoding", "br")
            .await;
        assert_eq!(br.status(), 200, "{path}");
        assert!(br.headers().get("content-encoding").is_none(), "{path}");
        // (The catalog also varies on Accept: a browser gets a page.)
        assert!(
            br.headers()
                .get_all("vary")
                .iter()
                .any(|v| v.to_str().unwrap().eq_ignore_ascii_case("accept-encoding")),
            "{path}"
        );
        // Uncompressed: it reads as JSON as it is.
        let body: Value = br.json().await.unwrap();
        assert!(body.is_object() || body.is_array(), "{path}");
    }
    // A media file is content-addressed: its CID is its ETag, without reading it twice.
    let page: Value = server
        .get("/api/v3/assets/?limit=1")
        .await
        .json()
        .await
        .unwrap();
    let record = &page["results"][0];
    let url = record["asset_file"].as_str().unwrap();
    let file = server.client.get(url).send().await.unwrap();
    assert_eq!(file.status(), 200);
    let cid = record["cid"].as_str().unwrap();
    assert_eq!(file.headers()["etag"], format!("\"{cid}\"").as_str());
    let again = server
        .get_with(url, "if-none-match", &format!("\"{cid}\""))
        .await;
    assert_eq!(again.status(), 304);
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text_every_family_typed_and_described() {
    let server = TestServer::start().await;
    for path in ["/healthz", "/x402Article?articleId=c2pa-explained", "/nope"] {
        server.get(path).await;
    }
    let text = server.get("/metrics").await.text().await.unwrap();
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("valid Prometheus text");
    assert!(scrape.samples.len() > 20, "{text}");
    let types: std::collections::HashMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    for sample in &scrape.samples {
        // The parser folds `_bucket` lines into their histogram and leaves `_sum`/`_count` as samples of
        // their own: those belong to the histogram family.
        let family = ["_sum", "_count"]
            .iter()
            .find_map(|suffix| sample.metric.strip_suffix(suffix))
            .filter(|base| types.get(base) == Some(&"histogram"))
            .unwrap_or(&sample.metric);
        assert!(types.contains_key(family), "{} has no TYPE", sample.metric);
        assert!(
            scrape.docs.contains_key(family),
            "{} has no HELP",
            sample.metric
        );
    }
    let latency = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "http_request_duration_seconds"
                && s.labels.get("route") == Some("/x402Article")
        })
        .expect("a latency histogram for the paid route");
    let prometheus_parse::Value::Histogram(buckets) = &latency.value else {
        panic!("not a histogram: {:?}", latency.value)
    };
    assert!(
        buckets.iter().any(|b| b.less_than.is_infinite()),
        "+Inf bucket"
    );
    assert!(
        text.contains("http_request_duration_seconds_sum{"),
        "{text}"
    );
    assert!(
        text.contains("http_request_duration_seconds_count{"),
        "{text}"
    );
    for family in [
        "build_info",
        "x402_payments_total",
        "x402_payment_required_total",
        "x402_settlements_recorded_total",
        // The backend's own family (the suite runs on both).
        if backend() == "postgres" {
            "postgres_pool_connections"
        } else {
            "sqlite_group_commits_total"
        },
        "http_connections_accepted_total",
        "llms_txt_requests_total",
    ] {
        assert!(
            scrape.samples.iter().any(|s| s.metric == family),
            "{family} missing"
        );
    }
    assert!(
        scrape
            .samples
            .iter()
            .any(|s| s.metric.starts_with("process_")),
        "process metrics"
    );
}
