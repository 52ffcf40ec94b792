-- Fewer index pages written per purchase (issue #15): every index with a random key costs a page in the WAL
-- of the commit that writes a purchase.
--
-- 1. `receipts` had both `token_id` (its key, a hash of network, asset, payer and nonce) and
--    UNIQUE (network, asset, payer, nonce): the second can only fail where the first already does. SQLite
--    cannot drop a table constraint, so the table is rebuilt without it; `receipt_reads` (whose rows refer
--    to receipts) is moved aside and back so that dropping the old table orphans nothing.
-- 2. `settlements_payment` serves one query, which finds the `unknown` row of a payment to resolve it: it
--    now holds only those rows, and a settled purchase no longer writes to it.
CREATE TABLE receipts_new (
    token_id        TEXT PRIMARY KEY,           -- decimal uint256, derived from the payment identity
    article_id      TEXT NOT NULL REFERENCES articles (id),
    payer           TEXT NOT NULL,
    pay_to          TEXT NOT NULL,
    amount_atomic   TEXT NOT NULL,
    network         TEXT NOT NULL,
    asset           TEXT NOT NULL,
    nonce           TEXT NOT NULL,
    x402_version    INTEGER NOT NULL,
    settlement      TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    signed_receipt  TEXT,
    license_id      TEXT,
    license_version TEXT,
    agent           TEXT
);
INSERT INTO receipts_new (token_id, article_id, payer, pay_to, amount_atomic, network, asset, nonce,
                          x402_version, settlement, created_at, signed_receipt, license_id, license_version,
                          agent)
    SELECT token_id, article_id, payer, pay_to, amount_atomic, network, asset, nonce, x402_version, settlement,
           created_at, signed_receipt, license_id, license_version, agent
    FROM receipts ORDER BY rowid;
CREATE TEMP TABLE receipt_reads_moved AS SELECT token_id, read_at FROM receipt_reads ORDER BY rowid;
DROP TABLE receipt_reads;
DROP TABLE receipts;
ALTER TABLE receipts_new RENAME TO receipts;
CREATE INDEX receipts_article ON receipts (article_id);
CREATE INDEX receipts_payer_article ON receipts (payer, article_id);
CREATE TABLE receipt_reads (
    token_id  TEXT NOT NULL REFERENCES receipts (token_id),
    read_at   TEXT NOT NULL                  -- RFC 3339 UTC
);
INSERT INTO receipt_reads (token_id, read_at) SELECT token_id, read_at FROM receipt_reads_moved;
DROP TABLE receipt_reads_moved;
CREATE INDEX receipt_reads_token ON receipt_reads (token_id);

DROP INDEX settlements_payment;
CREATE INDEX settlements_unknown ON settlements (network, asset, payer, nonce) WHERE outcome = 'unknown';
