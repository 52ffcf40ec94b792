//! The `payment-identifier` extension (x402 v2): a client-chosen id per purchase, reused on every retry, so
//! a server can tell a retry from a new purchase.
//!
//! Declared in the 402 as `extensions["payment-identifier"] = {info: {required}, schema}`; the client echoes
//! it in its payment with `info.id` (16 to 128 characters of `A-Z a-z 0-9 _ -`). The engine binds the id to a
//! fingerprint of the payment and the request (the authorization's EIP-712 digest and the resource URL):
//!
//! | request | answer |
//! |---|---|
//! | new id | processed normally |
//! | same id, same payment, same resource | processed as a resend: the stored answer, never a second settlement |
//! | same id, another payment or resource | 409 Conflict |
//! | no id where `required: true` (or a v1 payment, which has no extensions) | 400 `payment_identifier_required` |
//! | an id of the wrong form | 400 `invalid_payment_identifier` |
//!
//! Ids expire with their payment (its `validBefore`).

use serde_json::{Value, json};

/// The extension's key.
pub const KEY: &str = "payment-identifier";
/// 400 error code: the id is required and missing.
pub const ERROR_REQUIRED: &str = "payment_identifier_required";
/// 400 error code: the id is not 16-128 characters of `[A-Za-z0-9_-]`.
pub const ERROR_INVALID: &str = "invalid_payment_identifier";

/// How a route declares the `payment-identifier` extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PaymentIdentifier {
    /// Whether payments without an id are refused (400).
    pub required: bool,
}

impl PaymentIdentifier {
    /// The declaration in a 402's `extensions`: `{info: {required}, schema}`.
    pub fn declaration(&self) -> Value {
        json!({
            "info": {"required": self.required},
            "schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "required": {"type": "boolean"},
                    "id": {"type": "string", "minLength": 16, "maxLength": 128, "pattern": "^[a-zA-Z0-9_-]+$"}
                },
                "required": ["required"]
            }
        })
    }
}

/// Whether `id` has the form the spec allows.
pub fn is_valid_id(id: &str) -> bool {
    (16..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The id a payment payload carries: `Ok(None)` when it carries none, `Err` when it is malformed.
pub(crate) fn extract(payload: &Value) -> Result<Option<&str>, &'static str> {
    let Some(ext) = payload.get("extensions").and_then(|e| e.get(KEY)) else {
        return Ok(None);
    };
    match ext.get("info").and_then(|i| i.get("id")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) if is_valid_id(id) => Ok(Some(id)),
        Some(_) => {
            Err("payment-identifier id must be 16 to 128 characters of A-Z, a-z, 0-9, _ and -")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(is_valid_id("pay_7d5d747be160e280504c099d984bcfe0"));
        assert!(!is_valid_id("short"));
        assert!(!is_valid_id(&"a".repeat(129)));
        assert!(!is_valid_id("pay_7d5d747be160e2 0504c099d984bcfe0"));
        let with =
            |id: Value| json!({"extensions": {KEY: {"info": {"required": false, "id": id}}}});
        assert_eq!(extract(&json!({})), Ok(None));
        assert_eq!(extract(&with(Value::Null)), Ok(None));
        assert_eq!(
            extract(&with(json!("pay_0123456789abcdef"))),
            Ok(Some("pay_0123456789abcdef"))
        );
        assert!(extract(&with(json!(42))).is_err());
        assert!(extract(&with(json!("bad id"))).is_err());
    }
}
