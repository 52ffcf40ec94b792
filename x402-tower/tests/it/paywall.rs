//! What a browser gets: the built-in paywall (with its CSP), a custom template, or the JSON 402.

use http::StatusCode;
use tower::Layer;
use x402_tower::layer::paywall::{Paywall, PaywallPage, escape};

use crate::support::*;

const BROWSER: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

#[tokio::test]
async fn the_builtin_paywall_shows_the_offer_and_carries_its_requirements_under_a_strict_csp() {
    let svc = x402_tower::X402Layer::builder(BASE_URL)
        .offer(offer().description("A <b>report</b></script> & more"))
        .build()
        .unwrap()
        .layer(Inner::new().service(StatusCode::OK));
    let a = send(svc, req("/report", &[("accept", BROWSER)])).await;
    assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(a.header("content-type"), Some("text/html; charset=utf-8"));
    let html = std::str::from_utf8(&a.body).unwrap();
    // The description is escaped in the page, and `<` cannot close the data block.
    assert!(
        html.contains("<h1>A &#60;b&#62;report&#60;/b&#62;&#60;/script&#62; &#38; more</h1>"),
        "{html}"
    );
    assert!(html.contains("0.01 USDC"));
    assert!(html.contains(&PAY_TO.to_checksum(None)));
    assert!(html.contains("Connect wallet"));
    let data_start = html
        .find(r#"<script type="application/json" id="x402-data">"#)
        .unwrap();
    let data = &html[data_start..];
    let data = &data[data.find('>').unwrap() + 1..data.find("</script>").unwrap()];
    assert!(!data.contains('<'));
    let doc: serde_json::Value = serde_json::from_str(data).unwrap();
    assert_eq!(doc["accepts"], a.payment_required()["accepts"]);
    assert_eq!(doc["decimals"], 6);
    assert_eq!(
        doc["reasons"]["insufficient_funds"],
        "Your USDC balance is too low for this payment."
    );
    // A wallet that does not know Base Sepolia is offered to add it.
    assert_eq!(doc["chain"]["chainId"], "0x14a34");
    assert_eq!(doc["chain"]["rpcUrls"][0], "https://sepolia.base.org");
    assert_eq!(
        doc["resource"]["description"],
        "A <b>report</b></script> & more"
    );
    // The CSP allows exactly the page's inline script and style, by hash, and requests to its own origin.
    let csp = a.header("content-security-policy").expect("a CSP");
    assert!(
        csp.starts_with("default-src 'none'; script-src 'sha256-"),
        "{csp}"
    );
    assert!(csp.contains("connect-src 'self'"));
    use base64::Engine as _;
    use sha2::Digest as _;
    let script_start = html.rfind("<script>").unwrap() + "<script>".len();
    let script = &html[script_start..html.rfind("</script>").unwrap()];
    let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(script));
    assert!(csp.contains(&format!("'sha256-{hash}'")), "{csp}");
    // A JSON client still gets the v1 body.
    let svc = config()
        .build()
        .unwrap()
        .layer(Inner::new().service(StatusCode::OK));
    let json = send(svc, req("/report", &[("accept", "application/json")])).await;
    assert_eq!(json.header("content-type"), Some("application/json"));
    assert_eq!(json.header("content-security-policy"), None);
}

#[tokio::test]
async fn a_custom_template_is_used_and_off_gives_browsers_the_json_402() {
    let custom = config()
        .paywall(Paywall::custom(|page: &PaywallPage<'_>| {
            format!(
                "<!doctype html><p id=custom>{} for {}</p>",
                escape(page.resource_url),
                page.offers[0].amount.atomic_units()
            )
        }))
        .build()
        .unwrap()
        .layer(Inner::new().service(StatusCode::OK));
    let a = send(custom, req("/report", &[("accept", BROWSER)])).await;
    assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(
        std::str::from_utf8(&a.body).unwrap(),
        "<!doctype html><p id=custom>https://shop.example/report for 10000</p>"
    );
    assert_eq!(a.header("content-security-policy"), None);
    assert_eq!(a.payment_required()["x402Version"], 2);

    let off = config()
        .paywall(Paywall::Off)
        .build()
        .unwrap()
        .layer(Inner::new().service(StatusCode::OK));
    let a = send(off, req("/report", &[("accept", BROWSER)])).await;
    assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(a.header("content-type"), Some("application/json"));
    assert_eq!(a.json()["x402Version"], 1);
}

/// With details from the service (in the request's extensions), the page is headed by its title and
/// byline, offers one choice per offer with its name, words and price, links back, and says when the
/// network is a test network; the same details (shared) get the same ready page.
#[tokio::test]
async fn the_builtin_paywall_shows_the_services_details_and_one_choice_per_offer() {
    use std::sync::Arc;
    use x402_tower::layer::paywall::PaywallDetails;
    let svc = x402_tower::X402Layer::builder(BASE_URL)
        .offer(offer().description("machine words"))
        .offer({
            let mut dearer = offer();
            dearer.amount = x402_tower::Price::from(100_000u64);
            dearer
        })
        .build()
        .unwrap()
        .layer(Inner::new().service(StatusCode::OK));
    let details = Arc::new(
        PaywallDetails::new("How Newsrooms Prove a Photo Is Real")
            .byline("by Amara Okafor")
            .choice("inference", "Search and AI answers; no <training>.")
            .choice("training", "Everything, training too.")
            .back("All articles", "/x402Article/list")
            .nav("Example News", "/")
            .nav("Catalog", "/x402Article/list"),
    );
    let with_details = || {
        let mut r = req("/report", &[("accept", BROWSER)]);
        r.extensions_mut().insert(details.clone());
        r
    };
    let a = send(svc.clone(), with_details()).await;
    assert_eq!(a.status, StatusCode::PAYMENT_REQUIRED);
    let html = std::str::from_utf8(&a.body).unwrap().to_owned();
    assert!(
        html.contains("<h1>How Newsrooms Prove a Photo Is Real</h1>"),
        "{html}"
    );
    assert!(html.contains(r#"<p class="by">by Amara Okafor</p>"#));
    assert!(!html.contains("machine words</h1>"));
    assert!(html.contains(r#"<a href="/x402Article/list">← All articles</a>"#));
    assert!(html.contains("base-sepolia is a test network"));
    assert!(html.contains(
        r#"<header class="site"><a class="home" href="/">Example News</a><a href="/x402Article/list">Catalog</a></header>"#
    ));
    assert_eq!(html.matches(r#"name="x402-offer""#).count(), 2);
    assert!(html.contains(r#"value="1""#));
    assert!(html.contains(
        r#"<span class="choice-name">training</span><span class="choice-price">0.1 USDC</span>"#
    ));
    assert!(html.contains("no &#60;training&#62;."));
    assert!(html.contains("Choose what you buy"));
    assert_eq!(send(svc.clone(), with_details()).await.body, a.body);
    // Without details: the first description heads the page, each choice is named by its network.
    let plain = send(svc, req("/report", &[("accept", BROWSER)])).await;
    let html = std::str::from_utf8(&plain.body).unwrap();
    assert!(html.contains("<h1>machine words</h1>"));
    assert!(html.contains(r#"<span class="choice-name">base-sepolia</span>"#));
    assert!(!html.contains("class=\"back\"") && !html.contains("<header"));
}
