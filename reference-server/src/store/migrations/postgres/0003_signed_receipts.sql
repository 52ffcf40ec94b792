-- The receipt signed by the server's receipt key (x402 offer-receipt, EIP-712 JSON); NULL before signing existed.
ALTER TABLE receipts ADD COLUMN signed_receipt TEXT;
