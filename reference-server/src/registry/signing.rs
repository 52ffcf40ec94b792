//! Time-limited signed media URLs: `?Expires=<unix s>&Signature=<mac>&Key-Pair-Id=<key id>`.
//!
//! `Signature` is base64url (no padding) of HMAC-SHA256 over `"<key id>\n<path>\n<expires>"` with the
//! server's URL signing key; `Key-Pair-Id` names the key (the first 16 hex digits of SHA-256 of the key),
//! so a key rotation is visible in URLs. Verification compares MACs in constant time.
//!
//! `Expires` is rounded down to a [`SIGNING_BUCKET`] boundary, so all URLs issued within one bucket carry
//! the same expiry and a page's signatures can be cached by the listing ([`SignatureCache`]). A URL is
//! therefore valid between `ttl - bucket` and `ttl` after it was issued.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Expiry rounding step.
pub const SIGNING_BUCKET: Duration = Duration::from_secs(60);

/// Most entries a thread's [`SignatureCache`] keeps before it is emptied.
const CACHE_CAP: usize = 100_000;

/// Why a signed URL was refused (all map to 403).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// A query parameter is missing or malformed.
    #[error("missing or malformed signature parameters")]
    Malformed,
    /// The URL was signed with another key.
    #[error("unknown Key-Pair-Id")]
    UnknownKey,
    /// `Expires` is in the past.
    #[error("the URL has expired")]
    Expired,
    /// The signature does not match the path and expiry.
    #[error("signature mismatch")]
    BadSignature,
}

/// Signs and verifies media URLs with one HMAC key.
pub struct UrlSigner {
    mac: Hmac<Sha256>,
    key_id: String,
    ttl: Duration,
    cache: SignatureCache,
}

impl std::fmt::Debug for UrlSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlSigner")
            .field("key_id", &self.key_id)
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl UrlSigner {
    /// A signer for `key` whose URLs live `ttl` (at least one bucket).
    pub fn new(key: &[u8], ttl: Duration) -> Self {
        let mac = Hmac::<Sha256>::new_from_slice(key)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        let key_id = format!("K{}", &hex::encode_upper(Sha256::digest(key))[..16]);
        Self {
            mac,
            key_id,
            ttl: ttl.max(SIGNING_BUCKET),
            cache: SignatureCache::default(),
        }
    }

    /// The `Key-Pair-Id` value.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The `Expires` value for URLs issued at `now` (Unix seconds).
    pub fn expires_at(&self, now: u64) -> u64 {
        let b = SIGNING_BUCKET.as_secs();
        (now / b) * b + self.ttl.as_secs()
    }

    /// The `Signature` value for `path` expiring at `expires`.
    pub fn signature(&self, path: &str, expires: u64) -> String {
        let mut mac = self.mac.clone();
        mac.update(self.key_id.as_bytes());
        mac.update(b"\n");
        mac.update(path.as_bytes());
        mac.update(b"\n");
        mac.update(expires.to_string().as_bytes());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }

    /// Append `?Expires=..&Signature=..&Key-Pair-Id=..` for `path` to `out`, using the cache.
    pub fn write_query(&self, out: &mut Vec<u8>, path: &str, expires: u64) {
        out.extend_from_slice(b"?Expires=");
        out.extend_from_slice(expires.to_string().as_bytes());
        out.extend_from_slice(b"&Signature=");
        self.cache.with(
            path,
            expires,
            || self.signature(path, expires),
            |sig| out.extend_from_slice(sig.as_bytes()),
        );
        out.extend_from_slice(b"&Key-Pair-Id=");
        out.extend_from_slice(self.key_id.as_bytes());
    }

    /// A complete signed URL `<base><path>?...` expiring `ttl` (bucketed) from now.
    pub fn sign_url(&self, base: &str, path: &str) -> String {
        let mut out = base.as_bytes().to_vec();
        out.extend_from_slice(path.as_bytes());
        self.write_query(&mut out, path, self.expires_at(unix_now()));
        String::from_utf8(out).unwrap_or_default()
    }

    /// Check the query string of a request for `path` at time `now`.
    pub fn verify(&self, path: &str, query: Option<&str>, now: u64) -> Result<(), UrlError> {
        let query = query.ok_or(UrlError::Malformed)?;
        if query.len() > 512 {
            return Err(UrlError::Malformed);
        }
        let (mut expires, mut sig, mut kid) = (None, None, None);
        for (k, v) in form_pairs(query) {
            match k {
                "Expires" => expires = Some(v),
                "Signature" => sig = Some(v),
                "Key-Pair-Id" => kid = Some(v),
                _ => {}
            }
        }
        let (expires, sig, kid) = (
            expires.ok_or(UrlError::Malformed)?,
            sig.ok_or(UrlError::Malformed)?,
            kid.ok_or(UrlError::Malformed)?,
        );
        if expires.is_empty() || expires.len() > 12 || !expires.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(UrlError::Malformed);
        }
        let expires_n: u64 = expires.parse().map_err(|_| UrlError::Malformed)?;
        if kid != self.key_id {
            return Err(UrlError::UnknownKey);
        }
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(sig)
            .map_err(|_| UrlError::BadSignature)?;
        let mut mac = self.mac.clone();
        mac.update(self.key_id.as_bytes());
        mac.update(b"\n");
        mac.update(path.as_bytes());
        mac.update(b"\n");
        mac.update(expires_n.to_string().as_bytes());
        mac.verify_slice(&sig).map_err(|_| UrlError::BadSignature)?;
        if expires_n <= now {
            return Err(UrlError::Expired);
        }
        Ok(())
    }
}

