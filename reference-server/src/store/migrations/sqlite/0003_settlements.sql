-- Every settlement attempt of a paid article, whatever its outcome, written by the x402 layer's settlement
-- observer before the client is answered. `unknown` rows (timeout after broadcast, no answer from the
-- facilitator's /settle) are the ones to reconcile against the chain: money may have moved.
CREATE TABLE settlements (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    at              TEXT NOT NULL,              -- RFC 3339 UTC
    outcome         TEXT NOT NULL CHECK (outcome IN ('settled', 'failed', 'unknown')),
    payer           TEXT NOT NULL,              -- checksummed 0x address
    pay_to          TEXT NOT NULL,
    article_id      TEXT,                       -- from the resource URL's articleId, if any
    resource        TEXT NOT NULL,              -- absolute resource URL paid for
    amount_atomic   TEXT NOT NULL,              -- decimal string, token atomic units
    network         TEXT NOT NULL,              -- CAIP-2
    asset           TEXT NOT NULL,              -- token contract address
    nonce           TEXT NOT NULL,              -- EIP-3009 nonce, 0x + 64 hex
    x402_version    INTEGER NOT NULL,
    tx_hash         TEXT,                       -- settled: transaction hash (or 'verify-only')
    reason          TEXT,                       -- failed: the spec's error string
    message         TEXT                        -- failed/unknown: detail
);
CREATE INDEX settlements_outcome ON settlements (outcome, id);
CREATE INDEX settlements_payment ON settlements (network, asset, payer, nonce);
