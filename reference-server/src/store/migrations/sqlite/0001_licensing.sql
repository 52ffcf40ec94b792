-- Interface A schema (articles, receipts, llms.txt hits).

CREATE TABLE articles (
    id              TEXT PRIMARY KEY,
    title           TEXT NOT NULL,
    excerpt         TEXT NOT NULL,
    content         TEXT NOT NULL,
    author_name     TEXT NOT NULL,
    published_date  TEXT NOT NULL,              -- YYYY-MM-DD
    price_atomic    INTEGER NOT NULL CHECK (price_atomic > 0), -- USDC atomic units (6 decimals)
    published       INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX articles_published ON articles (published, published_date DESC, id);

-- One row per paid license. Written before the paid response is sent.
CREATE TABLE receipts (
    token_id        TEXT PRIMARY KEY,           -- decimal uint256, derived from the payment identity
    article_id      TEXT NOT NULL REFERENCES articles (id),
    payer           TEXT NOT NULL,              -- checksummed 0x address
    pay_to          TEXT NOT NULL,
    amount_atomic   TEXT NOT NULL,              -- decimal string, token atomic units
    network         TEXT NOT NULL,              -- CAIP-2
    asset           TEXT NOT NULL,              -- token contract address
    nonce           TEXT NOT NULL,              -- EIP-3009 nonce, 0x + 64 hex
    x402_version    INTEGER NOT NULL,
    settlement      TEXT NOT NULL,              -- transaction hash, or 'verify-only'
    created_at      TEXT NOT NULL,              -- RFC 3339 UTC
    UNIQUE (network, asset, payer, nonce)
);
CREATE INDEX receipts_article ON receipts (article_id);

-- Every GET /serveLlmsTxt: interest in licensing.
CREATE TABLE llms_txt_hits (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    at              TEXT NOT NULL,              -- RFC 3339 UTC
    user_agent      TEXT NOT NULL,
    client_addr     TEXT NOT NULL
);