/// Raw `key=value` pairs of a query string (the signature parameters never need percent-decoding).
fn form_pairs(query: &str) -> impl Iterator<Item = (&str, &str)> {
    query.split('&').filter_map(|p| p.split_once('='))
}

/// Current Unix time in seconds.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Signatures of the current expiry bucket, by path, per thread (no lock on the hot path). Emptied when
/// the bucket or the signer changes, or when it grows past its cap, so its memory stays bounded.
#[derive(Debug)]
pub struct SignatureCache {
    id: u64,
}

impl Default for SignatureCache {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }
}

struct ThreadCache {
    signer: u64,
    expires: u64,
    map: HashMap<Box<str>, Box<str>, BuildHasherDefault<PathHasher>>,
}

thread_local! {
    static CACHE: RefCell<ThreadCache> = RefCell::new(ThreadCache { signer: 0, expires: 0, map: HashMap::default() });
}

impl SignatureCache {
    fn with(
        &self,
        path: &str,
        expires: u64,
        make: impl FnOnce() -> String,
        use_sig: impl FnOnce(&str),
    ) {
        CACHE.with(|cell| {
            let Ok(mut cache) = cell.try_borrow_mut() else {
                // Re-entered (cannot happen today): sign without the cache.
                return use_sig(&make());
            };
            if cache.signer != self.id || cache.expires != expires || cache.map.len() >= CACHE_CAP {
                cache.signer = self.id;
                cache.expires = expires;
                cache.map.clear();
            }
            if let Some(sig) = cache.map.get(path) {
                return use_sig(sig);
            }
            let sig = make();
            use_sig(&sig);
            cache.map.insert(path.into(), sig.into());
        });
    }
}

/// A fast non-cryptographic hasher for cache keys (our own paths, not attacker-chosen).
#[derive(Default)]
struct PathHasher(u64);

impl Hasher for PathHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            h = (h.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
        for &b in chunks.remainder() {
            h = (h.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
        self.0 = h;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query_of(url: &str) -> (&str, &str) {
        let rest = url.strip_prefix("http://h").unwrap();
        rest.split_once('?').unwrap()
    }

    #[test]
    fn sign_then_verify_and_refuse_tampering() {
        let s = UrlSigner::new(b"0123456789abcdef", Duration::from_secs(600));
        let url = s.sign_url("http://h", "/media/a/x");
        let (path, q) = query_of(&url);
        let now = unix_now();
        assert_eq!(s.verify(path, Some(q), now), Ok(()));
        assert_eq!(
            s.verify("/media/a/y", Some(q), now),
            Err(UrlError::BadSignature)
        );
        assert_eq!(s.verify(path, Some(q), now + 601), Err(UrlError::Expired));
        assert_eq!(s.verify(path, None, now), Err(UrlError::Malformed));
        let later = q.replace("Expires=", "Expires=1");
        assert_eq!(
            s.verify(path, Some(&later), now),
            Err(UrlError::BadSignature)
        );
        let other = UrlSigner::new(b"another key, 16+", Duration::from_secs(600));
        assert_eq!(other.verify(path, Some(q), now), Err(UrlError::UnknownKey));
        assert_eq!(s.expires_at(119) % 60, 0);
    }
}
