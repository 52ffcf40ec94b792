-- The x402 payment engine's durable state (x402_tower::replay::ReplayStore), shared by every door (the paid
-- routes, /facilitator) and every instance on this database: one row per EIP-3009 authorization
-- (chain, asset, payer, nonce), checked before any settlement. A resend of the identical payment for the same
-- resource is answered from the row; `pending` rows (outcome unknown) are reconciled, never re-broadcast.
CREATE TABLE payment_states (
    chain_id     INTEGER NOT NULL,
    asset        TEXT NOT NULL,              -- checksummed token address
    payer        TEXT NOT NULL,              -- checksummed payer address
    nonce        TEXT NOT NULL,              -- 0x + 64 hex
    state        TEXT NOT NULL CHECK (state IN ('in_flight', 'settled', 'pending', 'spent')),
    resource     TEXT NOT NULL,              -- absolute resource URL, or facilitator:<url>
    fingerprint  TEXT NOT NULL,              -- EIP-712 digest of the authorization
    settlement   TEXT,                       -- JSON SettleResponse (settled, pending, spent)
    payload      TEXT NOT NULL,              -- the PaymentPayload JSON as the client sent it (for reconciliation)
    requirements TEXT NOT NULL,              -- the PaymentRequirements JSON it matched
    expires_at   INTEGER NOT NULL,           -- unix seconds: the authorization's validBefore
    updated_at   INTEGER NOT NULL,           -- unix seconds
    revision     INTEGER NOT NULL,           -- compare-and-set token
    PRIMARY KEY (chain_id, asset, payer, nonce)
);
CREATE INDEX payment_states_unresolved ON payment_states (state, updated_at);
CREATE INDEX payment_states_expiry ON payment_states (expires_at);

-- payment-identifier ids, bound to one payment and request until the payment expires.
CREATE TABLE payment_ids (
    id           TEXT PRIMARY KEY,
    fingerprint  TEXT NOT NULL,
    chain_id     INTEGER NOT NULL,
    asset        TEXT NOT NULL,
    payer        TEXT NOT NULL,
    nonce        TEXT NOT NULL,
    expires_at   INTEGER NOT NULL
);

-- A settlement row whose unknown outcome was reconciled keeps what it was.
ALTER TABLE settlements ADD COLUMN resolved_from TEXT;
ALTER TABLE settlements ADD COLUMN resolved_at TEXT;
