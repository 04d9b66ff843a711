-- The kinds each node has registered (a JSON array of {kind, role}), written with every
-- membership beat: a tool without the application reads which kinds the live nodes serve.
ALTER TABLE shardbox_nodes ADD COLUMN kinds TEXT NOT NULL DEFAULT '';
