//! The llms.txt licensing instructions: what is for sale, at what price, how to pay with x402.

use std::fmt::Write as _;

use super::settings::PaymentNetwork;
use crate::domain::Article;

/// Render the instructions for `articles` sold in `payment` to `pay_to`, on a server at `public_url`.
pub fn render(
    public_url: &str,
    payment: &PaymentNetwork,
    pay_to: &str,
    articles: &[std::sync::Arc<Article>],
) -> String {
    let mut t = String::with_capacity(4096);
    let network = match payment.v1_name() {
        Some(v1) => format!("{} (x402 v1 name `{v1}`)", payment.caip2()),
        None => payment.caip2().to_owned(),
    };
    let _ = write!(
        t,
        "# Content licensing\n\n\
         > The full text of every article listed below is licensed per request, for a price in USDC paid with \
         the x402 protocol (HTTP 402, scheme `exact`, an EIP-3009 transferWithAuthorization signature). \
         No account and no API key: the payment is the license, and every paid answer carries a verifiable receipt.\n\n\
         ## Terms\n\n\
         - One payment licenses one article for the payer named in the receipt.\n\
         - Network: {network}. Token: {asset} (EIP-712 domain name `{name}`, version `{version}`). Recipient: {pay_to}.\n\
         - Prices are per article and license, in USDC, below and in the catalog.\n\
         - What each license permits and prohibits (RSL 1.0: search, ai-input, ai-index, ai-train...) is below and, \
         machine-readable, at {public_url}/license.xml (`application/rsl+xml`; robots.txt has its `License:` line). \
         An article sold under several licenses has one offer per license in its 402; add `&license=<id>` to be \
         offered one. The receipt records the license bought and the version of the terms.\n\n\
         ## Catalog\n\n\
         - Machine-readable catalog (free): {public_url}/x402Article/list\n\
         - OpenAPI 3.1 description: {public_url}/openapi.json\n\n",
        asset = payment.token.address,
        name = payment.token.name,
        version = payment.token.version,
    );
    for a in articles {
        let _ = writeln!(
            t,
            "- [{title}]({public_url}/x402Article?articleId={id}): {price} USDC. {excerpt}",
            title = a.title,
            id = a.id,
            price = super::usdc_display(a.price_atomic),
            excerpt = a.excerpt,
        );
        for l in &a.licenses {
            let _ = writeln!(
                t,
                "  - license `{lid}`: {price} USDC, {summary}",
                lid = l.id,
                price = super::usdc_display(l.price_atomic),
                summary = crate::domain::license::summary(l),
            );
        }
    }
    let _ = write!(
        t,
        "\n## How to pay with x402\n\n\
         1. GET {public_url}/x402Article?articleId=<id>. The answer is 402 Payment Required with the payment \
         requirements as Base64 JSON in the `PAYMENT-REQUIRED` header (x402 v2; the same value is in \
         `X-Payment-Required`) and an x402 v1 JSON body (`accepts`).\n\
         2. Sign an EIP-3009 TransferWithAuthorization for exactly the offered `amount` to `payTo`, valid from \
         `validAfter` 0 until now + `maxTimeoutSeconds`, with a random 32-byte nonce.\n\
         3. Repeat the GET with the header `PAYMENT-SIGNATURE: <Base64 JSON PaymentPayload>` (v2, `accepted` = the \
         offer) or `X-PAYMENT` (v1). Official clients do steps 1 to 3 for you: `@x402/fetch` (npm), `x402` (PyPI).\n\
         4. The 200 answer holds the article and `receipt.nft.verifyUrl` (the receipt as JSON) and \
         `receipt.certificate.url` (a printable certificate). A payment settles once: resending the identical \
         payment for the same article (a lost answer, a retry) gets the same article and receipt without a second \
         charge; the same payment for another article is refused.\n"
    );
    t
}
