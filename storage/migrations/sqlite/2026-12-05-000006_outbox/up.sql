-- Messages for targets in another database, written by a stage in its fenced commit (the
-- outbox), and the position up to which each source database's relay copied its outbox
-- into this one (docs/clustering.md, "Past one database"). AUTOINCREMENT: an id is never
-- used twice, also after the rows of the highest ids were trimmed, so a relay's position
-- never points past a later row. `envelope` is the message as JSON without its payload.
CREATE TABLE shardbox_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL,
    to_database INTEGER NOT NULL,
    shard INTEGER NOT NULL,
    envelope TEXT NOT NULL,
    payload BLOB NOT NULL
);
CREATE INDEX shardbox_outbox_by_database ON shardbox_outbox (to_database, id);
CREATE TABLE shardbox_relay_positions (
    from_database INTEGER PRIMARY KEY NOT NULL,
    position BIGINT NOT NULL
);
