//! Time-limited signed media URLs: `?Expires=<unix s>&Signature=<mac>&Key-Pair-Id=<key id>`.
//!
//! `Signature` is base64url (no padding) of HMAC-SHA256 over `"<key id>\n<path>\n<expires>"` with the
//! server's URL signing key; `Key-Pair-Id` names the key (the first 16 hex digits of SHA-256 of the key),
//! so a key rotation is visible in URLs. Verification compares MACs in constant time.
//!
//! `Expires` is rounded down to a [`SIGNING_BUCKET`] boundary, so all URLs issued within one bucket carry
//! the same expiry and a page's signatures can be cached by the listing ([`PageSigning`]). A URL is
//! therefore valid between `ttl - bucket` and `ttl` after it was issued.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::model::HoleSigner;

use crate::web::clock::unix_now;

/// Expiry rounding step.
pub const SIGNING_BUCKET: Duration = Duration::from_secs(60);

/// Most records a thread's signature cache keeps before it is emptied (bounds its memory to a few
/// tens of MB per blocking thread).
const CACHE_CAP: usize = 20_000;

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
        self.signature_bytes(path.as_bytes(), expires)
    }

    fn signature_bytes(&self, path: &[u8], expires: u64) -> String {
        sign(&self.mac, &self.key_id, path, expires)
    }

    /// Signing for one page of records expiring at `expires`: the query string parts are formatted once.
    pub fn page(&self, expires: u64) -> PageSigning {
        PageSigning {
            mac: self.mac.clone(),
            key_id: self.key_id.clone(),
            cache_id: self.cache.id,
            expires,
            head: format!("?Expires={expires}&Signature="),
            tail: format!("&Key-Pair-Id={}", self.key_id),
        }
    }

    /// A complete signed URL `<base><path>?...` expiring `ttl` (bucketed) from now.
    pub fn sign_url(&self, base: &str, path: &str) -> String {
        let expires = self.expires_at(unix_now());
        format!(
            "{base}{path}?Expires={expires}&Signature={}&Key-Pair-Id={}",
            self.signature(path, expires),
            self.key_id
        )
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

/// HMAC-SHA256 over `"<key id>\n<path>\n<expires>"`, base64url without padding.
fn sign(mac: &Hmac<Sha256>, key_id: &str, path: &[u8], expires: u64) -> String {
    let mut mac = mac.clone();
    mac.update(key_id.as_bytes());
    mac.update(b"\n");
    mac.update(path);
    mac.update(b"\n");
    mac.update(expires.to_string().as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

/// Signing state of one page (owns what it needs, so it can move to the blocking pool); see
/// [`UrlSigner::page`].
pub struct PageSigning {
    mac: Hmac<Sha256>,
    key_id: String,
    cache_id: u64,
    expires: u64,
    head: String,
    tail: String,
}

impl std::fmt::Debug for PageSigning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageSigning")
            .field("key_id", &self.key_id)
            .field("expires", &self.expires)
            .finish()
    }
}

impl PageSigning {
    /// Run `f` with the [`HoleSigner`] of record `id`, whose signatures are cached per thread for the
    /// current expiry bucket (one cache lookup per record, not per URL).
    pub fn with_record<R>(&self, id: u64, f: impl FnOnce(&mut RecordSigning<'_>) -> R) -> R {
        CACHE.with(|cell| match cell.try_borrow_mut() {
            Ok(mut cache) => {
                if cache.signer != self.cache_id
                    || cache.expires != self.expires
                    || cache.map.len() >= CACHE_CAP
                {
                    cache.signer = self.cache_id;
                    cache.expires = self.expires;
                    cache.map.clear();
                }
                let sigs = cache.map.entry(id).or_default();
                f(&mut RecordSigning { page: self, sigs })
            }
            // Re-entered (cannot happen today): sign without the cache.
            Err(_) => f(&mut RecordSigning {
                page: self,
                sigs: &mut Vec::new(),
            }),
        })
    }
}

/// Signs the holes of one record, reusing cached signatures; see [`PageSigning::with_record`].
#[derive(Debug)]
pub struct RecordSigning<'a> {
    page: &'a PageSigning,
    sigs: &'a mut RecordSigs,
}

impl HoleSigner for RecordSigning<'_> {
    fn write_signed(&mut self, out: &mut Vec<u8>, idx: usize, path: &[u8]) {
        let page = self.page;
        // The cached entry is used only if it was made for this very path.
        let cached = self
            .sigs
            .get(idx)
            .filter(|(p, _)| &**p == path)
            .map(|(_, s)| s);
        out.extend_from_slice(page.head.as_bytes());
        match cached {
            Some(sig) => out.extend_from_slice(sig.as_bytes()),
            None => {
                let sig = sign(&page.mac, &page.key_id, path, page.expires);
                out.extend_from_slice(sig.as_bytes());
                let entry = (Box::from(path), sig.into_boxed_str());
                if idx < self.sigs.len() {
                    self.sigs[idx] = entry;
                } else if idx == self.sigs.len() {
                    self.sigs.push(entry);
                }
            }
        }
        out.extend_from_slice(page.tail.as_bytes());
    }
}

/// Per-thread signature cache, identified by the signer that owns the entries.
#[derive(Debug)]
struct SignatureCache {
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

type RecordSigs = Vec<(Box<[u8]>, Box<str>)>;

struct ThreadCache {
    signer: u64,
    expires: u64,
    map: HashMap<u64, RecordSigs, BuildHasherDefault<IdHasher>>,
}

thread_local! {
    static CACHE: RefCell<ThreadCache> = RefCell::new(ThreadCache { signer: 0, expires: 0, map: HashMap::default() });
}

/// Hasher for record ids (our own row ids, not attacker-chosen).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ 0x5851_F42D_4C95_7F2D).wrapping_mul(0x9E37_79B9_7F4A_7C15);
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
