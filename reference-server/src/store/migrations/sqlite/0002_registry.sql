-- Interface B schema (assets).
--
-- `pos` is the dense 0-based rank of an asset in ascending (uploaded_us, id) order, maintained on
-- insert. The listing (descending uploaded_at, then descending id) is descending `pos`, so any page is
-- a range lookup on the unique `pos` index, equally fast at every offset, and the count is
-- `max(pos) + 1` (an index edge, not a scan). `tpl` is the pre-serialised record with holes for the
-- per-request signed URLs (see registry::model::Template).
CREATE TABLE assets (
    id          INTEGER PRIMARY KEY,         -- insertion sequence, the unique tie-break
    cid         TEXT    NOT NULL UNIQUE,     -- CIDv1 of the file bytes: duplicate files collide here
    uuid        TEXT    NOT NULL UNIQUE,
    uploaded_us INTEGER NOT NULL,            -- uploaded_at, Unix microseconds
    pos         INTEGER NOT NULL,
    seed_index  INTEGER,                     -- generated file of a seeded asset, or NULL
    file_path   TEXT,                        -- stored file (relative to the media dir), or NULL
    file_name   TEXT    NOT NULL,
    mime        TEXT    NOT NULL,
    size        INTEGER NOT NULL,
    proof_hash  TEXT    NOT NULL,
    tpl         BLOB    NOT NULL
);
CREATE UNIQUE INDEX assets_pos ON assets (pos);
CREATE INDEX assets_order ON assets (uploaded_us, id);
