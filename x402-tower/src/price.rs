//! Prices in atomic token units, parsed from decimals without floating point.

use std::fmt;

use alloy_primitives::U256;

use crate::network::USDC_DECIMALS;

/// An amount in the token's atomic units (USDC: 1 unit = 0.000001 USDC).
///
/// ```
/// use x402_tower::Price;
/// use alloy_primitives::U256;
///
/// assert_eq!(Price::from_usdc_decimal("0.25").unwrap().atomic_units(), U256::from(250_000u64));
/// assert_eq!(Price::from_usdc_decimal("1").unwrap(), Price::atomic(U256::from(1_000_000u64)));
/// assert!(Price::from_usdc_decimal("0.0000001").is_err()); // finer than 6 decimals
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Price(U256);

/// Why a decimal price did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    /// The text is not a plain non-negative decimal number (`"0.25"`, `"3"`, `"10.5"`).
    #[error("price {0:?} is not a plain decimal number such as \"0.25\"")]
    Syntax(String),
    /// More fractional digits than the token has decimals.
    #[error("price {text:?} has more than {decimals} decimals")]
    TooPrecise {
        /// The text given.
        text: String,
        /// The token's decimals.
        decimals: u8,
    },
    /// The amount does not fit in 256 bits.
    #[error("price {0:?} overflows 256 bits")]
    Overflow(String),
}

impl Price {
    /// A price of exactly `units` atomic units.
    pub const fn atomic(units: U256) -> Price {
        Price(units)
    }

    /// Parses a USDC decimal amount (`"0.25"` = 250000 units).
    pub fn from_usdc_decimal(text: &str) -> Result<Price, PriceError> {
        Self::from_decimal(text, USDC_DECIMALS)
    }

    /// Parses a decimal amount of a token with `decimals` decimals.
    pub fn from_decimal(text: &str, decimals: u8) -> Result<Price, PriceError> {
        let syntax = || PriceError::Syntax(text.to_owned());
        let (int, frac) = match text.split_once('.') {
            Some((i, f)) => (i, f),
            None => (text, ""),
        };
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if int.is_empty()
            || !digits(int)
            || !digits(frac)
            || (text.contains('.') && frac.is_empty())
        {
            return Err(syntax());
        }
        let trimmed = frac.trim_end_matches('0');
        if trimmed.len() > usize::from(decimals) {
            return Err(PriceError::TooPrecise {
                text: text.to_owned(),
                decimals,
            });
        }
        let mut all = String::with_capacity(int.len() + usize::from(decimals));
        all.push_str(int);
        all.push_str(trimmed);
        all.extend(std::iter::repeat_n(
            '0',
            usize::from(decimals) - trimmed.len(),
        ));
        U256::from_str_radix(&all, 10)
            .map(Price)
            .map_err(|_| PriceError::Overflow(text.to_owned()))
    }

    /// The amount in atomic units.
    pub const fn atomic_units(&self) -> U256 {
        self.0
    }
}

impl From<U256> for Price {
    fn from(units: U256) -> Self {
        Price(units)
    }
}

impl From<u64> for Price {
    fn from(units: u64) -> Self {
        Price(U256::from(units))
    }
}

impl fmt::Display for Price {
    /// The atomic units in decimal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Formats `units` with `decimals` decimals, trimming trailing zeros (`250000`, 6 → `"0.25"`).
pub(crate) fn format_decimal(units: U256, decimals: u8) -> String {
    let s = units.to_string();
    let d = usize::from(decimals);
    if d == 0 {
        return s;
    }
    let padded = if s.len() <= d {
        format!("{}{}", "0".repeat(d + 1 - s.len()), s)
    } else {
        s
    };
    let (int, frac) = padded.split_at(padded.len() - d);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        int.to_owned()
    } else {
        format!("{int}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let p = |s| Price::from_usdc_decimal(s).map(|p| p.atomic_units().to::<u128>());
        assert_eq!(p("0.25"), Ok(250_000));
        assert_eq!(p("0.01"), Ok(10_000));
        assert_eq!(p("0.000001"), Ok(1));
        assert_eq!(p("12"), Ok(12_000_000));
        assert_eq!(p("1.500000000"), Ok(1_500_000));
        for bad in [
            "", ".5", "5.", "-1", "1e3", " 1", "0x10", "1.2.3", "+1", "0,5",
        ] {
            assert!(
                matches!(Price::from_usdc_decimal(bad), Err(PriceError::Syntax(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            Price::from_usdc_decimal("0.0000001"),
            Err(PriceError::TooPrecise { .. })
        ));
        assert!(matches!(
            Price::from_usdc_decimal(&"9".repeat(80)),
            Err(PriceError::Overflow(_))
        ));
    }

    #[test]
    fn formats() {
        assert_eq!(format_decimal(U256::from(250_000u64), 6), "0.25");
        assert_eq!(format_decimal(U256::from(1u64), 6), "0.000001");
        assert_eq!(format_decimal(U256::from(12_000_000u64), 6), "12");
        assert_eq!(format_decimal(U256::ZERO, 6), "0");
    }
}
