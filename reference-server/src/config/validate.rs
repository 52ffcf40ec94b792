//! [`Config::validate`]: every flag checked, defaults resolved, into [`Settings`].

use std::time::Duration;

use alloy_primitives::Address;
use x402_tower::network::{Network, Token};

use super::{Config, ConfigError, ConnectionLimits, DEFAULT_DATABASE, Settings, invalid};
use crate::licensing::settings::{
    LicensingSettings, OnchainSettings, OperatorToken, PaymentNetwork, ReceiptKey,
};
use crate::store::DatabaseUrl;

impl Config {
    /// `--receipt-signing-key`, else a key derived from the URL signing key, else a new one.
    fn receipt_key(&self, url_signing_key: Option<&[u8]>) -> Result<ReceiptKey, ConfigError> {
        use alloy_signer_local::PrivateKeySigner;
        if let Some(k) = &self.payment.receipt_signing_key {
            return k
                .trim()
                .parse::<PrivateKeySigner>()
                .map(ReceiptKey::Given)
                .map_err(|_| {
                    invalid(
                        "receipt-signing-key",
                        "<hidden>",
                        "expected 0x followed by 64 hex digits (a secp256k1 private key)",
                    )
                });
        }
        if let Some(url_key) = url_signing_key {
            use hmac::{Hmac, Mac};
            // A different purpose string for each attempt: the odd HMAC output that is not a valid scalar
            // (about 1 in 2^128) moves on to the next.
            for attempt in 0u8..=255 {
                let Ok(mut mac) = <Hmac<sha2::Sha256> as Mac>::new_from_slice(url_key) else {
                    break;
                };
                mac.update(b"x402 offer and receipt signing key");
                mac.update(&[attempt]);
                let bytes = mac.finalize().into_bytes();
                if let Ok(k) = PrivateKeySigner::from_slice(&bytes) {
                    return Ok(ReceiptKey::Derived(k));
                }
            }
        }
        Ok(ReceiptKey::Generated(PrivateKeySigner::random()))
    }

