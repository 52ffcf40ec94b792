//! The reference server's `/openapi.json` checked by independent validators (npm): the document against the
//! official OpenAPI 3.1 schema, and real answers of both interfaces (every documented status we can
//! provoke) against the schemas the document gives them. Also: the Swagger UI is served from the binary.

use reqwest::Response;
use serde_json::{Value, json};
use workspace_tests::chain::DEV_KEYS;
use workspace_tests::pay::{Knobs, decode_b64_json, pay_v2};
use workspace_tests::tools;

use crate::common::{ARTICLE, RefServer, http};

const TOKEN: &str = "openapi-test-token";

struct Samples {
    list: Vec<Value>,
}

impl Samples {
    /// Records `response` as a sample of `method path` (the documented path template).
    async fn add(
        &mut self,
        name: &str,
        method: &str,
        path: &str,
        response: Response,
        headers: &[&str],
    ) -> Value {
        let status = response.status().as_u16();
        for h in headers {
            assert!(
                response.headers().contains_key(*h),
                "{name}: the answer lacks {h}"
            );
        }
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .trim()
            .to_owned();
        let body: Value = response
            .json()
            .await
            .unwrap_or_else(|e| panic!("{name}: not JSON: {e}"));
        self.list.push(json!({
            "name": name, "method": method, "path": path, "status": status,
            "contentType": content_type, "body": body, "headers": headers,
        }));
        body
    }
}

