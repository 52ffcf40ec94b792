//! Crawler identity: Web Bot Auth (RFC 9421 HTTP Message Signatures, Ed25519, `tag="web-bot-auth"`).
//!
//! A request carrying `Signature-Input` and `Signature` is verified by [`BotVerifier::verify`]: the
//! signature (parsed and checked by Cloudflare's `web-bot-auth` crate) must cover `@authority` (and
//! `signature-agent` when that header is sent), carry `created`, `expires` and `keyid`, be within its time
//! window, use a nonce not seen before, and verify under the key `keyid` names in the key directory of its
//! signature agent (`<origin>/.well-known/http-message-signatures-directory`, a JWKS). Directories are
//! fetched only from the origins the operator allows (`--bot-agents`: fetching a URL a client names would
//! let anyone make this server send requests), with a timeout, and cached for `--bot-directory-ttl-secs`.
//! A request without `Signature-Agent` (older drafts) is looked up in the allowed agents' directories.
//!
//! The outcome never refuses a request by itself: a request whose signature does not verify is served as
//! an unsigned one (and the reason counted), unless the operator requires a verified signature for its path
//! (`--bot-require`, 401). A verified identity ([`VerifiedAgent`]) travels in the request extensions, and
//! with the payment ([`AgentOfRequest`]) so the settlement log, which the payment engine calls, records it too.
//!
//! Nonces are remembered in memory (per instance) until their signature expires; with several instances a
//! replay to another instance within the window is not caught (written in docs/deploy.md).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use web_bot_auth::components::{CoveredComponent, DerivedComponent, HTTPField};
use web_bot_auth::keyring::{JSONWebKeySet, KeyRing};
use web_bot_auth::message_signatures::SignedMessage;
use web_bot_auth::{SignatureAgentLink, WebBotAuthVerifier};

use crate::licensing::Licensing;

/// The well-known path of a key directory.
pub const DIRECTORY_PATH: &str = "/.well-known/http-message-signatures-directory";

/// The media type a key directory is asked for.
pub const DIRECTORY_MEDIA_TYPE: &str = "application/http-message-signatures-directory+json";

/// Largest key directory read.
pub const MAX_DIRECTORY_BYTES: usize = 64 * 1024;

/// Longest signature headers looked at (together).
pub const MAX_SIGNATURE_HEADERS: usize = 8 * 1024;

/// Most nonces remembered at once (beyond: the oldest-expiring are forgotten first).
pub const MAX_NONCES: usize = 100_000;

/// How far in the future `created` may be (clock skew), in seconds.
pub const CREATED_SKEW: i64 = 60;

/// Web Bot Auth settings (`--bot-*`).
#[derive(Debug, Clone, Default)]
pub struct BotAuthConfig {
    /// Origins whose key directories may be fetched.
    pub agents: Vec<String>,
    /// Timeout of a directory fetch.
    pub directory_timeout: Duration,
    /// How long a fetched directory is used.
    pub directory_ttl: Duration,
    /// Paths that require a verified signature.
    pub require: Vec<String>,
}

/// A crawler whose request signature verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedAgent {
    /// The signature agent's origin (`https://crawler.example`): the identity recorded.
    pub agent: String,
    /// The key's JWK thumbprint (`keyid`).
    pub keyid: String,
}

/// Why a signed request is treated as unsigned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unverified {
    /// The headers are not a Web Bot Auth signature (missing parameters, wrong tag, unparsable).
    #[error("not a web-bot-auth signature: {0}")]
    Malformed(String),
    /// The signature agent is not on the operator's list.
    #[error("signature agent {0} is not allowed (--bot-agents)")]
    AgentNotAllowed(String),
    /// The agent's key directory could not be fetched or read.
    #[error("key directory of {0} unavailable: {1}")]
    DirectoryUnavailable(String, String),
    /// No allowed directory holds the key.
    #[error("unknown key")]
    UnknownKey,
    /// The signature does not verify.
    #[error("signature does not verify")]
    BadSignature,
    /// `expires` has passed.
    #[error("signature expired")]
    Expired,
    /// `created` is in the future.
    #[error("signature created in the future")]
    NotYetValid,
    /// The nonce was seen before.
    #[error("nonce already used")]
    ReplayedNonce,
}

impl Unverified {
    /// A short label (metrics).
    pub fn as_str(&self) -> &'static str {
        match self {
            Unverified::Malformed(_) => "malformed",
            Unverified::AgentNotAllowed(_) => "agent_not_allowed",
            Unverified::DirectoryUnavailable(..) => "directory_unavailable",
            Unverified::UnknownKey => "unknown_key",
            Unverified::BadSignature => "bad_signature",
            Unverified::Expired => "expired",
            Unverified::NotYetValid => "not_yet_valid",
            Unverified::ReplayedNonce => "replayed_nonce",
        }
    }
}

