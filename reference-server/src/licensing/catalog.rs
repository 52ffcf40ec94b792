//! The demo catalog seeded on an empty database: deterministic, so tests and docs can name articles.

use crate::domain::Article;
use crate::domain::license::License;

/// `(id, title, author, date, price in USDC atomic units, published, excerpt, topic sentences)`.
type Entry = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    u64,
    bool,
    &'static str,
    [&'static str; 3],
);

/// Prices stay at or below 0.1 USDC: the legacy x402 v1 client refuses more by default.
const ENTRIES: &[Entry] = &[
    (
        "provenance-newsroom-2025",
        "How Newsrooms Prove a Photo Is Real",
        "Amara Okafor",
        "2025-03-14",
        50_000,
        true,
        "Capture-time signatures and public registries are changing how editors check images before publication.",
        [
            "Editors at three regional papers now require a capture signature for every wire photo they run.",
            "The signature binds the pixels, the device and the time; any edit after capture breaks it.",
            "Registries that timestamp the hash on a public ledger let readers check the claim themselves.",
        ],
    ),
    (
        "micropayments-for-journalism",
        "Micropayments Are Back, and This Time the Plumbing Works",
        "Daniel Reyes",
        "2025-02-27",
        20_000,
        true,
        "HTTP 402 sat unused for decades. Stablecoins on layer-2 chains finally make a one-cent article practical.",
        [
            "A payment of one cent used to cost thirty cents to process; on a layer-2 chain it costs a fraction of that.",
            "The x402 protocol puts the price in a response header, so any HTTP client can learn it and pay.",
            "Publishers keep their paywalls for people and add a machine-readable price for software agents.",
        ],
    ),
    (
        "ai-crawlers-and-licensing",
        "AI Crawlers Are Reading Your Archive. Here Is How to Charge Them",
        "Mei Lin Tan",
        "2025-04-02",
        40_000,
        true,
        "An llms.txt file and a priced endpoint turn unlicensed scraping into a licensing channel.",
        [
            "Crawler traffic to news archives has tripled in a year, most of it from model builders.",
            "An llms.txt file states terms in plain text that an agent reads before it fetches anything else.",
            "Pairing the file with a paid endpoint gives agents a lawful path, and publishers a receipt trail.",
        ],
    ),
    (
        "c2pa-explained",
        "C2PA Explained for Working Photographers",
        "Jonas Becker",
        "2025-01-19",
        10_000,
        true,
        "Content Credentials travel inside the file. What they record, what they cannot prove, and how to read them.",
        [
            "A C2PA manifest lists every tool that touched an image, each entry signed by that tool.",
            "Stripping the manifest is easy, which is why an external registry of hashes complements it.",
            "Photographers should keep originals: the manifest proves history, not that the scene was real.",
        ],
    ),
    (
        "eip-3009-in-practice",
        "Gasless Transfers in Practice: EIP-3009 for Publishers",
        "Priya Raman",
        "2025-05-08",
        30_000,
        true,
        "Transfer-with-authorization lets a reader sign once while the publisher pays the gas.",
        [
            "The reader signs a typed message naming the amount, the recipient and a validity window.",
            "Anyone can submit that authorisation on chain; the token contract checks the signature and the nonce.",
            "Random 32-byte nonces mean authorisations can be made in parallel without a counter.",
        ],
    ),
    (
        "wildfire-season-satellite",
        "Reading Wildfire Season From Orbit",
        "Lucía Fernández",
        "2024-09-30",
        80_000,
        true,
        "Satellite imagery now tracks fire fronts hourly. Verifying that imagery is the new beat for science desks.",
        [
            "Commercial constellations revisit the same hillside several times a day.",
            "Each tile carries acquisition metadata that a registry can anchor alongside the pixels.",
            "Science desks compare successive tiles to confirm a fire line before they map it for readers.",
        ],
    ),
    (
        "local-news-data-desk",
        "Building a Data Desk on a Local-News Budget",
        "Samuel Osei",
        "2024-11-12",
        40_000,
        true,
        "Three reporters, one shared database and a habit of publishing the code: a small newsroom's playbook.",
        [
            "The desk keeps every dataset it reports on in one versioned store.",
            "Publishing notebooks next to stories turned skeptical readers into contributors.",
            "The cost was one part-time developer and a rule that no chart ships without its source.",
        ],
    ),
    (
        "deepfake-election-audit",
        "Auditing an Election Season of Synthetic Media",
        "Hannah Kowalski",
        "2024-12-03",
        100_000,
        true,
        "We checked 1,200 viral images from the campaign. Provenance data settled the question for fewer than one in ten.",
        [
            "Most viral images had been re-encoded by social platforms, which strips embedded credentials.",
            "Where an original hash was registered, verification took seconds instead of days.",
            "The lesson for campaigns: register originals at capture, before anything goes viral.",
        ],
    ),
    (
        "stablecoin-settlement-latency",
        "What Two Seconds of Settlement Mean for a Paywall",
        "Tomás Silva",
        "2025-06-01",
        20_000,
        true,
        "Block times set the floor on how fast a paid article can load. Verify-then-settle hides most of it.",
        [
            "A layer-2 block arrives every two seconds; a reader will not wait for several of them.",
            "Checking the signature locally takes microseconds and is enough to serve the text at once.",
            "Settlement can then follow, with the receipt updated when the transaction lands.",
        ],
    ),
    (
        "archive-digitisation-costs",
        "The True Cost of Digitising a Century of Newsprint",
        "Eleanor Whitfield",
        "2024-08-21",
        60_000,
        true,
        "Scanning is the cheap part. Rights clearance, OCR correction and hosting dominate the bill.",
        [
            "A century of a daily paper is roughly two million pages.",
            "Optical character recognition on old type needs human correction for names and numbers.",
            "Licensing the archive to researchers and model builders is how several papers now fund the work.",
        ],
    ),
    (
        "photo-metadata-privacy",
        "Your Photo's Metadata Knows Where You Live",
        "Kwame Asante",
        "2025-03-29",
        10_000,
        true,
        "GPS coordinates, device serials and timestamps: what capture metadata reveals and when to redact it.",
        [
            "Signed capture metadata is valuable evidence and a privacy risk at the same time.",
            "Registries can publish the hash of the metadata while keeping exact coordinates private.",
            "Reporters working in hostile places should decide before capture which fields to keep.",
        ],
    ),
    (
        "agents-that-pay",
        "Software Agents That Pay Their Own Way",
        "Sofia Marchetti",
        "2025-06-18",
        70_000,
        true,
        "An agent with a small wallet can buy exactly the paragraphs it needs. Publishers are starting to price for them.",
        [
            "Agents retry on 402 just as browsers follow redirects: read the price, sign, repeat the request.",
            "Spending caps in the client keep a misbehaving agent from draining its wallet.",
            "Per-article prices make licensing legible to software in a way bundles never were.",
        ],
    ),
    (
        "draft-subscription-bundles",
        "Draft: Why Bundles Still Win for Human Readers",
        "Daniel Reyes",
        "2025-07-01",
        20_000,
        false,
        "Unpublished draft: not listed and not for sale.",
        [
            "Draft paragraph one.",
            "Draft paragraph two.",
            "Draft paragraph three.",
        ],
    ),
];

