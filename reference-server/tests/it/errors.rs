//! Errors for people and programs: interface A, the facilitator and the operator endpoints answer one RFC 9457
//! problem document; interface B answers Django REST Framework's `{"detail"}`; a browser gets either as the
//! site's error page, with the same status.

use serde_json::Value;

use crate::common::TestServer;

const BROWSER: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

/// (path, status, code) of interface A, the facilitator and the operator endpoints.
const PROBLEMS: &[(&str, u16, &str)] = &[
    ("/x402Article?articleId=no-such-article", 404, "not_found"),
    ("/x402Article", 400, "missing_article_id"),
    ("/receipts/123/certificate", 404, "not_found"),
    ("/receipts/123", 404, "not_found"),
    ("/license.xml?articleId=nope", 404, "not_found"),
    ("/no/such/path", 404, "not_found"),
    ("/operator/settlements", 401, "unauthorized"),
    ("/facilitator/supported", 404, "facilitator_disabled"),
];

#[tokio::test]
async fn programs_get_one_problem_shape_and_the_registry_keeps_drfs() {
    let server = TestServer::start().await;
    for &(path, status, code) in PROBLEMS {
        let resp = server
            .get_with(server.url(path), "x-request-id", "req-1")
            .await;
        assert_eq!(resp.status(), status, "{path}");
        assert_eq!(
            resp.headers()["content-type"],
            "application/problem+json",
            "{path}"
        );
        let body: Value = resp.json().await.unwrap();
        let members: Vec<&str> = body
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            members,
            ["code", "detail", "request_id", "status", "title", "type"],
            "{path}: {body}"
        );
        assert_eq!(body["type"], "about:blank", "{path}");
        assert_eq!(body["status"], status, "{path}");
        assert_eq!(
            body["title"],
            http::StatusCode::from_u16(status)
                .unwrap()
                .canonical_reason()
                .unwrap(),
            "{path}"
        );
        assert_eq!(body["code"], code, "{path}");
        assert!(!body["detail"].as_str().unwrap().is_empty(), "{path}");
        assert_eq!(body["request_id"], "req-1", "{path}");
    }
    // Interface B: exactly Django REST Framework's answers.
    let resp = server.get("/api/v3/assets/nope/").await;
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        serde_json::json!({"detail": "No Asset matches the given query."})
    );
    let resp = server.get("/verify/nope").await;
    assert_eq!(resp.status(), 404);
    assert_eq!(
        resp.json::<Value>().await.unwrap(),
        serde_json::json!({"detail": "No such asset."})
    );
}

#[tokio::test]
async fn a_browser_gets_the_sites_error_page_with_the_same_status() {
    let server = TestServer::start().await;
    let pages = PROBLEMS
        .iter()
        .map(|&(path, status, _)| (path, status))
        .chain([("/verify/nope", 404), ("/media/a/zzz", 403)]);
    for (path, status) in pages {
        let resp = server.get_with(server.url(path), "accept", BROWSER).await;
        assert_eq!(resp.status(), status, "{path}");
        assert_eq!(
            resp.headers()["content-type"],
            "text/html; charset=utf-8",
            "{path}"
        );
        let html = resp.text().await.unwrap();
        assert!(
            html.contains(&format!("<p class=\"muted\">Error {status}</p>")),
            "{path}: {html}"
        );
        assert!(
            html.contains(r#"<link rel="stylesheet" href="/assets/site.css">"#),
            "{path}"
        );
        assert!(html.contains(r#"<a href="/">Home</a>"#), "{path}");
        assert!(html.contains("Request id <code>"), "{path}");
        assert!(!html.contains("\"detail\""), "no JSON shown: {path}");
    }
    // What went wrong, in the page.
    let html = server
        .get_with(
            server.url("/x402Article?articleId=no-such-article"),
            "accept",
            BROWSER,
        )
        .await
        .text()
        .await
        .unwrap();
    assert!(
        html.contains("no published article has id &#34;no-such-article&#34;"),
        "{html}"
    );
    // The challenge survives: a browser asked for a token still learns how to give one.
    let resp = server
        .get_with(server.url("/operator/settlements"), "accept", BROWSER)
        .await;
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["www-authenticate"], "Token");
    // The catalog, asked by a browser, is a page; by a program, JSON.
    let page = server
        .get_with(server.url("/x402Article/list"), "accept", BROWSER)
        .await;
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(page.headers()["vary"], "accept");
    let json = server.get("/x402Article/list").await;
    assert_eq!(json.headers()["content-type"], "application/json");
}
