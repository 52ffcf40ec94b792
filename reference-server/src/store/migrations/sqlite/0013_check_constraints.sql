-- Cheaper writes on the purchase path (issue #15). SQLite checks `x IN ('a', 'b', 'c')` against a list of more
-- than two constants by building a temporary b-tree of the list, every time a statement checks it (an
-- ephemeral index: `sqlite3FindInIndex`). `settlements.outcome` (three values) and `payment_states.state`
-- (four) had such CHECK constraints, so every purchase built three of those b-trees: the payment record's
-- insert and update, and the settlement's insert. Written as equalities, the same constraints are checked
-- with comparisons. SQLite cannot change a table's constraint, so both tables are rebuilt: every row, id,
-- index and the settlements' id sequence (AUTOINCREMENT) kept. The rebuild copies each table once, at the
-- first start of this version: 4.9 s for 1,000,000 settlements (a 380 MB database) on the 2-core build
-- machine. The file grows by the copy (736 MB there): the old tables' pages are free and reused by later
-- writes, and `VACUUM` gives them back to the file system.
CREATE TABLE settlements_new (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    at              TEXT NOT NULL,              -- RFC 3339 UTC
    outcome         TEXT NOT NULL CHECK (outcome = 'settled' OR outcome = 'failed' OR outcome = 'unknown'),
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
    message         TEXT,                       -- failed/unknown: detail
    resolved_from   TEXT,                       -- a reconciled `unknown` row: what it was
    resolved_at     TEXT,
    agent           TEXT                        -- verified Web Bot Auth agent, if any
);
INSERT INTO settlements_new (id, at, outcome, payer, pay_to, article_id, resource, amount_atomic, network, asset,
                             nonce, x402_version, tx_hash, reason, message, resolved_from, resolved_at, agent)
    SELECT id, at, outcome, payer, pay_to, article_id, resource, amount_atomic, network, asset, nonce,
           x402_version, tx_hash, reason, message, resolved_from, resolved_at, agent
    FROM settlements ORDER BY id;
-- Ids continue after the highest ever given, as before (not only after the highest left).
DELETE FROM sqlite_sequence WHERE name = 'settlements_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'settlements_new', seq FROM sqlite_sequence WHERE name = 'settlements';
DROP TABLE settlements;
ALTER TABLE settlements_new RENAME TO settlements;
CREATE INDEX settlements_outcome ON settlements (outcome, id);
CREATE INDEX settlements_unknown ON settlements (network, asset, payer, nonce) WHERE outcome = 'unknown';

CREATE TABLE payment_states_new (
    chain_id     INTEGER NOT NULL,
    asset        TEXT NOT NULL,              -- checksummed token address
    payer        TEXT NOT NULL,              -- checksummed payer address
    nonce        TEXT NOT NULL,              -- 0x + 64 hex
    state        TEXT NOT NULL
                 CHECK (state = 'in_flight' OR state = 'settled' OR state = 'pending' OR state = 'spent'),
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
INSERT INTO payment_states_new (chain_id, asset, payer, nonce, state, resource, fingerprint, settlement, payload,
                                requirements, expires_at, updated_at, revision)
    SELECT chain_id, asset, payer, nonce, state, resource, fingerprint, settlement, payload, requirements,
           expires_at, updated_at, revision
    FROM payment_states ORDER BY chain_id, asset, payer, nonce;
DROP TABLE payment_states;
ALTER TABLE payment_states_new RENAME TO payment_states;
CREATE INDEX payment_states_expiry ON payment_states (expires_at);
-- Two constants: compared, no temporary b-tree.
CREATE INDEX payment_states_unresolved ON payment_states (updated_at) WHERE state IN ('in_flight', 'pending');
