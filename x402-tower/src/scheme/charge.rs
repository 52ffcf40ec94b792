//! What a request used, for a scheme that settles it ([`Scheme::charges_what_was_used`](super::Scheme)):
//! [`Charge`], set by the protected service in its response's extensions, or by a service in another
//! language in the official `Settlement-Overrides` response header.

use alloy_primitives::U256;
use http::HeaderMap;

/// The response header a service sets to say what to settle (`{"amount": "1000" | "50%" | "$0.05"}`), as
/// the official servers read it. The layer removes it before the answer leaves.
pub const SETTLEMENT_OVERRIDES: &str = "settlement-overrides";

/// The longest `Settlement-Overrides` value read (bytes).
const OVERRIDES_MAX: usize = 1024;

/// What a request used, to be settled instead of the maximum the payer signed. Put it in the response's
/// extensions:
///
/// ```
/// use x402_tower::scheme::Charge;
///
/// let mut response = http::Response::new("three records");
/// response.extensions_mut().insert(Charge::atomic(3_000));
/// assert_eq!(Charge::parse("50%").unwrap(), Charge::Percent(5_000));
/// let maximum = alloy_primitives::U256::from(1_000_000);
/// assert_eq!(Charge::parse("$0.05").unwrap().resolve(maximum, 6).unwrap(), alloy_primitives::U256::from(50_000));
/// ```
///
/// A response without one is settled at the maximum (as the official servers do). A charge above the
/// maximum is refused before anything is settled: the client gets a 500 and pays nothing. A charge of
/// zero settles nothing and says so (`transaction: ""`, `amount: "0"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charge {
    /// Atomic units of the token.
    Atomic(U256),
    /// A share of the maximum in hundredths of a percent (`5000` = 50 %), rounded down.
    Percent(u32),
    /// US dollars in millionths (`50_000` = $0.05), for a token worth one dollar (USDC): converted with
    /// the token's decimals; a fraction of its smallest unit is refused.
    UsdMicros(u64),
}

/// A charge that cannot be settled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChargeError {
    /// Not one of the formats (`"1000"`, `"50%"`, `"$0.05"`), or not JSON with an `amount`.
    #[error(
        "unreadable charge {0:?}: expected atomic units (\"1000\"), a share (\"50%\") or dollars (\"$0.05\")"
    )]
    Unreadable(String),
    /// More than the payer signed.
    #[error("the charge {charge} exceeds the signed maximum {maximum}")]
    AboveMaximum {
        /// The charge, atomic units.
        charge: U256,
        /// The maximum, atomic units.
        maximum: U256,
    },
    /// A dollar amount finer than the token's smallest unit.
    #[error("the charge is finer than the token's smallest unit ({decimals} decimals)")]
    TooFine {
        /// The token's decimals.
        decimals: u8,
    },
}

impl Charge {
    /// `amount` atomic units.
    pub fn atomic(amount: u128) -> Self {
        Charge::Atomic(U256::from(amount))
    }

    /// Nothing: the request used nothing, nothing is settled.
    pub const ZERO: Charge = Charge::Atomic(U256::ZERO);

    /// Reads the official formats: `"1000"` (atomic units), `"50%"` or `"12.25%"` (at most two decimals),
    /// `"$0.05"` (at most six decimals).
    pub fn parse(text: &str) -> Result<Self, ChargeError> {
        let unreadable = || ChargeError::Unreadable(text.chars().take(64).collect());
        let text = text.trim();
        if let Some(share) = text.strip_suffix('%') {
            let hundredths = fixed_point(share, 2).ok_or_else(unreadable)?;
            return u32::try_from(hundredths)
                .ok()
                .filter(|h| *h <= 10_000)
                .map(Charge::Percent)
                .ok_or_else(unreadable);
        }
        if let Some(dollars) = text.strip_prefix('$') {
            return fixed_point(dollars, 6)
                .map(Charge::UsdMicros)
                .ok_or_else(unreadable);
        }
        crate::proto::wire::parse_decimal(text)
            .map(Charge::Atomic)
            .ok_or_else(unreadable)
    }

