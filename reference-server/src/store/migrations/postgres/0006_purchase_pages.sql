-- Fewer index pages written per purchase (see the SQLite migration 0010): the receipts' unique key on the
-- payment identity repeats `token_id` (a hash of it), and the settlements' payment index is only read for
-- `unknown` rows.
ALTER TABLE receipts DROP CONSTRAINT receipts_network_asset_payer_nonce_key;
DROP INDEX settlements_payment;
CREATE INDEX settlements_unknown ON settlements (network, asset, payer, nonce) WHERE outcome = 'unknown';
