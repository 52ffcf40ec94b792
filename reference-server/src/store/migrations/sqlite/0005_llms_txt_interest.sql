-- llms.txt interest, aggregated: one row per minute, user agent and client address (the server counts in
-- memory and flushes once a second), instead of one fsync'd row per request. Old per-request rows are
-- folded into their minutes.
CREATE TABLE llms_txt_interest (
    bucket      TEXT NOT NULL,              -- start of the minute, RFC 3339 UTC
    user_agent  TEXT NOT NULL,
    client_addr TEXT NOT NULL,              -- client IP address
    hits        INTEGER NOT NULL CHECK (hits > 0),
    PRIMARY KEY (bucket, user_agent, client_addr)
);
INSERT INTO llms_txt_interest (bucket, user_agent, client_addr, hits)
    SELECT substr(at, 1, 16) || ':00Z', user_agent, client_addr, COUNT(*)
    FROM llms_txt_hits GROUP BY 1, 2, 3;
DROP TABLE llms_txt_hits;
