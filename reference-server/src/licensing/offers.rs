//! What an article is sold for: its offers (one per license, in the article's order), what the paywall shows
//! a person for them, and the article a paid resource URL names. Built once per catalog load.

use std::sync::Arc;

use x402_tower::layer::paywall::PaywallDetails;
use x402_tower::pricing::Offers;
use x402_tower::{PaymentOffer, Price};

use super::settings::PaymentNetwork;
use crate::domain::Article;
use crate::domain::license::License;

/// Which of an article's licenses a request asks for (`&license=<id>`, its position in the article's
/// licenses); `None`: every license, one offer each, in the article's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LicenseChoice(pub Option<usize>);

/// The licenses a request for `article` is offered (an article in the catalog has at least one).
pub(crate) fn licenses_offered(article: &Article, choice: LicenseChoice) -> &[License] {
    match choice.0 {
        Some(i) => article.licenses.get(i..=i).unwrap_or_default(),
        None => &article.licenses,
    }
}

/// The offers an article is sold with, one per license offered and transfer method (EIP-3009 first, then
/// Permit2, as configured): the x402 layer's, and the handler's 402 for a replayed payment. The position
/// of an offer modulo the number of licenses offered is the position of its license in
/// [`licenses_offered`] ([`license_of_offer`]), which is how a paid request learns the license bought.
pub(crate) fn article_offers(
    payment: &PaymentNetwork,
    pay_to: alloy_primitives::Address,
    article: &Article,
    choice: LicenseChoice,
) -> Vec<PaymentOffer> {
    let methods = [
        (payment.eip3009, None),
        (
            payment.permit2,
            Some(x402_tower::scheme::PERMIT2_TRANSFER_METHOD),
        ),
    ];
    methods
        .into_iter()
        .filter(|(on, _)| *on)
        .flat_map(|(_, method)| {
            licenses_offered(article, choice)
                .iter()
                .map(move |license| (method, license))
        })
        .map(|(method, license)| {
            let offer = PaymentOffer::new(
                payment.network.clone(),
                payment.token.clone(),
                pay_to,
                Price::from(license.price_atomic),
            )
            // The resource, which every offer shares (a v2 402 has one description); the license is
            // `extra.license`, its terms are the `terms` extension and the `Link` to the RSL file.
            .description(format!("\"{}\" by {}", article.title, article.author_name))
            .mime_type("application/json")
            // Which license this offer sells: a buyer chooses by it, not by the order of `accepts`.
            .extra("license", license.id.clone());
            match method {
                Some(method) => offer.extra("assetTransferMethod", method),
                None => offer,
            }
        })
        .collect()
}

/// The license a paid offer sold: its position among the offers, modulo the licenses offered (each method
/// offers every license, in the same order).
pub(crate) fn license_of_offer(
    article: &Article,
    choice: LicenseChoice,
    offer_index: usize,
) -> Option<&License> {
    let licenses = licenses_offered(article, choice);
    licenses.get(offer_index.checked_rem(licenses.len())?)
}

/// How articles are sold: the network and token, and who is paid. The catalog builds each article's
/// [`ArticleOffers`] with it once per load.
#[derive(Debug, Clone)]
pub struct ArticlePricing {
    payment: PaymentNetwork,
    pay_to: alloy_primitives::Address,
}

impl ArticlePricing {
    /// Articles sold in `payment`'s token to `pay_to`.
    pub fn new(payment: PaymentNetwork, pay_to: alloy_primitives::Address) -> Self {
        Self { payment, pay_to }
    }

    /// `article`'s offers for every license choice (as `article_offers` builds them), each with what the
    /// paywall shows a person for it.
    pub fn offers(&self, article: &Article) -> ArticleOffers {
        ArticleOffers(
            std::iter::once(LicenseChoice(None))
                .chain((0..article.licenses.len()).map(|i| LicenseChoice(Some(i))))
                .map(|c| {
                    (
                        Offers::new(article_offers(&self.payment, self.pay_to, article, c)),
                        Arc::new(paywall_details(article, c)),
                    )
                })
                .collect(),
        )
    }
}

