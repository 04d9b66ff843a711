-- Messages for targets in another database, written by a stage in its fenced commit (the
-- outbox), and the position up to which each source database's relay copied its outbox
-- into this one (docs/clustering.md, "Past one database"). An outbox row's id is taken
-- under the event-append lock, so ids increase in commit order. `envelope` is the message
-- as JSON without its payload; `payload` holds the payload's bytes.
CREATE TABLE shardbox_outbox (
    id BIGSERIAL PRIMARY KEY,
    to_database INTEGER NOT NULL,
    shard INTEGER NOT NULL,
    envelope TEXT NOT NULL,
    payload BYTEA NOT NULL
);
CREATE INDEX shardbox_outbox_by_database ON shardbox_outbox (to_database, id);
CREATE TABLE shardbox_relay_positions (
    from_database INTEGER PRIMARY KEY NOT NULL,
    position BIGINT NOT NULL
);
