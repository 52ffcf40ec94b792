//! The reference server's x402 extensions checked by the official code (`@x402/extensions` 2.x, `@x402/fetch`)
//! and viem, in `tests/js/extensions-check.mjs`: signed offers and receipts, sign-in-with-x, bazaar.

use serde_json::Value;
use workspace_tests::clients::run_js_json;

use crate::common::{ARTICLE, RefServer, payer};

/// Another article of the demo catalog, never bought in this test.
const UNPAID: &str = "micropayments-for-journalism";

#[tokio::test]
async fn official_extension_code_verifies_receipts_signs_in_and_lists_resources() {
    let server = RefServer::start(|_| {}).await;
    assert!(
        server.state.articles.published(UNPAID).is_some(),
        "the demo catalog has {UNPAID}"
    );
    let (key, address) = payer(3);
    let r = run_js_json("extensions-check.mjs", &[&server.url, ARTICLE, UNPAID, key]).await;
    let published = r["published"].as_str().expect("published key");

    // offer-receipt: official verifiers and viem agree with the published key.
    assert_eq!(r["offers"], 1, "{r}");
    assert_eq!(r["offerSigner"], published, "{r}");
    assert_eq!(r["offerViem"], true, "{r}");
    assert_eq!(r["offerMatchesAccepts"], true, "{r}");
    assert_eq!(r["offerValidUntilAhead"], true, "{r}");
    assert_eq!(r["purchaseStatus"], 200, "{r}");
    assert_eq!(r["receiptInBody"], true, "{r}");
    assert_eq!(r["receiptSigner"], published, "{r}");
    assert_eq!(r["receiptViem"], true, "{r}");
    assert_eq!(r["receiptResource"], server.article_url(), "{r}");
    assert_eq!(r["receiptMatchesOffer"], true, "{r}");
    assert_eq!(r["receiptMatchesOtherPayer"], false, "{r}");
    assert_eq!(r["forgedViem"], false, "{r}");

    // sign-in-with-x: the official wrapper reads the paid article again, without a payment.
    assert_eq!(r["rereadStatus"], 200, "{r}");
    assert_eq!(
        r["rereadTitle"], "How Newsrooms Prove a Photo Is Real",
        "{r}"
    );
    assert_eq!(r["rereadPaid"], false, "{r}");
    assert_eq!(r["unpaidStatus"], 402, "{r}");
    assert_eq!(r["unpaidError"], "siwx_not_paid", "{r}");
    assert_eq!(r["firstUse"]["status"], 200, "{r}");
    for (case, error) in [
        ("reused", "siwx_invalid_nonce"),
        ("expired", "siwx_expired"),
        ("neverIssued", "siwx_invalid_nonce"),
        ("otherDomain", "siwx_wrong_domain"),
    ] {
        assert_eq!(r[case]["status"], 402, "{case}: {r}");
        assert_eq!(r[case]["error"], error, "{case}: {r}");
    }
    // No re-read was a purchase: one receipt, for the one payment.
    let receipts = server
        .state
        .licensing
        .count_receipts()
        .await
        .expect("count");
    assert_eq!(receipts, 1);
    let reads = server.state.licensing.count_reads().await.expect("count");
    assert_eq!(reads, 2, "the wrapper's re-read and the first manual proof");
    let _ = address;

    // bazaar: the official client lists every published article with its price.
    let listed: Vec<&str> = r["listed"]
        .as_array()
        .expect("listed")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let published_articles = server.state.articles.list();
    assert_eq!(listed.len(), published_articles.len(), "{r}");
    assert!(listed.contains(&server.article_url().as_str()), "{r}");
    assert_eq!(r["listedTotal"], published_articles.len(), "{r}");
    assert_eq!(r["listedAcceptsAmount"], "50000", "{r}");
}