    /// Check every value and resolve defaults.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        let public_url = self
            .http
            .public_url
            .as_deref()
            .map(parse_public_url)
            .transpose()?;
        if let Some(port) = &self.http.port {
            return Err(invalid(
                "port",
                port,
                format!("this server has no --port: use --listen 127.0.0.1:{port}"),
            ));
        }
        let listen = listen_address(&self.http.listen)?;
        if public_url.is_none() && listen.ip().is_unspecified() {
            return Err(invalid(
                "listen",
                &self.http.listen,
                "an unspecified address (0.0.0.0 or [::]) would end up in links as the server's URL: \
                 pass --public-url with the address clients reach this server at",
            ));
        }
        let written = self
            .registry
            .database
            .clone()
            .or_else(|| {
                std::env::var("DATABASE_URL")
                    .ok()
                    .filter(|v| !v.trim().is_empty())
            })
            .unwrap_or_else(|| DEFAULT_DATABASE.to_owned());
        let database: DatabaseUrl =
            written
                .parse()
                .map_err(|e: crate::store::DatabaseUrlError| {
                    invalid(
                        "database",
                        &crate::store::postgres::redact(&written),
                        e.to_string(),
                    )
                })?;
        if let DatabaseUrl::SqliteFile(path) = &database {
            if path.is_dir() {
                return Err(invalid(
                    "database",
                    &written,
                    "is a directory, expected a file path",
                ));
            }
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
                && !parent.is_dir()
            {
                return Err(invalid(
                    "database",
                    &written,
                    "its directory does not exist",
                ));
            }
        }
        let pay_to = parse_address("pay-to", &self.payment.pay_to)?;
        let upto_facilitator = self
            .payment
            .upto_facilitator
            .as_deref()
            .map(|a| parse_address("upto-facilitator", a))
            .transpose()?;
        if pay_to == Address::ZERO {
            return Err(invalid(
                "pay-to",
                &self.payment.pay_to,
                "the zero address cannot receive payments",
            ));
        }
        let payment = resolve_network(self)?;
        let facilitator_url = self
            .payment
            .facilitator_url
            .as_deref()
            .map(|u| parse_http_url("facilitator-url", u))
            .transpose()?;
        if let Some(t) = &self.registry.api_token
            && (t.is_empty()
                || t.len() > 256
                || t.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(invalid(
                "api-token",
                "<hidden>",
                "1 to 256 characters without spaces",
            ));
        }
        let url_signing_key = match &self.registry.url_signing_key {
            Some(k) if k.len() < 16 => {
                return Err(invalid(
                    "url-signing-key",
                    "<hidden>",
                    "at least 16 characters",
                ));
            }
            Some(k) => Some(k.as_bytes().to_vec()),
            None => None,
        };
        for (flag, secs) in [
            (
                "header-read-timeout-secs",
                self.http.header_read_timeout_secs,
            ),
            (
                "write-stall-timeout-secs",
                self.http.write_stall_timeout_secs,
            ),
        ] {
            if secs == 0 || secs > 3600 {
                return Err(invalid(flag, &secs.to_string(), "1 to 3600 seconds"));
            }
        }
        if self.http.max_connections == 0 || self.http.max_connections > 1_000_000 {
            return Err(invalid(
                "max-connections",
                &self.http.max_connections.to_string(),
                "1 to 1000000",
            ));
        }
        if self.registry.url_ttl_secs == 0 || self.registry.url_ttl_secs > 7 * 24 * 3600 {
            return Err(invalid(
                "url-ttl-secs",
                &self.registry.url_ttl_secs.to_string(),
                "1 to 604800 seconds",
            ));
        }
        if self.payment.facilitator_settle_timeout_secs == 0
            || self.payment.facilitator_settle_timeout_secs > 600
        {
            return Err(invalid(
                "facilitator-settle-timeout-secs",
                &self.payment.facilitator_settle_timeout_secs.to_string(),
                "1 to 600 seconds",
            ));
        }
        // Below 10 s a request that is merely slow (a long queue of writes) could be taken for dead.
        if !(10..=86_400).contains(&self.payment.payment_stale_after_secs) {
            return Err(invalid(
                "payment-stale-after-secs",
                &self.payment.payment_stale_after_secs.to_string(),
                "10 to 86400 seconds",
            ));
        }
        if !(60..=86_400).contains(&self.payment.payment_keep_after_expiry_secs) {
            return Err(invalid(
                "payment-keep-after-expiry-secs",
                &self.payment.payment_keep_after_expiry_secs.to_string(),
                "60 to 86400 seconds",
            ));
        }
        if self.registry.seed_assets > 1_000_000 {
            return Err(invalid(
                "seed-assets",
                &self.registry.seed_assets.to_string(),
                "at most 1000000",
            ));
        }
        let onchain = match (&self.payment.rpc_url, &self.payment.settler_key) {
            (None, None) => None,
            (Some(url), Some(key)) => {
                if facilitator_url.is_some() {
                    return Err(invalid(
                        "rpc-url",
                        url,
                        "settle either through --facilitator-url or on chain, not both",
                    ));
                }
                let url = parse_http_url("rpc-url", url)?;
                if self.payment.rpc_receipt_timeout_secs == 0
                    || self.payment.rpc_receipt_timeout_secs > 3600
                {
                    return Err(invalid(
                        "rpc-receipt-timeout-secs",
                        &self.payment.rpc_receipt_timeout_secs.to_string(),
                        "1 to 3600 seconds",
                    ));
                }
                if !(1..=120).contains(&self.payment.rpc_timeout_secs) {
                    return Err(invalid(
                        "rpc-timeout-secs",
                        &self.payment.rpc_timeout_secs.to_string(),
                        "1 to 120 seconds",
                    ));
                }
                if !(1..=10_000_000).contains(&self.payment.rpc_log_lookback_blocks) {
                    return Err(invalid(
                        "rpc-log-lookback-blocks",
                        &self.payment.rpc_log_lookback_blocks.to_string(),
                        "1 to 10000000 blocks",
                    ));
                }
                let settings = OnchainSettings::new(
                    url,
                    key.trim().to_owned(),
                    relayer_address(key)?,
                    Duration::from_secs(self.payment.rpc_receipt_timeout_secs),
                    Duration::from_secs(self.payment.rpc_timeout_secs),
                    self.payment.rpc_log_lookback_blocks,
                );
                // Built once here so that a settler this configuration cannot make fails before the
                // server binds; the server builds its own from the settings.
                settings
                    .settler()
                    .map_err(|e| invalid("settler-key", "<hidden>", e.to_string()))?;
                Some(settings)
            }
            (Some(url), None) => return Err(invalid("rpc-url", url, "needs --settler-key")),
            (None, Some(_)) => return Err(invalid("settler-key", "<hidden>", "needs --rpc-url")),
        };
        let token_ok = |t: &str| {
            !t.is_empty()
                && t.len() <= 256
                && !t.chars().any(|c| c.is_whitespace() || c.is_control())
        };
        if let Some(t) = &self.payment.facilitator_url_token
            && !token_ok(t)
        {
            return Err(invalid(
                "facilitator-url-token",
                "<hidden>",
                "1 to 256 characters without spaces",
            ));
        }
        if let Some(t) = &self.facilitator.facilitator_token
            && !token_ok(t)
        {
            return Err(invalid(
                "facilitator-token",
                "<hidden>",
                "1 to 256 characters without spaces",
            ));
        }
        if self.facilitator.facilitator_max_timeout_secs == 0
            || self.facilitator.facilitator_max_timeout_secs > 86_400
        {
            return Err(invalid(
                "facilitator-max-timeout-secs",
                &self.facilitator.facilitator_max_timeout_secs.to_string(),
                "1 to 86400 seconds",
            ));
        }
        let facilitator_pay_to = self
            .facilitator
            .facilitator_pay_to
            .iter()
            .map(|a| parse_address("facilitator-pay-to", a))
            .collect::<Result<Vec<_>, _>>()?;
        let facilitator = crate::facilitator::FacilitatorConfig {
            token: self.facilitator.facilitator_token.clone(),
            policy: x402_tower::engine::facilitator::FacilitatorPolicy {
                max_timeout_seconds: self.facilitator.facilitator_max_timeout_secs,
                pay_to: (!facilitator_pay_to.is_empty()).then_some(facilitator_pay_to),
                ..Default::default()
            },
        };
        let default_terms = self.default_terms()?;
        let bot_auth = self.bot_auth()?;
        let license_token = match &self.payment.license_token {
            None => None,
            Some(_) if onchain.is_none() => {
                return Err(invalid(
                    "license-token",
                    self.payment.license_token.as_deref().unwrap_or(""),
                    "minting needs on-chain settlement: --rpc-url and --settler-key",
                ));
            }
            Some(a) => Some(parse_address("license-token", a)?),
        };
        // On chain, the relayer sends every settlement: it is the only address an upto payment can name.
        let upto_facilitator = match (&onchain, upto_facilitator) {
            (Some(o), Some(named)) if named != o.relayer => {
                return Err(invalid(
                    "upto-facilitator",
                    &named.to_string(),
                    format!(
                        "with --rpc-url the relayer ({}) settles upto payments: name it or leave the flag out",
                        o.relayer
                    ),
                ));
            }
            (Some(o), _) => Some(o.relayer),
            (None, named) => named,
        };
        Ok(Settings {
            facilitator,
            listen,
            public_url,
            database,
            seed_assets: self.registry.seed_assets,
            media_dir: self.registry.media_dir.clone(),
            api_token: self.registry.api_token.clone(),
            url_ttl: Duration::from_secs(self.registry.url_ttl_secs),
            export_price: self.registry.export_price,
            connections: ConnectionLimits {
                header_read_timeout: Duration::from_secs(self.http.header_read_timeout_secs),
                write_stall_timeout: Duration::from_secs(self.http.write_stall_timeout_secs),
                max_connections: self.http.max_connections,
            },
            log_format: self.log_format,
            licensing: LicensingSettings {
                default_terms,
                bot_auth,
                license_token,
                onchain,
                pay_to,
                upto_facilitator,
                payment,
                facilitator_url,
                facilitator_url_token: self.payment.facilitator_url_token.clone(),
                facilitator_settle_timeout: Duration::from_secs(
                    self.payment.facilitator_settle_timeout_secs,
                ),
                payment_stale_after: Duration::from_secs(self.payment.payment_stale_after_secs),
                payment_keep_after_expiry: Duration::from_secs(
                    self.payment.payment_keep_after_expiry_secs,
                ),
                operator_token: self.registry.api_token.clone().map_or_else(
                    || OperatorToken::Generated(uuid::Uuid::new_v4().simple().to_string()),
                    OperatorToken::Given,
                ),
                receipt_key: self.receipt_key(url_signing_key.as_deref())?,
                url_signing_key: url_signing_key.clone(),
            },
            url_signing_key,
        })
    }
}

