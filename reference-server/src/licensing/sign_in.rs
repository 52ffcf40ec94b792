//! Sign-in-with-x for the articles: a buyer who paid for an article signs in with the paying wallet instead
//! of paying again.

use std::sync::Arc;

use x402_tower::extensions::siwx::{PaidCheck, SignInWithX};
use x402_tower::proto::checksum;
use x402_tower::settle::onchain::OnchainSettler;

use super::offers::article_id_of;
use super::settings::LicensingSettings as Settings;
use crate::store::licensing::LicensingStore;

/// Sign-in-with-x for the articles: receipts answer "did this address pay"; with an on-chain settler
/// (`--rpc-url`), contract wallets sign in too (EIP-1271 through the same node).
pub(crate) fn sign_in_with_x(
    settings: &Settings,
    onchain: Option<&OnchainSettler>,
    licensing: Arc<dyn LicensingStore>,
) -> SignInWithX {
    let siwx = SignInWithX::new(sign_in_key(settings), Arc::new(BoughtArticles(licensing)));
    match onchain {
        Some(onchain) => siwx.contract_wallets(Arc::new(onchain.clone())),
        None => siwx,
    }
}

/// The key that tags sign-in-with-x nonces: derived from the media URL signing key, which every instance
/// of a deployment shares (docs/deploy.md), so a nonce issued by one instance is honoured by another; a
/// random key per start without it (one instance).
fn sign_in_key(settings: &Settings) -> Vec<u8> {
    use hmac::{Hmac, Mac};
    match &settings.url_signing_key {
        Some(key) => match <Hmac<sha2::Sha256> as Mac>::new_from_slice(key) {
            Ok(mut mac) => {
                mac.update(b"x402 sign-in-with-x nonce key");
                mac.finalize().into_bytes().to_vec()
            }
            Err(_) => uuid::Uuid::new_v4().as_bytes().repeat(2),
        },
        None => uuid::Uuid::new_v4().as_bytes().repeat(2),
    }
}

/// "Did this address pay for this article": a receipt of that payer for the `articleId` of the resource URL.
struct BoughtArticles(Arc<dyn LicensingStore>);

impl PaidCheck for BoughtArticles {
    fn has_paid<'a>(
        &'a self,
        payer: alloy_primitives::Address,
        resource_url: &'a str,
    ) -> x402_tower::pricing::BoxFuture<'a, Result<bool, x402_tower::store::StoreError>> {
        Box::pin(async move {
            let Some(article) = article_id_of(resource_url) else {
                return Ok(false);
            };
            self.0
                .receipt_of(&checksum(&payer), &article)
                .await
                .map(|r| r.is_some())
                .map_err(|e| x402_tower::store::StoreError::Backend(Box::new(e)))
        })
    }
}