/// The deterministic demo catalog (12 published articles and one unpublished draft).
pub fn demo_articles() -> Vec<Article> {
    ENTRIES
        .iter()
        .map(
            |&(id, title, author, date, price, published, excerpt, sentences)| Article {
                id: id.to_owned(),
                title: title.to_owned(),
                excerpt: excerpt.to_owned(),
                content: content(title, author, excerpt, &sentences),
                author_name: author.to_owned(),
                published_date: date.to_owned(),
                price_atomic: price,
                published,
                licenses: licenses(id, price),
            },
        )
        .collect()
}

/// A realistic mix of license terms (RSL 1.0 vocabulary; see [`crate::domain::license`]):
/// - most articles: none of their own, so the site's default terms (search and AI input, no training);
/// - three sell two licenses, one per offer: `inference` at the article's price, `training` (training
///   permitted too) at a higher one;
/// - one forbids training and indexing and is for non-commercial and educational users only;
/// - one permits search only and prohibits every AI use.
fn licenses(id: &str, price: u64) -> Vec<License> {
    let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    let license = |id: &str, permits: &str, prohibits: &str, users: &str, price_atomic| License {
        id: id.to_owned(),
        permits: words(permits),
        prohibits: words(prohibits),
        users: words(users),
        price_atomic,
    };
    match id {
        "ai-crawlers-and-licensing" | "archive-digitisation-costs" | "eip-3009-in-practice" => {
            vec![
                license("inference", "search ai-input", "ai-train", "", price),
                license(
                    "training",
                    "search ai-input ai-index ai-train",
                    "",
                    "",
                    TRAINING_PRICE,
                ),
            ]
        }
        "deepfake-election-audit" => vec![license(
            "non-commercial",
            "search ai-input",
            "ai-train ai-index",
            "non-commercial education",
            price,
        )],
        "photo-metadata-privacy" => vec![license("search-only", "search", "ai-all", "", price)],
        _ => Vec::new(),
    }
}

/// The price of the demo's training licenses (0.1 USDC: the legacy v1 client's default ceiling).
pub const TRAINING_PRICE: u64 = 100_000;

/// An article of the demo catalog sold under two licenses (tests buy both).
pub const TWO_LICENSE_DEMO_ID: &str = "ai-crawlers-and-licensing";

/// The id of the one unpublished article of the demo catalog (tests use it).
pub const UNPUBLISHED_DEMO_ID: &str = "draft-subscription-bundles";

fn content(title: &str, author: &str, excerpt: &str, sentences: &[&str; 3]) -> String {
    format!(
        "{title}\nBy {author}\n\n{excerpt}\n\n{}\n\n{}\n\n{}\n\n\
         This article is licensed per request through x402: the receipt returned with it identifies the \
         payer, the price paid and the settlement, and can be verified by anyone at its verify URL.",
        sentences[0], sentences[1], sentences[2]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_is_deterministic_and_ids_are_unique() {
        let a = demo_articles();
        assert_eq!(a, demo_articles());
        let mut ids: Vec<_> = a.iter().map(|x| x.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), a.len());
        assert!(
            a.iter()
                .all(|x| x.price_atomic > 0 && x.price_atomic <= 100_000)
        );
        assert!(
            a.iter()
                .any(|x| x.id == UNPUBLISHED_DEMO_ID && !x.published)
        );
        for x in &a {
            if !x.licenses.is_empty() {
                crate::domain::license::validate(&x.licenses).unwrap();
                assert_eq!(x.licenses[0].price_atomic, x.price_atomic, "{}", x.id);
            }
        }
        let two = a.iter().find(|x| x.id == TWO_LICENSE_DEMO_ID).unwrap();
        assert_eq!(two.licenses.len(), 2);
        assert!(two.licenses[1].price_atomic > two.licenses[0].price_atomic);
    }
}
