//! Which settler moves the money of this deployment: on chain (`--rpc-url` + `--settler-key`), a remote
//! facilitator (`--facilitator-url`), or none (verify-only). Chosen here, at the composition root, and handed
//! to interface A, whose engine owns it.

use std::sync::Arc;

use x402_tower::settle::onchain::OnchainSettler;
use x402_tower::settle::{FacilitatorSettler, Settler, VerifyOnlySettler};

use crate::licensing::BuildError;
use crate::licensing::settings::{LicensingSettings as Settings, OnchainSettings};

/// The settler of the configuration: on chain (`--rpc-url` + `--settler-key`), a remote facilitator, or
/// verify-only. The x402 layer's engine owns it; the facilitator API uses the same engine.
///
/// Returns the settler, and the on-chain settler again when that is it (sign-in-with-x checks contract
/// wallets and the minter mints through it).
pub(crate) fn settler(
    settings: &Settings,
) -> Result<(Arc<dyn Settler>, Option<OnchainSettler>), BuildError> {
    let onchain = settings
        .onchain
        .as_ref()
        .map(OnchainSettings::settler)
        .transpose()
        .map_err(|e| BuildError::Payment(e.to_string()))?;
    let settler: Arc<dyn Settler> = match (&onchain, &settings.facilitator_url) {
        (Some(onchain), _) => Arc::new(onchain.clone()),
        (None, Some(url)) => {
            let mut builder = FacilitatorSettler::builder(url.clone())
                .settle_timeout(settings.facilitator_settle_timeout);
            if let Some(token) = &settings.facilitator_url_token {
                let value =
                    http::HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| {
                        BuildError::Payment("facilitator token is not a header value".into())
                    })?;
                builder = builder.auth_headers(move |_| {
                    let mut h = http::HeaderMap::new();
                    h.insert(http::header::AUTHORIZATION, value.clone());
                    h
                });
            }
            Arc::new(
                builder
                    .build()
                    .map_err(|e| BuildError::Payment(format!("facilitator {url}: {e}")))?,
            )
        }
        (None, None) => Arc::new(VerifyOnlySettler),
    };
    Ok((settler, onchain))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the engine over the configured settler takes as the abandonment threshold of an in-flight payment.
    fn stale_after(config: &crate::Config) -> u64 {
        let settings = config.validate().unwrap().licensing;
        x402_tower::PaymentEngine::builder()
            .settler(settler(&settings).unwrap().0)
            .build()
            .unwrap()
            .stale_after()
            .as_secs()
    }

    #[test]
    fn an_in_flight_payment_is_abandoned_only_after_the_settlers_longest_wait() {
        let mut config = crate::Config::for_tests();
        assert_eq!(stale_after(&config), 180);
        config.payment.facilitator_url = Some("http://127.0.0.1:1".into());
        config.payment.facilitator_settle_timeout_secs = 300;
        assert_eq!(stale_after(&config), 360);
        config.payment.facilitator_url = None;
        config.payment.rpc_url = Some("http://127.0.0.1:1".into());
        config.payment.settler_key =
            Some("0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d".into());
        config.payment.rpc_receipt_timeout_secs = 900;
        // The receipt wait, the send phase (five JSON-RPC calls of at most 10 s) and a minute.
        assert_eq!(stale_after(&config), 900 + 50 + 60);
        config.payment.rpc_timeout_secs = 2;
        assert_eq!(stale_after(&config), 900 + 10 + 60);
        for refused in [0, 121] {
            config.payment.rpc_timeout_secs = refused;
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains("rpc-timeout-secs"), "{refused}: {err}");
        }
        config.payment.rpc_timeout_secs = 10;
        config.payment.rpc_log_lookback_blocks = 250_000;
        let settings = config.validate().unwrap();
        let onchain = settings
            .licensing
            .onchain
            .as_ref()
            .expect("on-chain settlement");
        assert_eq!(onchain.log_lookback_blocks, 250_000);
        assert_eq!(onchain.settler().unwrap().log_lookback_blocks(), 250_000);
        for refused in [0, 10_000_001] {
            config.payment.rpc_log_lookback_blocks = refused;
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains("rpc-log-lookback-blocks"), "{refused}: {err}");
        }
    }
}
