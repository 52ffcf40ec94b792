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

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
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

/// The id a payment payload (JSON text) carries: `Ok(None)` when it carries none, `Err` when it is malformed.
/// Reads only `extensions["payment-identifier"].info.id`; everything else is skipped unbuilt.
pub(crate) fn extract(payload: &str) -> Result<Option<Cow<'_, str>>, &'static str> {
    const MALFORMED: &str =
        "payment-identifier id must be 16 to 128 characters of A-Z, a-z, 0-9, _ and -";
    #[derive(Deserialize)]
    struct Payload<'a> {
        #[serde(borrow, default)]
        extensions: Option<Extensions<'a>>,
    }
    #[derive(Deserialize)]
    struct Extensions<'a> {
        #[serde(rename = "payment-identifier", borrow, default)]
        entry: Option<Entry<'a>>,
    }
    #[derive(Deserialize)]
    struct Entry<'a> {
        #[serde(borrow, default)]
        info: Option<Info<'a>>,
    }
    #[derive(Deserialize)]
    struct Info<'a> {
        #[serde(borrow, default)]
        id: Option<&'a RawValue>,
    }
    let payload: Payload<'_> = serde_json::from_str(payload).map_err(|_| MALFORMED)?;
    let Some(raw) = payload
        .extensions
        .and_then(|e| e.entry)
        .and_then(|e| e.info)
        .and_then(|i| i.id)
    else {
        return Ok(None);
    };
    let raw = raw.get();
    if raw == "null" {
        return Ok(None);
    }
    // Without escapes the JSON string's text between its quotes is the id itself (what every client sends).
    let id = match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(id) if !id.contains('\\') => Cow::Borrowed(id),
        _ => Cow::Owned(serde_json::from_str::<String>(raw).map_err(|_| MALFORMED)?),
    };
    if is_valid_id(&id) {
        Ok(Some(id))
    } else {
        Err(MALFORMED)
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
        let with = |id: Value| {
            json!({"x402Version": 2, "extensions": {"bazaar": {"info": {"id": 1}}, KEY: {"info": {"required": false, "id": id}}}})
                .to_string()
        };
        assert_eq!(extract("{}"), Ok(None));
        assert_eq!(extract(r#"{"extensions": {"bazaar": {}}}"#), Ok(None));
        assert_eq!(extract(&with(Value::Null)), Ok(None));
        assert_eq!(
            extract(&with(json!("pay_0123456789abcdef"))),
            Ok(Some("pay_0123456789abcdef".into()))
        );
        assert!(extract(&with(json!(42))).is_err());
        assert!(extract(&with(json!("bad id"))).is_err());
        assert!(extract(&with(json!("pay_0123456789abcde\\u0066"))).is_err());
        // An escape that spells an allowed character is that character.
        assert_eq!(
            extract(
                r#"{"extensions": {"payment-identifier": {"info": {"id": "pay_0123456789abcde\u0066"}}}}"#
            ),
            Ok(Some("pay_0123456789abcdef".into()))
        );
        assert!(extract(r#"{"extensions": {"payment-identifier": 3}}"#).is_err());
    }
}
