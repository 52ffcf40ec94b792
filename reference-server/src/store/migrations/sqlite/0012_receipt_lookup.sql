-- One index fewer written per purchase (issue #15): `receipts_article` (article_id) served no query. Its
-- only use would be the foreign key's check when an article is deleted or renamed, which the server never
-- does. `receipts_payer_article` (payer, article_id) served the one lookup by payer and article (has this
-- payer bought this article: sign-in-with-x). Both are replaced by one index on (article_id, payer),
-- which serves that lookup as well and would serve the foreign key's check too.
DROP INDEX receipts_article;
DROP INDEX receipts_payer_article;
CREATE INDEX receipts_article_payer ON receipts (article_id, payer);
