-- License terms per article (RSL 1.0 vocabulary, JSON list; NULL = the site's default license at the
-- article's price), the license each receipt bought and its terms version, the verified crawler identity
-- (Web Bot Auth) of purchases and llms.txt interest, and the license-token mints of receipts.
ALTER TABLE articles ADD COLUMN licenses TEXT;
ALTER TABLE receipts ADD COLUMN license_id TEXT;
ALTER TABLE receipts ADD COLUMN license_version TEXT;
ALTER TABLE receipts ADD COLUMN agent TEXT;
ALTER TABLE settlements ADD COLUMN agent TEXT;

CREATE TABLE llms_txt_interest_v2 (
    bucket      TEXT NOT NULL,
    user_agent  TEXT NOT NULL,
    client_addr TEXT NOT NULL,
    agent       TEXT NOT NULL DEFAULT '',   -- verified Web Bot Auth agent, '' when unsigned
    hits        INTEGER NOT NULL CHECK (hits > 0),
    PRIMARY KEY (bucket, user_agent, client_addr, agent)
);
INSERT INTO llms_txt_interest_v2 (bucket, user_agent, client_addr, agent, hits)
    SELECT bucket, user_agent, client_addr, '', hits FROM llms_txt_interest;
DROP TABLE llms_txt_interest;
ALTER TABLE llms_txt_interest_v2 RENAME TO llms_txt_interest;

-- One row per receipt whose license token is to be minted on chain (only when a license-token contract is
-- configured). Written with the receipt; the minter sends pending rows, retries failures, records the
-- transaction.
CREATE TABLE license_mints (
    token_id    TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,              -- the payer, checksummed
    status      TEXT NOT NULL CHECK (status IN ('pending', 'minted')),
    attempts    INTEGER NOT NULL DEFAULT 0,
    tx_hash     TEXT,
    last_error  TEXT,
    updated_at  TEXT NOT NULL
);
CREATE INDEX license_mints_pending ON license_mints (status, updated_at);