/// A request as RFC 9421 components.
struct Message<'a> {
    headers: &'a HeaderMap,
    uri: &'a http::Uri,
    method: &'a http::Method,
    /// The scheme the public URL says (TLS ends before this server in a deployment).
    scheme: &'a str,
}

impl SignedMessage for Message<'_> {
    fn lookup_component(&self, name: &CoveredComponent) -> Vec<String> {
        match name {
            CoveredComponent::HTTP(HTTPField { name, .. }) => self
                .headers
                .get_all(name.as_str())
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_owned)
                .collect(),
            CoveredComponent::Derived(d) => {
                let authority = || {
                    self.headers
                        .get(http::header::HOST)
                        .and_then(|h| h.to_str().ok())
                        .or_else(|| self.uri.authority().map(|a| a.as_str()))
                        .map(str::to_ascii_lowercase)
                };
                let value = match d {
                    DerivedComponent::Authority { .. } => authority(),
                    DerivedComponent::Method { .. } => Some(self.method.as_str().to_owned()),
                    DerivedComponent::Path { .. } => Some(self.uri.path().to_owned()),
                    DerivedComponent::Query { .. } => {
                        Some(format!("?{}", self.uri.query().unwrap_or("")))
                    }
                    DerivedComponent::Scheme { .. } => Some(self.scheme.to_owned()),
                    DerivedComponent::RequestTarget { .. } => {
                        self.uri.path_and_query().map(|p| p.as_str().to_owned())
                    }
                    DerivedComponent::TargetUri { .. } => authority().map(|a| {
                        let pq = self.uri.path_and_query().map_or("/", |p| p.as_str());
                        format!("{}://{a}{pq}", self.scheme)
                    }),
                    _ => None,
                };
                value.into_iter().collect()
            }
        }
    }
}

/// Verifies Web Bot Auth signatures; one per server.
pub struct BotVerifier {
    config: BotAuthConfig,
    scheme: String,
    http: reqwest::Client,
    directories: tokio::sync::Mutex<HashMap<String, (Instant, Arc<KeyRing>)>>,
    nonces: Mutex<HashMap<String, i64>>,
    verified: AtomicU64,
    unverified: Mutex<HashMap<&'static str, u64>>,
}

impl std::fmt::Debug for BotVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BotVerifier")
            .field("agents", &self.config.agents)
            .finish_non_exhaustive()
    }
}

