-- Re-reads of a bought article by sign-in-with-x (no payment, no new receipt), and the lookup behind them.
CREATE TABLE receipt_reads (
    token_id  TEXT NOT NULL REFERENCES receipts (token_id),
    read_at   TEXT NOT NULL                  -- RFC 3339 UTC
);
CREATE INDEX receipt_reads_token ON receipt_reads (token_id);
CREATE INDEX receipts_payer_article ON receipts (payer, article_id);
