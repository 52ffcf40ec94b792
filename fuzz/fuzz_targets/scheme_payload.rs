//! A payment's `payload` member (the scheme's own JSON) read and checked by every built-in scheme
//! (`exact` over EIP-3009 and Permit2, `upto`) against an offer it sells. Never a panic; a payload that cannot
//! be read or does not hold is a refusal.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use serde_json::value::RawValue;
use x402_tower::scheme::{Check, ExactEip3009, ExactPermit2, Prepared, Scheme, SchemeOffer, UptoPermit2};
use x402_tower::{PaymentOffer, Price};

/// Each scheme with an offer it sells and what it prepared for it.
static SCHEMES: LazyLock<Vec<(Box<dyn Scheme>, PaymentOffer, Prepared)>> = LazyLock::new(|| {
    let usdc = PaymentOffer::usdc(
        "base-sepolia".parse().expect("network"),
        "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
            .parse()
            .expect("address"),
        Price::from_usdc_decimal("0.01").expect("price"),
    )
    .expect("offer");
    let schemes: Vec<(Box<dyn Scheme>, PaymentOffer)> = vec![
        (Box::new(ExactEip3009::default()), usdc.clone()),
        (Box::new(ExactPermit2::default()), usdc.clone().extra("assetTransferMethod", "permit2")),
        (
            Box::new(UptoPermit2::default()),
            usdc.scheme("upto")
                .extra("facilitatorAddress", "0x90F79bf6EB2c4f870365E785982E1f101E93b906"),
        ),
    ];
    schemes
        .into_iter()
        .map(|(scheme, offer)| {
            let prepared = scheme
                .prepare(SchemeOffer { offer: &offer, operator: true })
                .expect("prepared");
            (scheme, offer, prepared)
        })
        .collect()
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(payload) = serde_json::from_str::<Box<RawValue>>(text) else {
        return;
    };
    for (scheme, offer, prepared) in SCHEMES.iter() {
        assert!(scheme.sells(offer));
        let Ok(paid) = scheme.read(&payload, offer) else {
            continue;
        };
        for (x402_version, now) in [(1, 0), (2, 1_765_000_000), (2, u64::MAX)] {
            for contract_wallets in [false, true] {
                let check = Check { offer, prepared, x402_version, now, contract_wallets };
                let _ = scheme.check(&paid, check);
            }
        }
    }
});
