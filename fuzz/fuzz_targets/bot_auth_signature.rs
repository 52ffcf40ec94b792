//! A request's Web Bot Auth headers (`Signature-Input`, `Signature`, `Signature-Agent`), as any client may
//! send them, split from the input at its first two newlines: what the reference server's verifier does
//! with them before any key is looked up (RFC 9421 parsing by `web-bot-auth`, the label's parameters, the
//! agents named). Never a panic.
#![no_main]

use http::HeaderMap;
use libfuzzer_sys::fuzz_target;
use web_bot_auth::WebBotAuthVerifier;
use web_bot_auth::components::{CoveredComponent, DerivedComponent, HTTPField};
use web_bot_auth::message_signatures::SignedMessage;

/// A GET of `https://shop.example/x402Article?articleId=a` with the fuzzed headers, as the server sees it.
struct Request<'a> {
    headers: &'a HeaderMap,
}

impl SignedMessage for Request<'_> {
    fn lookup_component(&self, name: &CoveredComponent) -> Vec<String> {
        match name {
            CoveredComponent::HTTP(HTTPField { name, .. }) => self
                .headers
                .get_all(name.as_str())
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_owned)
                .collect(),
            CoveredComponent::Derived(d) => match d {
                DerivedComponent::Authority { .. } => vec!["shop.example".to_owned()],
                DerivedComponent::Method { .. } => vec!["GET".to_owned()],
                DerivedComponent::Path { .. } => vec!["/x402Article".to_owned()],
                DerivedComponent::Query { .. } => vec!["?articleId=a".to_owned()],
                DerivedComponent::Scheme { .. } => vec!["https".to_owned()],
                _ => Vec::new(),
            },
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |b| *b == b'\n');
    let mut headers = HeaderMap::new();
    for name in ["signature-input", "signature", "signature-agent"] {
        if let Some(Ok(v)) = parts.next().map(http::HeaderValue::from_bytes) {
            headers.insert(name, v);
        }
    }
    if let Ok(verifier) = WebBotAuthVerifier::parse(&Request { headers: &headers }) {
        let details = &verifier.get_parsed_label().base.parameters.details;
        let _ = (&details.keyid, details.created, details.expires);
        let _ = verifier.get_signature_agents().len();
    }
});
