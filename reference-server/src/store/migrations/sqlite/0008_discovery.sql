-- The facilitator's discovery catalogue (x402 bazaar): resources of other services whose payments it settled,
-- keyed as the official facilitator keys them (origin + path, or origin + route template). This server's own
-- articles are listed from the article catalog, not from here.
CREATE TABLE discovery_resources (
    resource      TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,               -- 'http' or 'mcp'
    x402_version  INTEGER NOT NULL,
    accepts       TEXT NOT NULL,               -- JSON array of payment requirements
    metadata      TEXT NOT NULL,               -- JSON object: the bazaar info, description, mimeType
    last_updated  INTEGER NOT NULL             -- unix seconds
);