impl Config {
    fn default_terms(&self) -> Result<crate::domain::license::DefaultTerms, ConfigError> {
        use crate::domain::license::{DefaultTerms, USAGES, USER_TYPES, parse_tokens};
        let terms = DefaultTerms {
            permits: parse_tokens(&self.licenses.license_permits, "usage", USAGES).map_err(
                |e| {
                    invalid(
                        "license-permits",
                        &self.licenses.license_permits,
                        e.to_string(),
                    )
                },
            )?,
            prohibits: parse_tokens(&self.licenses.license_prohibits, "usage", USAGES).map_err(
                |e| {
                    invalid(
                        "license-prohibits",
                        &self.licenses.license_prohibits,
                        e.to_string(),
                    )
                },
            )?,
            users: parse_tokens(&self.licenses.license_users, "user type", USER_TYPES).map_err(
                |e| invalid("license-users", &self.licenses.license_users, e.to_string()),
            )?,
        };
        terms.validate().map_err(|e| {
            invalid(
                "license-prohibits",
                &self.licenses.license_prohibits,
                e.to_string(),
            )
        })?;
        Ok(terms)
    }

    fn bot_auth(&self) -> Result<crate::licensing::bot_auth::BotAuthConfig, ConfigError> {
        let agents = self
            .bot_auth
            .bot_agents
            .iter()
            .filter(|a| !a.trim().is_empty())
            .map(|a| {
                let url = parse_http_url("bot-agents", a)?;
                let origin = crate::licensing::bot_auth::origin_of(&url).ok_or_else(|| {
                    invalid("bot-agents", a, "expected an origin (scheme://host[:port])")
                })?;
                Ok(origin)
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        for (flag, v, max) in [
            (
                "bot-directory-timeout-ms",
                self.bot_auth.bot_directory_timeout_ms,
                60_000,
            ),
            (
                "bot-directory-ttl-secs",
                self.bot_auth.bot_directory_ttl_secs,
                7 * 86_400,
            ),
        ] {
            if v == 0 || v > max {
                return Err(invalid(flag, &v.to_string(), format!("1 to {max}")));
            }
        }
        let require = self
            .bot_auth
            .bot_require
            .iter()
            .filter(|p| !p.trim().is_empty())
            .map(|p| {
                if p.starts_with('/') && !p.contains(['?', '#', ' ']) {
                    Ok(p.trim_end_matches('/').to_owned())
                } else {
                    Err(invalid(
                        "bot-require",
                        p,
                        "expected a path such as /x402Article",
                    ))
                }
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        Ok(crate::licensing::bot_auth::BotAuthConfig {
            agents,
            directory_timeout: Duration::from_millis(self.bot_auth.bot_directory_timeout_ms),
            directory_ttl: Duration::from_secs(self.bot_auth.bot_directory_ttl_secs),
            require,
        })
    }
}

/// Parse a 0x address (any case; checksummed when mixed-case is given and valid).
pub(crate) fn parse_address(flag: &'static str, s: &str) -> Result<Address, ConfigError> {
    let t = s.trim();
    if !(t.len() == 42 && t.starts_with("0x") && t[2..].bytes().all(|b| b.is_ascii_hexdigit())) {
        return Err(invalid(flag, s, "expected 0x followed by 40 hex digits"));
    }
    t.parse::<Address>()
        .map_err(|e| invalid(flag, s, e.to_string()))
}

fn parse_http_url(flag: &'static str, s: &str) -> Result<String, ConfigError> {
    let t = s.trim();
    let rest = t
        .strip_prefix("http://")
        .or_else(|| t.strip_prefix("https://"))
        .ok_or_else(|| invalid(flag, s, "expected an http:// or https:// URL"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || t.contains(char::is_whitespace) {
        return Err(invalid(flag, s, "expected an absolute URL with a host"));
    }
    if t.contains(['?', '#']) {
        return Err(invalid(flag, s, "must not carry a query or fragment"));
    }
    t.parse::<http::Uri>()
        .map_err(|e| invalid(flag, s, e.to_string()))?;
    Ok(t.trim_end_matches('/').to_owned())
}

fn parse_public_url(s: &str) -> Result<String, ConfigError> {
    parse_http_url("public-url", s)
}

/// Resolve `--network`, `--asset`, `--asset-name`, `--asset-version` into a [`PaymentNetwork`].
///
/// Known networks take their USDC address and EIP-712 domain from x402-tower's network table (each flag
/// given overrides its part); any other CAIP-2 `eip155:<id>` network needs `--asset` and `--asset-name`
/// (`--asset-version` defaults to "2", as for every USDC).
fn resolve_network(cfg: &Config) -> Result<PaymentNetwork, ConfigError> {
    let flag_err = |flag: &'static str, value: &str, reason: &str| ConfigError::Invalid {
        flag,
        value: value.to_owned(),
        reason: reason.to_owned(),
    };
    let network: Network =
        cfg.payment
            .network
            .trim()
            .parse()
            .map_err(|e: x402_tower::network::UnknownNetwork| {
                flag_err("network", &cfg.payment.network, &e.to_string())
            })?;
    let asset = cfg
        .payment
        .asset
        .as_deref()
        .map(|a| parse_address("asset", a))
        .transpose()?;
    for (flag, value) in [
        ("asset-name", &cfg.payment.asset_name),
        ("asset-version", &cfg.payment.asset_version),
    ] {
        if let Some(v) = value
            && (v.trim().is_empty() || v.len() > 64)
        {
            return Err(flag_err(flag, v, "1 to 64 characters"));
        }
    }
    let token = match Token::usdc(&network) {
        Some(usdc) => Token::new(
            asset.unwrap_or(usdc.address),
            cfg.payment.asset_name.clone().unwrap_or(usdc.name),
            cfg.payment.asset_version.clone().unwrap_or(usdc.version),
            usdc.decimals,
        ),
        None => {
            let need = |flag| {
                flag_err(
                    flag,
                    "",
                    &format!(
                        "required: network {} has no known USDC deployment",
                        network.caip2()
                    ),
                )
            };
            Token::new(
                asset.ok_or_else(|| need("asset"))?,
                cfg.payment
                    .asset_name
                    .clone()
                    .ok_or_else(|| need("asset-name"))?,
                cfg.payment
                    .asset_version
                    .clone()
                    .unwrap_or_else(|| "2".to_owned()),
                x402_tower::network::USDC_DECIMALS,
            )
        }
    };
    let methods = &cfg.payment.transfer_methods;
    let eip3009 = methods.iter().any(|m| m.trim() == "eip3009");
    let permit2 = methods.iter().any(|m| m.trim() == "permit2");
    if let Some(other) = methods
        .iter()
        .find(|m| !matches!(m.trim(), "eip3009" | "permit2"))
    {
        return Err(flag_err(
            "transfer-methods",
            other,
            "eip3009 and/or permit2",
        ));
    }
    if !(eip3009 || permit2) {
        return Err(flag_err("transfer-methods", "", "eip3009 and/or permit2"));
    }
    let token = Token { eip3009, ..token };
    Ok(PaymentNetwork {
        network,
        token,
        eip3009,
        permit2,
    })
}

/// The address of the relayer key `key` (hex, with or without `0x`).
fn relayer_address(key: &str) -> Result<Address, ConfigError> {
    key.trim()
        .parse::<alloy_signer_local::PrivateKeySigner>()
        .map(|k| k.address())
        .map_err(|_| {
            invalid(
                "settler-key",
                "<hidden>",
                "expected 64 hex digits (a secp256k1 private key), with or without 0x",
            )
        })
}

/// `--listen`: an IP address and port, or a host name and port (its first address).
fn listen_address(value: &str) -> Result<std::net::SocketAddr, ConfigError> {
    use std::net::ToSocketAddrs as _;
    let value = value.trim();
    if let Ok(addr) = value.parse() {
        return Ok(addr);
    }
    let expected =
        "expected HOST:PORT, such as 127.0.0.1:8080, [::1]:8080, 0.0.0.0:8080 or localhost:8080";
    if value
        .rsplit_once(':')
        .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
    {
        return Err(invalid("listen", value, expected));
    }
    match value.to_socket_addrs() {
        Ok(mut addrs) => addrs.next().ok_or_else(|| {
            invalid(
                "listen",
                value,
                format!("the host name has no address; {expected}"),
            )
        }),
        Err(e) => Err(invalid("listen", value, format!("{e}; {expected}"))),
    }
}
