//! `eip2612GasSponsoring`: a buyer who never approved Permit2 signs an EIP-2612 permit for it instead of
//! sending a transaction (and so needs no ETH); the settler applies the permit in the same transaction as
//! the payment (the x402 proxies' `settleWithPermit`).
//!
//! The server declares the extension in its 402 ([`declaration`], or [`Fixed::eip2612_gas_sponsoring`](
//! super::Fixed::eip2612_gas_sponsoring) on a layer) when its settler can use it: the
//! [`OnchainSettler`](crate::settle::onchain::OnchainSettler) lists it in `/supported`. A client that can read
//! the chain (the official one given an RPC URL) then adds, when its allowance is short,
//! `extensions.eip2612GasSponsoring.info`: `{from, asset, spender, amount, nonce, deadline, signature,
//! version}`, the permit `Permit(owner, spender: Permit2, value: amount, nonce, deadline)` signed under the
//! token's own EIP-712 domain. [`Eip2612Permit::read`] reads and checks it as the official facilitator does,
//! with its codes.

use alloy_primitives::{Address, B256, Bytes, U256};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The extension's key.
pub const KEY: &str = "eip2612GasSponsoring";

/// The server's declaration: what a client signs, and that this server's settler applies it.
pub fn declaration() -> &'static str {
    r#"{"info":{"description":"The facilitator applies your EIP-2612 permit for Permit2 in the settlement transaction: no approval transaction, no gas.","version":"1"},"schema":{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"from":{"type":"string","pattern":"^0x[a-fA-F0-9]{40}$"},"asset":{"type":"string","pattern":"^0x[a-fA-F0-9]{40}$"},"spender":{"type":"string","pattern":"^0x[a-fA-F0-9]{40}$"},"amount":{"type":"string","pattern":"^[0-9]+$"},"nonce":{"type":"string","pattern":"^[0-9]+$"},"deadline":{"type":"string","pattern":"^[0-9]+$"},"signature":{"type":"string","pattern":"^0x[a-fA-F0-9]+$"},"version":{"type":"string","pattern":"^[0-9]+(\\.[0-9]+)*$"}},"required":["from","asset","spender","amount","nonce","deadline","signature","version"]}}"#
}

/// A buyer's EIP-2612 permit for Permit2, read from a payment's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eip2612Permit {
    /// The token's owner: the payer.
    pub from: Address,
    /// The token.
    pub asset: Address,
    /// The allowance granted to Permit2.
    pub value: U256,
    /// The token's permit nonce for `from`.
    pub nonce: U256,
    /// Unix seconds until which the permit can be applied.
    pub deadline: U256,
    /// The signature's `r`.
    pub r: B256,
    /// Its `s`.
    pub s: B256,
    /// Its `v` (27 or 28).
    pub v: u8,
}

#[derive(Deserialize)]
struct Wrapper<'a> {
    #[serde(borrow, rename = "eip2612GasSponsoring")]
    sponsoring: Option<Info<'a>>,
}

#[derive(Deserialize)]
struct Info<'a> {
    #[serde(borrow)]
    info: Option<&'a RawValue>,
}

/// The info's members. A client that signed no permit may echo the server's declaration, whose `info` has
/// none of them: as the official facilitator does, info without all of them is no permit at all.
#[derive(Deserialize)]
struct Fields {
    from: Option<String>,
    asset: Option<String>,
    spender: Option<String>,
    amount: Option<String>,
    nonce: Option<String>,
    deadline: Option<String>,
    signature: Option<String>,
    version: Option<String>,
}

/// [`Fields`] all present and not empty.
struct Present {
    from: String,
    asset: String,
    spender: String,
    amount: String,
    nonce: String,
    deadline: String,
    signature: String,
    version: String,
}

impl Fields {
    fn present(self) -> Option<Present> {
        let some = |v: Option<String>| v.filter(|s| !s.is_empty());
        Some(Present {
            from: some(self.from)?,
            asset: some(self.asset)?,
            spender: some(self.spender)?,
            amount: some(self.amount)?,
            nonce: some(self.nonce)?,
            deadline: some(self.deadline)?,
            signature: some(self.signature)?,
            version: some(self.version)?,
        })
    }
}

/// The official facilitator's code for info it cannot read.
pub const INVALID_FORMAT: &str = "invalid_eip2612_extension_format";