impl BotVerifier {
    /// A verifier for `config`, for a server whose public URL is `public_url`.
    pub fn new(config: BotAuthConfig, public_url: &str) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(config.directory_timeout.max(Duration::from_millis(1)))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self {
            scheme: public_url.split("://").next().unwrap_or("https").to_owned(),
            config,
            http,
            directories: Default::default(),
            nonces: Default::default(),
            verified: AtomicU64::new(0),
            unverified: Default::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &BotAuthConfig {
        &self.config
    }

    /// Uses `jwks` as the key directory of `origin` (tests, and keys an operator knows ahead).
    pub async fn preload(&self, origin: &str, jwks: JSONWebKeySet) {
        let mut ring = KeyRing::default();
        ring.import_jwks(jwks);
        self.directories
            .lock()
            .await
            .insert(origin.to_owned(), (Instant::now(), Arc::new(ring)));
    }

    /// Whether the request carries a signature to look at.
    pub fn is_signed(headers: &HeaderMap) -> bool {
        headers.contains_key("signature-input") && headers.contains_key("signature")
    }

    /// Verifies the request's Web Bot Auth signature at unix time `now`.
    pub async fn verify(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        headers: &HeaderMap,
        now: i64,
    ) -> Result<VerifiedAgent, Unverified> {
        let size: usize = ["signature-input", "signature", "signature-agent"]
            .iter()
            .flat_map(|h| headers.get_all(*h))
            .map(|v| v.len())
            .sum();
        if size > MAX_SIGNATURE_HEADERS {
            return Err(Unverified::Malformed("signature headers too long".into()));
        }
        let message = Message {
            headers,
            uri,
            method,
            scheme: &self.scheme,
        };
        let verifier = WebBotAuthVerifier::parse(&message)
            .map_err(|e| Unverified::Malformed(format!("{e:?}")))?;
        let details = verifier.get_parsed_label().base.parameters.details.clone();
        let keyid = details
            .keyid
            .clone()
            .ok_or_else(|| Unverified::Malformed("no keyid".into()))?;
        let (Some(created), Some(expires)) = (details.created, details.expires) else {
            return Err(Unverified::Malformed(
                "created and expires are required".into(),
            ));
        };
        if created > now + CREATED_SKEW {
            return Err(Unverified::NotYetValid);
        }
        if expires <= now {
            return Err(Unverified::Expired);
        }
        // The agents whose directories may hold the key.
        let candidates: Vec<String> = if headers.contains_key("signature-agent") {
            let mut named = Vec::new();
            for link in verifier.get_signature_agents() {
                match link {
                    SignatureAgentLink::External(url) => {
                        let origin = origin_of(url)
                            .ok_or_else(|| Unverified::Malformed(format!("agent {url}")))?;
                        if !self.config.agents.contains(&origin) {
                            return Err(Unverified::AgentNotAllowed(origin));
                        }
                        named.push(origin);
                    }
                    // A key sent inline proves possession of a key, not who holds it.
                    SignatureAgentLink::Inline(_) => {
                        return Err(Unverified::AgentNotAllowed("(inline key)".into()));
                    }
                }
            }
            if named.is_empty() {
                return Err(Unverified::Malformed(
                    "signature-agent names no agent".into(),
                ));
            }
            named
        } else {
            self.config.agents.clone()
        };
        let mut found = None;
        for origin in candidates {
            let ring = self.directory(&origin).await?;
            if ring.get(&keyid).is_some() {
                found = Some((origin, ring));
                break;
            }
        }
        let (agent, ring) = found.ok_or(Unverified::UnknownKey)?;
        verifier
            .verify(&ring, Some(keyid.clone()))
            .map_err(|_| Unverified::BadSignature)?;
        // Only a verified signature spends its nonce (a forged one must not burn the real one).
        if let Some(nonce) = &details.nonce {
            let mut nonces = self.nonces.lock().unwrap_or_else(|e| e.into_inner());
            let key = format!("{keyid} {nonce}");
            if nonces.get(&key).is_some_and(|&until| until > now) {
                return Err(Unverified::ReplayedNonce);
            }
            if nonces.len() >= MAX_NONCES {
                nonces.retain(|_, until| *until > now);
                if nonces.len() >= MAX_NONCES {
                    // Still full of live nonces: forget the ones expiring soonest.
                    let mut by_expiry: Vec<i64> = nonces.values().copied().collect();
                    by_expiry.sort_unstable();
                    let cut = by_expiry[by_expiry.len() / 2];
                    nonces.retain(|_, until| *until > cut);
                }
            }
            nonces.insert(key, expires);
        }
        Ok(VerifiedAgent { agent, keyid })
    }

    /// The key ring of `origin`'s directory: cached, else fetched (an allowed origin only).
    async fn directory(&self, origin: &str) -> Result<Arc<KeyRing>, Unverified> {
        let mut cache = self.directories.lock().await;
        if let Some((at, ring)) = cache.get(origin)
            && at.elapsed() < self.config.directory_ttl
        {
            return Ok(ring.clone());
        }
        // Fetched under the lock: one fetch at a time (a burst of signed requests makes one).
        let unavailable = |e: String| Unverified::DirectoryUnavailable(origin.to_owned(), e);
        let mut response = self
            .http
            .get(format!("{origin}{DIRECTORY_PATH}"))
            .header(http::header::ACCEPT, DIRECTORY_MEDIA_TYPE)
            .send()
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        if !response.status().is_success() {
            return Err(unavailable(format!("status {}", response.status())));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| unavailable(e.to_string()))?
        {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_DIRECTORY_BYTES {
                return Err(unavailable("directory too large".into()));
            }
        }
        let jwks: JSONWebKeySet =
            serde_json::from_slice(&body).map_err(|e| unavailable(e.to_string()))?;
        let mut ring = KeyRing::default();
        ring.import_jwks(jwks);
        let ring = Arc::new(ring);
        cache.insert(origin.to_owned(), (Instant::now(), ring.clone()));
        tracing::info!(agent = origin, "web bot auth key directory fetched");
        Ok(ring)
    }

    fn count(&self, outcome: &Result<VerifiedAgent, Unverified>) {
        match outcome {
            Ok(_) => {
                self.verified.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                *self
                    .unverified
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(e.as_str())
                    .or_insert(0) += 1;
            }
        }
    }

    /// Records the counters (with the server's metrics recorder current).
    pub fn record_metrics(&self) {
        metrics::describe_counter!(
            "web_bot_auth_requests_total",
            "Signed requests by outcome (verified, or why they were treated as unsigned)."
        );
        metrics::counter!("web_bot_auth_requests_total", "outcome" => "verified")
            .absolute(self.verified.load(Ordering::Relaxed));
        for (reason, n) in self
            .unverified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            metrics::counter!("web_bot_auth_requests_total", "outcome" => *reason).absolute(*n);
        }
    }
}