fn multipart(file: &[u8], caption: &str) -> (String, Vec<u8>) {
    let boundary = "x402-openapi-boundary";
    let mut body = Vec::new();
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"caption\"\r\n\r\n{caption}\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"asset_file\"; filename=\"a.bin\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(file);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[tokio::test]
async fn openapi_document_and_real_answers_pass_independent_validators() {
    let node = tools::node();
    let js = tools::js_dir();
    let server = RefServer::start(|c| c.registry.api_token = Some(TOKEN.into())).await;
    let base = &server.url;
    let client = http();
    let get = |path: &str| client.get(format!("{base}{path}")).send();

    let document: Value = get("/openapi.json").await.unwrap().json().await.unwrap();
    assert_eq!(document["openapi"], "3.1.0");
    assert_eq!(document["servers"][0]["url"], base.as_str());
    let mut s = Samples { list: Vec::new() };

    // Interface A.
    s.add(
        "catalog",
        "get",
        "/x402Article/list",
        get("/x402Article/list").await.unwrap(),
        &[],
    )
    .await;
    s.add(
        "no articleId",
        "get",
        "/x402Article",
        get("/x402Article").await.unwrap(),
        &[],
    )
    .await;
    s.add(
        "unknown article",
        "get",
        "/x402Article",
        get("/x402Article?articleId=nope").await.unwrap(),
        &[],
    )
    .await;
    let unpaid = get(&format!("/x402Article?articleId={ARTICLE}"))
        .await
        .unwrap();
    assert_eq!(unpaid.status(), 402);
    let required = decode_b64_json(unpaid.headers()["payment-required"].to_str().unwrap());
    s.add(
        "unpaid",
        "get",
        "/x402Article",
        unpaid,
        &["PAYMENT-REQUIRED", "X-Payment-Required", "Cache-Control"],
    )
    .await;
    let bad = client
        .get(format!("{base}/x402Article?articleId={ARTICLE}"))
        .header("PAYMENT-SIGNATURE", "not base64 at all")
        .send()
        .await
        .unwrap();
    s.add(
        "refused payment",
        "get",
        "/x402Article",
        bad,
        &["PAYMENT-REQUIRED"],
    )
    .await;
    let paid = client
        .get(format!("{base}/x402Article?articleId={ARTICLE}"))
        .header(
            "PAYMENT-SIGNATURE",
            pay_v2(DEV_KEYS[2], &required, &Knobs::default()),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(paid.status(), 200);
    let body = s
        .add("paid", "get", "/x402Article", paid, &["PAYMENT-RESPONSE"])
        .await;
    let verify_url = body["receipt"]["nft"]["verifyUrl"].as_str().unwrap();
    let receipt = client.get(verify_url).send().await.unwrap();
    s.add("receipt", "get", "/receipts/{tokenId}", receipt, &[])
        .await;
    s.add(
        "no receipt",
        "get",
        "/receipts/{tokenId}",
        get("/receipts/123").await.unwrap(),
        &[],
    )
    .await;
    s.add(
        "no certificate",
        "get",
        "/receipts/{tokenId}/certificate",
        get("/receipts/123/certificate").await.unwrap(),
        &[],
    )
    .await;
    s.add(
        "receipt signer",
        "get",
        "/receipts/signer",
        get("/receipts/signer").await.unwrap(),
        &[],
    )
    .await;
    s.add(
        "discovery",
        "get",
        "/facilitator/discovery/resources",
        get("/facilitator/discovery/resources?limit=3")
            .await
            .unwrap(),
        &[],
    )
    .await;

    // Interface B.
    let page = s
        .add(
            "page",
            "get",
            "/api/v3/assets/",
            get("/api/v3/assets/?limit=2").await.unwrap(),
            &["ETag"],
        )
        .await;
    s.add(
        "page past the end",
        "get",
        "/api/v3/assets/",
        get("/api/v3/assets/?offset=100000").await.unwrap(),
        &[],
    )
    .await;
    let not_acceptable = client
        .get(format!("{base}/api/v3/assets/"))
        .header("accept", "image/png")
        .send()
        .await
        .unwrap();
    s.add(
        "not acceptable",
        "get",
        "/api/v3/assets/",
        not_acceptable,
        &[],
    )
    .await;
    let options = client
        .request(reqwest::Method::OPTIONS, format!("{base}/api/v3/assets/"))
        .send()
        .await
        .unwrap();
    s.add("options", "options", "/api/v3/assets/", options, &[])
        .await;
    let post = |auth: Option<&str>, ct: String, body: Vec<u8>| {
        let mut r = client
            .post(format!("{base}/api/v3/assets/"))
            .header("content-type", ct)
            .body(body);
        if let Some(t) = auth {
            r = r.header("authorization", format!("Token {t}"));
        }
        r.send()
    };
    let file = b"an openapi sample file".to_vec();
    let (ct, body) = multipart(&file, "a caption");
    s.add(
        "upload",
        "post",
        "/api/v3/assets/",
        post(Some(TOKEN), ct.clone(), body.clone()).await.unwrap(),
        &[],
    )
    .await;
    s.add(
        "duplicate",
        "post",
        "/api/v3/assets/",
        post(Some(TOKEN), ct.clone(), body.clone()).await.unwrap(),
        &[],
    )
    .await;
    s.add(
        "no token",
        "post",
        "/api/v3/assets/",
        post(None, ct.clone(), body).await.unwrap(),
        &[],
    )
    .await;
    let (ct2, long) = multipart(b"another file", &"x".repeat(10_001));
    s.add(
        "invalid",
        "post",
        "/api/v3/assets/",
        post(Some(TOKEN), ct2, long).await.unwrap(),
        &[],
    )
    .await;
    s.add(
        "not multipart",
        "post",
        "/api/v3/assets/",
        post(Some(TOKEN), "application/json".into(), b"{}".to_vec())
            .await
            .unwrap(),
        &[],
    )
    .await;
    let media = page["results"][0]["asset_file"].as_str().unwrap();
    let media_ok = client.get(media).send().await.unwrap();
    assert_eq!(
        media_ok.status(),
        200,
        "a record's signed media URL serves the file"
    );
    let tampered = client
        .get(media.replace("Signature=", "Signature=0"))
        .send()
        .await
        .unwrap();
    s.add("tampered media URL", "get", "/media/{path}", tampered, &[])
        .await;
    s.add(
        "no such asset",
        "get",
        "/verify/{cid}",
        get("/verify/nope").await.unwrap(),
        &[],
    )
    .await;

    let statuses: Vec<_> = s
        .list
        .iter()
        .map(|x| x["status"].as_u64().unwrap())
        .collect();
    for code in [200, 201, 400, 401, 402, 404, 406, 409, 415] {
        assert!(
            statuses.contains(&code),
            "no sample answered {code}: {statuses:?}"
        );
    }

    let dir = std::env::temp_dir().join(format!("openapi-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("input.json");
    std::fs::write(
        &input,
        serde_json::to_vec(&json!({"document": document, "samples": s.list})).unwrap(),
    )
    .unwrap();
    let out = tokio::process::Command::new(node)
        .arg(js.join("openapi-check.mjs"))
        .arg(&input)
        .current_dir(&js)
        .output()
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "the validators refused:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The documentation UI: its page and assets come from the binary (no CDN).
    let ui = get("/docs/").await.unwrap();
    assert_eq!(ui.status(), 200);
    let html = ui.text().await.unwrap();
    assert!(
        html.contains("swagger-ui-bundle.js") && !html.contains("https://"),
        "{html}"
    );
    let bundle = get("/docs/swagger-ui-bundle.js").await.unwrap();
    assert_eq!(bundle.status(), 200);
    assert!(bundle.bytes().await.unwrap().len() > 100_000);
    let init = get("/docs/swagger-initializer.js")
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(init.contains("/openapi.json"), "{init}");
}
