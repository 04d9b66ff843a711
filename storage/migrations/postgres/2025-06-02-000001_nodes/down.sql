DROP TABLE shardbox_nodes;
