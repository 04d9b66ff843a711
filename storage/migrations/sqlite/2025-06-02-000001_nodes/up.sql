-- Membership: every running node beats here (every poll interval, alive for a lease), and
-- leaves on a graceful shutdown. A node whose alive_until has passed is no longer a member.
CREATE TABLE shardbox_nodes (
    node_id TEXT PRIMARY KEY NOT NULL,
    started_at BIGINT NOT NULL,
    beat_at BIGINT NOT NULL,
    alive_until BIGINT NOT NULL
);
