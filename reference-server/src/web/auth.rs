//! Credentials in `Authorization` headers: one token comparison for every endpoint that needs one.

use http::HeaderMap;

/// The credential of `Authorization: <scheme> <credential>` when the scheme is `scheme` (any case).
pub fn credential<'a>(headers: &'a HeaderMap, scheme: &str) -> Option<&'a str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (given, credential) = value.trim().split_once(' ')?;
    given
        .eq_ignore_ascii_case(scheme)
        .then(|| credential.trim())
}

/// Compares a secret without leaking its length or content through timing: MACs of both are compared.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use hmac::{Hmac, Mac};
    use sha2::Sha256;
    let tag = |x: &[u8]| {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(b"token-compare")
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        m.update(x);
        m.finalize().into_bytes()
    };
    let (ta, tb) = (tag(a), tag(b));
    ta.iter()
        .zip(tb.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// Whether `headers` carry `Authorization: <scheme> <expected>`.
pub fn carries(headers: &HeaderMap, scheme: &str, expected: &str) -> bool {
    credential(headers, scheme).is_some_and(|g| constant_time_eq(g.as_bytes(), expected.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_and_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        let mut h = HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            "bearer  s3cret ".parse().unwrap(),
        );
        assert_eq!(credential(&h, "Bearer"), Some("s3cret"));
        assert!(carries(&h, "Bearer", "s3cret"));
        assert!(!carries(&h, "Token", "s3cret"));
        assert!(!carries(&h, "Bearer", "s3cre"));
    }
}
