-- Settings every node must agree on, recorded by the first node that starts (name -> value).
-- shard_count: the Inbox's shard count; a node configured with another one refuses to start.
CREATE TABLE shardbox_settings (
    name TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);