/// What the paywall shows a person for `article` sold under `choice`: its title and author, each license
/// offered by name with what it allows in words, a link back to the catalog.
fn paywall_details(article: &Article, choice: LicenseChoice) -> PaywallDetails {
    licenses_offered(article, choice).iter().fold(
        PaywallDetails::new(article.title.clone())
            .byline(format!("by {}", article.author_name))
            .back("All articles", "/x402Article/list")
            // The site's bar, as `templates/base.html` draws it.
            .nav("x402 reference server", "/")
            .nav("Catalog", "/x402Article/list")
            .nav("Registry", "/api/v3/assets/?format=api")
            .nav("API docs", "/docs/"),
        |details, license| {
            details.choice(
                license.id.clone(),
                crate::domain::license::in_words(license),
            )
        },
    )
}

/// A published article's offers, built once per catalog load (every license; then each license alone): the
/// x402 layer checks and compiles each list once too ([`Offers`]), instead of every request for the article
/// formatting the licenses' descriptions and hashing the list.
#[derive(Debug, Clone)]
pub struct ArticleOffers(Arc<[(Offers, Arc<PaywallDetails>)]>);

impl ArticleOffers {
    /// The offers for `choice` (empty for a license the article does not have: `with_article` refuses it
    /// first).
    pub fn get(&self, choice: LicenseChoice) -> Offers {
        self.0
            .get(choice.0.map_or(0, |i| i + 1))
            .map(|(offers, _)| offers.clone())
            .unwrap_or_else(|| Offers::new(Vec::new()))
    }

    /// What the paywall shows for `choice` (shared: the x402 layer keeps its page ready).
    pub fn paywall(&self, choice: LicenseChoice) -> Option<Arc<PaywallDetails>> {
        self.0
            .get(choice.0.map_or(0, |i| i + 1))
            .map(|(_, details)| details.clone())
    }
}

/// The `articleId` of a resource URL's query.
pub(crate) fn article_id_of(resource_url: &str) -> Option<String> {
    let query = resource_url.split_once('?')?.1;
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "articleId")
        .map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::licensing::test_article;

    fn license(id: &str, price_atomic: u64) -> License {
        License {
            id: id.into(),
            permits: vec![],
            prohibits: vec![],
            users: vec![],
            price_atomic,
        }
    }

    fn amounts(offers: &Offers) -> Vec<String> {
        offers
            .as_slice()
            .iter()
            .map(|o| o.amount.atomic_units().to_string())
            .collect()
    }

    #[test]
    fn an_articles_offers_are_every_license_then_each_alone_as_article_offers_builds_them() {
        let settings = crate::Config::for_tests().validate().unwrap().licensing;
        let pricing = ArticlePricing::new(settings.payment.clone(), settings.pay_to);
        let mut a = test_article("a", true);
        a.licenses = vec![license("inference", 40_000), license("training", 100_000)];
        let offers = pricing.offers(&a);
        assert_eq!(
            amounts(&offers.get(LicenseChoice(None))),
            ["40000", "100000"]
        );
        assert_eq!(amounts(&offers.get(LicenseChoice(Some(1)))), ["100000"]);
        for choice in [None, Some(0), Some(1)].map(LicenseChoice) {
            let direct = article_offers(&settings.payment, settings.pay_to, &a, choice);
            assert_eq!(offers.get(choice).as_slice(), direct.as_slice());
        }
        // The same lists on every request (compiled once by the layer).
        let again = offers.clone().get(LicenseChoice(None));
        assert!(std::ptr::eq(
            offers.get(LicenseChoice(None)).as_slice(),
            again.as_slice()
        ));
        // A choice the article does not have (with_article refuses it first): no offers (the layer's 500).
        assert!(offers.get(LicenseChoice(Some(7))).as_slice().is_empty());
    }
}
