-- Single-use nonces that are not a payment's (sign-in-with-x's), each until it expires. They were payment
-- identifiers under a made-up payment key; a record of their own keeps the payment tables about payments.
CREATE TABLE used_nonces (
    nonce       TEXT PRIMARY KEY,              -- 0x + 64 hex
    expires_at  INTEGER NOT NULL               -- unix seconds
);