/// `scheme://host[:port]` of an absolute http(s) URL, lowercased.
pub fn origin_of(url: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?;
    if !matches!(scheme, "http" | "https") {
        return None;
    }
    Some(format!(
        "{scheme}://{}",
        uri.authority()?.as_str().to_ascii_lowercase()
    ))
}

/// Carries the paid request's [`VerifiedAgent`] (put in its extensions by [`verify_agent`]) to the payment's
/// settlement, where the settlement log records it: an x402 extension that declares nothing in the 402 and
/// only sees the request ([`Extension::on_request`](x402_tower::extensions::Extension::on_request)).
#[derive(Debug, Clone, Copy, Default)]
pub struct AgentOfRequest;

impl x402_tower::extensions::Extension for AgentOfRequest {
    fn key(&self) -> &str {
        "web-bot-auth"
    }

    fn declare(
        &self,
        _: &x402_tower::extensions::Offered<'_>,
    ) -> Option<x402_tower::extensions::Declaration> {
        None
    }

    fn on_request(
        &self,
        request: &x402_tower::extensions::RequestView<'_>,
        context: &mut http::Extensions,
    ) {
        if let Some(agent) = request.extensions.get::<VerifiedAgent>() {
            context.insert(agent.clone());
        }
    }
}

/// Middleware: verifies a signed request, puts the [`VerifiedAgent`] in the request extensions, and answers
/// 401 on a path that requires a verified signature. Unsigned requests pass as
/// they are.
pub async fn identify(
    State(state): State<Arc<Licensing>>,
    request: Request,
    next: Next,
) -> Response {
    match verify_agent(&state, request).await {
        Ok((request, _)) => next.run(request).await,
        Err(refused) => refused,
    }
}

