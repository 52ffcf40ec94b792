//! What a person in a browser gets instead of the JSON 402 (a request whose `Accept` prefers HTML).
//!
//! - [`Paywall::Builtin`] (the default): a page that shows what is sold (a heading, one choice per offer with its
//!   price in USDC, the network, with a notice on a test network, the payee) and lets the reader pay the offer
//!   they chose from any EIP-1193 wallet (EIP-6963 discovery when several are
//!   installed, else `window.ethereum`): connect, switch to the offer's chain, show the USDC balance, sign the
//!   EIP-3009 authorization with `eth_signTypedData_v4`, repeat the request with `PAYMENT-SIGNATURE` and show
//!   the paid answer in place (HTML replaces the page; JSON is rendered: an article with its receipt links, or
//!   pretty-printed). When the offers are `exact` over Permit2 (a token without EIP-3009), it signs the Permit2
//!   permit instead; a wallet that has not allowed Permit2 signs an EIP-2612 permit too when the 402 declares
//!   `eip2612GasSponsoring`, or else sends one approval transaction first (it needs gas). Plain JavaScript
//!   compiled into the crate (about 16 KB, no CDN, works offline), the page
//!   rendered by an askama template (escaping by default), sent with a `Content-Security-Policy` that allows
//!   only its own inline script and style (by hash) and requests to its own origin.
//!
//!   The heading is the first offer's description (or the URL); each choice is named by its network. A service
//!   that knows better (an article's title and author, what each license permits) puts a
//!   [`PaywallDetails`] in the request's extensions before the layer sees it (`Arc<PaywallDetails>`, made once
//!   and shared: the layer keeps a page ready per details).
//! - [`Paywall::Custom`]: your template ([`PaywallTemplate`], or any `Fn(&PaywallPage) -> String`).
//! - [`Paywall::Off`]: browsers get the JSON 402 like any client.
//!
//! ```
//! use x402_tower::layer::paywall::{Paywall, PaywallPage};
//! let custom = Paywall::custom(|page: &PaywallPage<'_>| {
//!     format!("<!doctype html><title>Pay</title><p>{} costs {} atomic units</p>",
//!         x402_tower::layer::paywall::escape(page.resource_url), page.offers[0].amount.atomic_units())
//! });
//! # let _ = custom;
//! ```

use std::sync::{Arc, LazyLock};

use askama::Template;
use base64::Engine as _;
use http::HeaderValue;
use sha2::{Digest, Sha256};

use crate::offer::PaymentOffer;
use crate::price::format_decimal;

/// Renders a paywall page for a 402.
pub trait PaywallTemplate: Send + Sync + 'static {
    /// The whole HTML document.
    fn render(&self, page: &PaywallPage<'_>) -> String;
}

impl<F> PaywallTemplate for F
where
    F: Fn(&PaywallPage<'_>) -> String + Send + Sync + 'static,
{
    fn render(&self, page: &PaywallPage<'_>) -> String {
        self(page)
    }
}

/// What a paywall page is made from.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct PaywallPage<'a> {
    /// The absolute URL sold.
    pub resource_url: &'a str,
    /// The server's reason (`error` of the 402).
    pub error: &'a str,
    /// The offers (the first is the one the built-in page pays).
    pub offers: &'a [PaymentOffer],
    /// The v2 `PaymentRequired` document (JSON), as in the `PAYMENT-REQUIRED` header.
    pub payment_required: &'a str,
    /// What the service said about this request's page, if anything.
    pub details: Option<&'a PaywallDetails>,
}

/// What a person sees on the built-in paywall beyond the offers: a heading, a byline, each offer's name and
/// what it buys in words, a link back. Put in the request's extensions (`Arc<PaywallDetails>`) by the service.
///
/// ```
/// use x402_tower::layer::paywall::PaywallDetails;
///
/// let details = PaywallDetails::new("How Newsrooms Prove a Photo Is Real")
///     .byline("by Amara Okafor")
///     .choice("inference", "Search engines and AI answers may use it; no AI training.")
///     .choice("training", "Search, AI answers, AI indexing and AI training.")
///     .back("All articles", "/x402Article/list")
///     .nav("Example News", "/")
///     .nav("Catalog", "/x402Article/list");
/// # let _ = details;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PaywallDetails {
    /// The heading.
    pub title: String,
    /// Under the heading (`by ...`); empty for none.
    pub byline: String,
    /// One per offer, in the offers' order; an offer without one is named by its network.
    pub choices: Vec<PaywallChoice>,
    /// A link back: its text and where it goes.
    pub back: Option<(String, String)>,
    /// The site's navigation bar, as the service's own pages show it (text, href); the first is the home.
    pub nav: Vec<(String, String)>,
}

