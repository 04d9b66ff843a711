DROP TABLE shardbox_relay_positions;
DROP TABLE shardbox_outbox;
