-- One index fewer written per purchase (see the SQLite migration 0012): `receipts_article` served no query,
-- and one index on (article_id, payer) serves the lookup by payer and article that
-- `receipts_payer_article` served.
DROP INDEX receipts_article;
DROP INDEX receipts_payer_article;
CREATE INDEX receipts_article_payer ON receipts (article_id, payer);