/// One offer as a person chooses it: a name and what it buys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PaywallChoice {
    /// Short (a license's name).
    pub name: String,
    /// What it buys, in a sentence.
    pub summary: String,
}

impl PaywallDetails {
    /// Details with `title` as the heading.
    pub fn new(title: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            ..Self::default()
        }
    }

    /// The line under the heading.
    pub fn byline(mut self, byline: impl Into<String>) -> Self {
        self.byline = byline.into();
        self
    }

    /// The next offer's name and what it buys.
    pub fn choice(mut self, name: impl Into<String>, summary: impl Into<String>) -> Self {
        self.choices.push(PaywallChoice {
            name: name.into(),
            summary: summary.into(),
        });
        self
    }

    /// A link back (`text`, `href`), shown above the heading and after paying.
    pub fn back(mut self, text: impl Into<String>, href: impl Into<String>) -> Self {
        self.back = Some((text.into(), href.into()));
        self
    }

    /// The next link of a navigation bar across the top (the first is the site's home), so the paywall
    /// looks like the service's other pages.
    pub fn nav(mut self, text: impl Into<String>, href: impl Into<String>) -> Self {
        self.nav.push((text.into(), href.into()));
        self
    }
}

/// Which page a browser gets. See the [module docs](self).
#[derive(Clone, Default)]
pub enum Paywall {
    /// The built-in page that pays from a browser wallet.
    #[default]
    Builtin,
    /// Your page.
    Custom(Arc<dyn PaywallTemplate>),
    /// No page: the JSON 402.
    Off,
}

impl std::fmt::Debug for Paywall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Paywall::Builtin => "Paywall::Builtin",
            Paywall::Custom(_) => "Paywall::Custom",
            Paywall::Off => "Paywall::Off",
        })
    }
}

impl Paywall {
    /// [`Paywall::Custom`] from a template or closure.
    pub fn custom(template: impl PaywallTemplate) -> Self {
        Paywall::Custom(Arc::new(template))
    }
}

/// HTML-escapes text (for custom templates written by hand).
pub fn escape(text: &str) -> String {
    askama::filters::escape(text, askama::filters::Html)
        .map(|s| s.to_string())
        .unwrap_or_default()
}

const SCRIPT: &str = include_str!("../../paywall/paywall.js");
const STYLE: &str = include_str!("../../paywall/paywall.css");

/// The built-in page's `Content-Security-Policy`: its inline script and style by hash, requests to its own
/// origin only (the paid request), nothing else.
static CSP: LazyLock<HeaderValue> = LazyLock::new(|| {
    let hash = |s: &str| base64::engine::general_purpose::STANDARD.encode(Sha256::digest(s));
    HeaderValue::try_from(format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; connect-src 'self'; \
         img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        hash(SCRIPT),
        hash(STYLE)
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'"))
});

#[derive(Template)]
#[template(path = "paywall.html")]
struct Builtin<'a> {
    title: &'a str,
    byline: &'a str,
    back: Option<&'a (String, String)>,
    nav: &'a [(String, String)],
    /// A test network's notice; empty on a mainnet.
    notice: String,
    /// What the prices are in: `USDC`, or another token's EIP-712 name.
    unit: &'a str,
    /// The choices are paid over Permit2.
    permit2: bool,
    choices: Vec<Choice<'a>>,
    /// The first offer's price (the one chosen when the page opens).
    price: String,
    network: String,
    pay_to: String,
    resource_url: &'a str,
    reason: &'static str,
    css: &'static str,
    script: &'static str,
    data: String,
}

