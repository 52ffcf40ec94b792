-- License terms per article, the license each receipt bought, verified crawler identities, license-token
-- mints (see the SQLite migration 0009).
ALTER TABLE articles ADD COLUMN licenses TEXT;
ALTER TABLE receipts ADD COLUMN license_id TEXT COLLATE "C";
ALTER TABLE receipts ADD COLUMN license_version TEXT COLLATE "C";
ALTER TABLE receipts ADD COLUMN agent TEXT COLLATE "C";
ALTER TABLE settlements ADD COLUMN agent TEXT COLLATE "C";
ALTER TABLE llms_txt_interest ADD COLUMN agent TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE llms_txt_interest DROP CONSTRAINT llms_txt_interest_pkey;
ALTER TABLE llms_txt_interest ADD PRIMARY KEY (bucket, user_agent, client_addr, agent);
CREATE TABLE license_mints (
    token_id    TEXT COLLATE "C" PRIMARY KEY,
    owner       TEXT COLLATE "C" NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('pending', 'minted')),
    attempts    BIGINT NOT NULL DEFAULT 0,
    tx_hash     TEXT,
    last_error  TEXT,
    updated_at  TEXT COLLATE "C" NOT NULL
);
CREATE INDEX license_mints_pending ON license_mints (status, updated_at);