impl Eip2612Permit {
    /// The permit in a payment's `extensions` (its JSON text), if the buyer sent one (info with every
    /// member; an echo of the declaration is none): `Some(Err(code))` when it is malformed or does not fit
    /// the payment (`invalid_eip2612_extension_format`,
    /// `eip2612_from_mismatch`, `eip2612_asset_mismatch`, `eip2612_spender_not_permit2`,
    /// `eip2612_deadline_expired`: less than 6 s left at `now`).
    pub fn read(
        extensions: &str,
        payer: Address,
        token: Address,
        now: u64,
    ) -> Option<Result<Eip2612Permit, &'static str>> {
        let wrapper: Wrapper<'_> = serde_json::from_str(extensions).ok()?;
        let info = wrapper.sponsoring?.info?;
        let fields = match serde_json::from_str::<Fields>(info.get()) {
            Ok(fields) => fields.present()?,
            // Members that are not strings.
            Err(_) => return Some(Err(INVALID_FORMAT)),
        };
        Some(Self::check(fields, payer, token, now))
    }

    fn check(
        f: Present,
        payer: Address,
        token: Address,
        now: u64,
    ) -> Result<Eip2612Permit, &'static str> {
        let address = |s: &str| {
            (s.len() == 42 && s.starts_with("0x"))
                .then(|| s.parse::<Address>().ok())
                .flatten()
                .ok_or(INVALID_FORMAT)
        };
        let number = |s: &str| {
            (!s.is_empty() && s.len() <= 78 && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| U256::from_str_radix(s, 10).ok())
                .flatten()
                .ok_or(INVALID_FORMAT)
        };
        let version_ok = !f.version.is_empty()
            && f.version.len() <= 16
            && f.version
                .split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        let signature: Bytes = f
            .signature
            .strip_prefix("0x")
            .filter(|h| h.len() == 130)
            .and_then(|h| alloy_primitives::hex::decode(h).ok())
            .map(Bytes::from)
            .ok_or(INVALID_FORMAT)?;
        let (from, asset, spender) = (address(&f.from)?, address(&f.asset)?, address(&f.spender)?);
        let (value, nonce, deadline) =
            (number(&f.amount)?, number(&f.nonce)?, number(&f.deadline)?);
        if !version_ok {
            return Err(INVALID_FORMAT);
        }
        if from != payer {
            return Err("eip2612_from_mismatch");
        }
        if asset != token {
            return Err("eip2612_asset_mismatch");
        }
        if spender != crate::scheme::PERMIT2 {
            return Err("eip2612_spender_not_permit2");
        }
        if deadline < U256::from(now.saturating_add(6)) {
            return Err("eip2612_deadline_expired");
        }
        let v = match signature[64] {
            v @ (27 | 28) => v,
            v @ (0 | 1) => v + 27,
            _ => return Err(INVALID_FORMAT),
        };
        Ok(Eip2612Permit {
            from,
            asset,
            value,
            nonce,
            deadline,
            r: B256::from_slice(&signature[..32]),
            s: B256::from_slice(&signature[32..64]),
            v,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAYER: Address = Address::repeat_byte(1);
    const TOKEN: Address = Address::repeat_byte(2);

    fn extensions(change: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut info = serde_json::json!({
            "from": PAYER, "asset": TOKEN, "spender": crate::scheme::PERMIT2,
            "amount": "10000", "nonce": "0", "deadline": "1000",
            "signature": format!("0x{}1b", "ab".repeat(64)), "version": "1",
        });
        change(&mut info);
        serde_json::json!({ KEY: { "info": info } }).to_string()
    }

    #[test]
    fn a_permit_is_read_and_checked_with_the_official_codes() {
        let read = |text: &str| Eip2612Permit::read(text, PAYER, TOKEN, 900);
        let permit = read(&extensions(|_| {})).unwrap().unwrap();
        assert_eq!(permit.value, U256::from(10_000u64));
        assert_eq!(permit.v, 27);
        assert_eq!(read("{}"), None);
        assert_eq!(read(r#"{"other":{"info":{}}}"#), None);
        let code =
            |change: fn(&mut serde_json::Value)| read(&extensions(change)).unwrap().unwrap_err();
        assert_eq!(
            code(|i| i["from"] = "0x0000000000000000000000000000000000000003".into()),
            "eip2612_from_mismatch"
        );
        assert_eq!(
            code(|i| i["asset"] = "0x0000000000000000000000000000000000000003".into()),
            "eip2612_asset_mismatch"
        );
        assert_eq!(
            code(|i| i["spender"] = "0x0000000000000000000000000000000000000003".into()),
            "eip2612_spender_not_permit2"
        );
        assert_eq!(
            code(|i| i["deadline"] = "905".into()),
            "eip2612_deadline_expired"
        );
        assert_eq!(code(|i| i["amount"] = "-1".into()), INVALID_FORMAT);
        assert_eq!(code(|i| i["signature"] = "0x1234".into()), INVALID_FORMAT);
        assert_eq!(code(|i| i["version"] = "one".into()), INVALID_FORMAT);
        assert_eq!(code(|i| i["nonce"] = 7.into()), INVALID_FORMAT);
        // An echo of the server's declaration, or info missing a member, is no permit.
        assert_eq!(read(&format!(r#"{{"{KEY}":{}}}"#, declaration())), None);
        assert_eq!(
            read(&extensions(|i| i["nonce"] = serde_json::Value::Null)),
            None
        );
    }
}