/// An offer on the page.
struct Choice<'a> {
    name: &'a str,
    summary: &'a str,
    price: String,
}

/// `wallet_addEthereumChain` parameters of the public testnets, for a wallet that does not know the chain
/// (mainnets are in every wallet). Their public RPC endpoints and explorers.
fn add_chain_params(v1_name: &str, chain_id: u64) -> Option<serde_json::Value> {
    let (name, native, rpc, explorer) = match v1_name {
        "base-sepolia" => (
            "Base Sepolia",
            "ETH",
            "https://sepolia.base.org",
            "https://sepolia.basescan.org",
        ),
        "avalanche-fuji" => (
            "Avalanche Fuji",
            "AVAX",
            "https://api.avax-test.network/ext/bc/C/rpc",
            "https://testnet.snowtrace.io",
        ),
        "polygon-amoy" => (
            "Polygon Amoy",
            "POL",
            "https://rpc-amoy.polygon.technology",
            "https://amoy.polygonscan.com",
        ),
        "arbitrum-sepolia" => (
            "Arbitrum Sepolia",
            "ETH",
            "https://sepolia-rollup.arbitrum.io/rpc",
            "https://sepolia.arbiscan.io",
        ),
        _ => return None,
    };
    Some(serde_json::json!({
        "chainId": format!("0x{chain_id:x}"),
        "chainName": name,
        "nativeCurrency": {"name": native, "symbol": native, "decimals": 18},
        "rpcUrls": [rpc],
        "blockExplorerUrls": [explorer],
    }))
}

/// The spec's reasons a reader may see, in words: used for the page's first rendering and sent to its
/// script (in the data block) for the answers it gets itself. One table for both.
const REASONS: &[(&str, &str)] = &[
    (
        "insufficient_funds",
        "Your USDC balance is too low for this payment.",
    ),
    (
        "invalid_exact_evm_payload_signature",
        "The wallet's signature was not accepted.",
    ),
    (
        "invalid_exact_evm_nonce_already_used",
        "This payment was already used.",
    ),
    (
        "invalid_exact_evm_payload_authorization_valid_before",
        "The payment expired before it arrived. Try again.",
    ),
    (
        "invalid_exact_evm_payload_authorization_value",
        "The amount signed is not the price.",
    ),
    (
        "settlement_pending",
        "The payment is being confirmed on chain. Try again in a moment: you will not be charged twice.",
    ),
    (
        "permit2_allowance_required",
        "Your wallet has not allowed Permit2 to move this token: approve it once, then pay again.",
    ),
    (
        "permit2_insufficient_balance",
        "Your balance of this token is too low for this payment.",
    ),
    (
        "invalid_permit2_signature",
        "The wallet's signature was not accepted.",
    ),
    ("permit2_invalid_nonce", "This payment was already used."),
    (
        "permit2_deadline_expired",
        "The payment expired before it arrived. Try again.",
    ),
];

/// [`REASONS`] as the JSON object the script reads, serialised once.
static REASONS_JSON: LazyLock<String> = LazyLock::new(|| {
    let map: serde_json::Map<String, serde_json::Value> = REASONS
        .iter()
        .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v)))
        .collect();
    serde_json::Value::Object(map).to_string()
});

/// The server's reason in words (empty for the first 402 of a request without payment).
fn reason_in_words(error: &str) -> &'static str {
    if error.is_empty() || error == crate::layer::NO_PAYMENT_ERROR {
        return "";
    }
    match REASONS.iter().find(|(k, _)| *k == error) {
        Some((_, words)) => words,
        None if error.starts_with("siwx_") => "Signing in did not work: pay to read.",
        None => "The last payment was refused. Try again.",
    }
}