/// [`identify`]'s check: the request with its [`VerifiedAgent`] (also in its extensions) if it carries a
/// valid signature, or the 401 of a path that requires one.
pub async fn verify_agent(
    state: &Licensing,
    mut request: Request,
) -> Result<(Request, Option<VerifiedAgent>), Response> {
    let bots = &state.bots;
    let agent = if BotVerifier::is_signed(request.headers()) {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let outcome = bots
            .verify(request.method(), request.uri(), request.headers(), now)
            .await;
        bots.count(&outcome);
        match outcome {
            Ok(agent) => Some(agent),
            Err(why) => {
                tracing::info!(reason = %why, "signed request treated as unsigned");
                None
            }
        }
    } else {
        None
    };
    let path = request.uri().path().trim_end_matches('/');
    if agent.is_none() && bots.config.require.iter().any(|p| p == path) {
        let mut resp = crate::web::error::ApiError::new(
            StatusCode::UNAUTHORIZED,
            "signature_required",
            "this path requires a verified Web Bot Auth signature (RFC 9421, tag \"web-bot-auth\") from an \
             agent this server trusts",
        )
        .into_response();
        resp.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Signature"),
        );
        return Err(resp);
    }
    if let Some(a) = &agent {
        request.extensions_mut().insert(a.clone());
    }
    Ok((request, agent))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The draft's test key (RFC 9421 B.1.4 `test-key-ed25519`), its JWK thumbprint.
    const KEYID: &str = "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";
    const PUBLIC_X: &str = "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs";

    fn jwks() -> JSONWebKeySet {
        serde_json::from_value(serde_json::json!({
            "keys": [{"kty": "OKP", "crv": "Ed25519", "x": PUBLIC_X}]
        }))
        .unwrap()
    }

    fn vector() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("host", "example.com".parse().unwrap());
        h.insert("signature-input", r#"sig1=("@authority");created=1735689600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";alg="ed25519";expires=1735693200;nonce="gubxywVx7hzbYKatLgzuKDllDAIXAkz41PydU7aOY7vT+Mb3GJNxW0qD4zJ+IOQ1NVtg+BNbTCRUMt1Ojr5BgA==";tag="web-bot-auth""#.parse().unwrap());
        h.insert("signature", "sig1=:uz2SAv+VIemw+Oo890bhYh6Xf5qZdLUgv6/PbiQfCFXcX/vt1A8Pf7OcgL2yUDUYXFtffNpkEr5W6dldqFrkDg==:".parse().unwrap());
        h
    }

    async fn verifier() -> BotVerifier {
        let v = BotVerifier::new(
            BotAuthConfig {
                agents: vec!["https://signature-agent.test".into()],
                directory_timeout: Duration::from_secs(1),
                directory_ttl: Duration::from_secs(3600),
                require: vec![],
            },
            "https://example.com",
        );
        v.preload("https://signature-agent.test", jwks()).await;
        v
    }

    const INSIDE: i64 = 1_735_689_700;

    #[tokio::test]
    async fn the_drafts_vector_verifies_once_within_its_window() {
        let v = verifier().await;
        let uri: http::Uri = "/x402Article?articleId=a".parse().unwrap();
        let get = http::Method::GET;
        let agent = v.verify(&get, &uri, &vector(), INSIDE).await.unwrap();
        assert_eq!(agent.keyid, KEYID);
        assert_eq!(agent.agent, "https://signature-agent.test");
        // The thumbprint of the published key is the keyid.
        let jwks = jwks();
        assert_eq!(jwks.keys[0].b64_thumbprint(), KEYID);
        assert_eq!(
            v.verify(&get, &uri, &vector(), INSIDE).await,
            Err(Unverified::ReplayedNonce)
        );
    }

    #[tokio::test]
    async fn tampered_expired_early_unknown_and_foreign_signatures_do_not_verify() {
        let v = verifier().await;
        let uri: http::Uri = "/".parse().unwrap();
        let get = http::Method::GET;
        // Another authority than the one signed.
        let mut other_host = vector();
        other_host.insert("host", "evil.example".parse().unwrap());
        assert_eq!(
            v.verify(&get, &uri, &other_host, INSIDE).await,
            Err(Unverified::BadSignature)
        );
        // A flipped signature byte.
        let mut tampered = vector();
        tampered.insert("signature", "sig1=:uz2SAv+VIemw+Oo890bhYh6Xf5qZdLUgv6/PbiQfCFXcX/vt1A8Pf7OcgL2yUDUYXFtffNpkEr5W6dldqFrkDA==:".parse().unwrap());
        assert_eq!(
            v.verify(&get, &uri, &tampered, INSIDE).await,
            Err(Unverified::BadSignature)
        );
        assert_eq!(
            v.verify(&get, &uri, &vector(), 1_735_693_200).await,
            Err(Unverified::Expired)
        );
        assert_eq!(
            v.verify(&get, &uri, &vector(), 1_735_689_600 - 3600).await,
            Err(Unverified::NotYetValid)
        );
        // A verifier whose allowed agents publish another key.
        let stranger = BotVerifier::new(
            BotAuthConfig {
                agents: vec!["https://other.test".into()],
                directory_timeout: Duration::from_secs(1),
                directory_ttl: Duration::from_secs(3600),
                require: vec![],
            },
            "https://example.com",
        );
        stranger
            .preload(
                "https://other.test",
                serde_json::from_value(
                    serde_json::json!({"keys": [{"kty": "OKP", "crv": "Ed25519",
                    "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}),
                )
                .unwrap(),
            )
            .await;
        assert_eq!(
            stranger.verify(&get, &uri, &vector(), INSIDE).await,
            Err(Unverified::UnknownKey)
        );
        // A Signature-Agent the operator did not allow is never fetched.
        let mut foreign = vector();
        foreign.insert(
            "signature-agent",
            r#"agent1="https://crawler.invalid""#.parse().unwrap(),
        );
        foreign.insert("signature-input", r#"sig1=("@authority" "signature-agent";key="agent1");created=1735689600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";alg="ed25519";expires=1735693200;tag="web-bot-auth""#.parse().unwrap());
        assert_eq!(
            v.verify(&get, &uri, &foreign, INSIDE).await,
            Err(Unverified::AgentNotAllowed(
                "https://crawler.invalid".into()
            ))
        );
        // Not web-bot-auth at all.
        let mut other_tag = vector();
        other_tag.insert(
            "signature-input",
            r#"sig1=("@authority");created=1735689600;keyid="x";expires=1735693200;tag="other""#
                .parse()
                .unwrap(),
        );
        assert!(matches!(
            v.verify(&get, &uri, &other_tag, INSIDE).await,
            Err(Unverified::Malformed(_))
        ));
    }

    #[test]
    fn origins_are_lowercased_and_need_a_scheme_and_host() {
        assert_eq!(
            origin_of("https://Agent.Example:8443/x").as_deref(),
            Some("https://agent.example:8443")
        );
        assert_eq!(origin_of("ftp://a"), None);
        assert_eq!(origin_of("/relative"), None);
    }
}