    /// The `Settlement-Overrides` header's charge (`{"amount": "…"}`), if the header is there.
    pub fn from_overrides(headers: &HeaderMap) -> Option<Result<Self, ChargeError>> {
        let value = headers.get(SETTLEMENT_OVERRIDES)?;
        #[derive(serde::Deserialize)]
        struct Overrides {
            amount: String,
        }
        let text = value.to_str().ok().filter(|t| t.len() <= OVERRIDES_MAX);
        Some(
            text.and_then(|t| serde_json::from_str::<Overrides>(t).ok())
                .ok_or_else(|| ChargeError::Unreadable("Settlement-Overrides".into()))
                .and_then(|o| Charge::parse(&o.amount)),
        )
    }

    /// Atomic units to settle out of `maximum`, for a token of `decimals`.
    pub fn resolve(self, maximum: U256, decimals: u8) -> Result<U256, ChargeError> {
        let charge = match self {
            Charge::Atomic(a) => a,
            Charge::Percent(hundredths) => maximum * U256::from(hundredths) / U256::from(10_000u32),
            Charge::UsdMicros(micros) => {
                let micros = U256::from(micros);
                if decimals >= 6 {
                    micros * U256::from(10u64).pow(U256::from(decimals - 6))
                } else {
                    let unit = U256::from(10u64).pow(U256::from(6 - decimals));
                    if micros % unit != U256::ZERO {
                        return Err(ChargeError::TooFine { decimals });
                    }
                    micros / unit
                }
            }
        };
        if charge > maximum {
            return Err(ChargeError::AboveMaximum { charge, maximum });
        }
        Ok(charge)
    }
}

/// `text` (digits, at most `places` decimals after a dot) times `10^places`.
fn fixed_point(text: &str, places: u32) -> Option<u64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty()
        || whole.len() > 12
        || fraction.len() > places as usize
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let scale = 10u64.pow(places);
    let fraction_value = if fraction.is_empty() {
        0
    } else {
        fraction.parse::<u64>().ok()? * 10u64.pow(places - fraction.len() as u32)
    };
    whole
        .parse::<u64>()
        .ok()?
        .checked_mul(scale)?
        .checked_add(fraction_value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_official_formats_resolve_against_the_maximum() {
        let max = U256::from(1_000_000u64);
        let at = |s: &str| Charge::parse(s).and_then(|c| c.resolve(max, 6));
        assert_eq!(at("1000"), Ok(U256::from(1000u64)));
        assert_eq!(at("0"), Ok(U256::ZERO));
        assert_eq!(at("50%"), Ok(U256::from(500_000u64)));
        assert_eq!(at("12.25%"), Ok(U256::from(122_500u64)));
        assert_eq!(at("0.01%"), Ok(U256::from(100u64)));
        assert_eq!(at("$0.05"), Ok(U256::from(50_000u64)));
        assert_eq!(at("$1"), Ok(max));
        assert!(matches!(
            at("1000001"),
            Err(ChargeError::AboveMaximum { .. })
        ));
        assert!(matches!(at("$1.01"), Err(ChargeError::AboveMaximum { .. })));
        for bad in [
            "",
            "%",
            "$",
            "1.5",
            "-1",
            "101%",
            "1.234%",
            "$0.0000001",
            "0x10",
            "50 %x",
            "1e3",
        ] {
            assert!(matches!(at(bad), Err(ChargeError::Unreadable(_))), "{bad}");
        }
        // Two decimals: a sixth of a cent is finer than the token.
        assert_eq!(
            Charge::parse("$0.015").unwrap().resolve(max, 2),
            Err(ChargeError::TooFine { decimals: 2 })
        );
        assert_eq!(
            Charge::parse("$0.01").unwrap().resolve(max, 2),
            Ok(U256::from(1u64))
        );
        assert_eq!(
            Charge::parse("$1").unwrap().resolve(U256::MAX, 18),
            Ok(U256::from(10u64).pow(U256::from(18u64)))
        );
    }

    #[test]
    fn the_overrides_header_is_json_with_an_amount() {
        let mut h = HeaderMap::new();
        assert_eq!(Charge::from_overrides(&h), None);
        h.insert(SETTLEMENT_OVERRIDES, r#"{"amount":"25%"}"#.parse().unwrap());
        assert_eq!(Charge::from_overrides(&h), Some(Ok(Charge::Percent(2500))));
        h.insert(SETTLEMENT_OVERRIDES, "25%".parse().unwrap());
        assert!(matches!(
            Charge::from_overrides(&h),
            Some(Err(ChargeError::Unreadable(_)))
        ));
    }
}