/// The page for `page` and the headers it needs (the CSP of the built-in page), or `None` when the paywall
/// is off.
pub(crate) fn render(
    paywall: &Paywall,
    page: &PaywallPage<'_>,
) -> Option<(String, Option<HeaderValue>)> {
    match paywall {
        Paywall::Off => None,
        Paywall::Custom(t) => Some((t.render(page), None)),
        Paywall::Builtin => {
            let first = page.offers.first()?;
            let network = match first.network.info() {
                Some(i) => format!("{} ({})", i.v1_name, i.caip2),
                None => first.network.caip2().to_owned(),
            };
            // The requirements for the script, with what it shows; `<` escaped so nothing in the JSON can
            // close the data block.
            let chain = first
                .network
                .info()
                .and_then(|i| add_chain_params(i.v1_name, i.chain_id))
                .map(|c| format!("\"chain\":{c},"))
                .unwrap_or_default();
            let back = page
                .details
                .and_then(|d| d.back.as_ref())
                .map(|(text, href)| {
                    format!(
                        "\"back\":{},",
                        serde_json::json!({ "text": text, "href": href })
                    )
                })
                .unwrap_or_default();
            // USDC (its EIP-712 name is "USD Coin" on mainnets, "USDC" on test networks), else the token's name.
            let unit = match first.token.name.as_str() {
                "USD Coin" | "USDC" | "" => "USDC",
                name => name,
            };
            let data = format!(
                "{{\"networkName\":{},\"decimals\":{},\"unit\":{},\"reasons\":{},{chain}{back}{}",
                serde_json::to_string(&network).unwrap_or_default(),
                first.token.decimals,
                serde_json::to_string(unit).unwrap_or_default(),
                *REASONS_JSON,
                page.payment_required.get(1..).unwrap_or("}")
            )
            .replace('<', "\\u003c");
            let details = page.details;
            let title = match details {
                Some(d) if !d.title.is_empty() => d.title.as_str(),
                _ if !first.description.is_empty() => first.description.as_str(),
                _ => page.resource_url,
            };
            // The page signs `exact`, over EIP-3009 or over Permit2: it lists the offers that start the list
            // and move the token as the first one does (a service puts the EIP-3009 ones first, which need
            // no approval; offers over Permit2 after them, and `upto`, are for programs). A token without
            // EIP-3009 is sold over Permit2 alone, and the page pays that way.
            let method = |o: &PaymentOffer| o.extra.get("assetTransferMethod").cloned();
            let first_method = method(first);
            let choices: Vec<Choice<'_>> = page
                .offers
                .iter()
                .take_while(|o| o.scheme == crate::proto::SCHEME_EXACT && method(o) == first_method)
                .enumerate()
                .map(|(i, o)| {
                    let given = details.and_then(|d| d.choices.get(i));
                    Choice {
                        name: given.map_or_else(
                            || o.network.info().map_or(o.network.caip2(), |n| n.v1_name),
                            |c| c.name.as_str(),
                        ),
                        summary: given.map_or("", |c| c.summary.as_str()),
                        price: format_decimal(o.amount.atomic_units(), o.token.decimals),
                    }
                })
                .collect();
            let notice = match first.network.info() {
                Some(n) if n.is_testnet() && unit == "USDC" => format!(
                    "{} is a test network: its USDC comes free from a faucet, and no real money moves.",
                    n.v1_name
                ),
                Some(n) if n.is_testnet() => {
                    format!("{} is a test network: no real money moves.", n.v1_name)
                }
                // The chain ids of local development chains (anvil, Hardhat, Ganache).
                None if matches!(first.network.chain_id(), 31337 | 1337) => format!(
                    "{} is a local development chain: no real money moves.",
                    first.network.caip2()
                ),
                _ => String::new(),
            };
            let html = Builtin {
                title,
                byline: details.map_or("", |d| d.byline.as_str()),
                back: details.and_then(|d| d.back.as_ref()),
                nav: details.map_or(&[], |d| d.nav.as_slice()),
                notice,
                unit,
                permit2: first_method.as_deref() == Some(crate::scheme::PERMIT2_TRANSFER_METHOD),
                price: choices.first().map(|c| c.price.clone()).unwrap_or_default(),
                choices,
                network,
                pay_to: first.pay_to.to_checksum(None),
                resource_url: page.resource_url,
                reason: reason_in_words(page.error),
                css: STYLE,
                script: SCRIPT,
                data,
            }
            .render()
            .unwrap_or_else(|e| {
                format!("<!doctype html><title>402</title><p>Payment required ({e})</p>")
            });
            Some((html, Some(CSP.clone())))
        }
    }
}
