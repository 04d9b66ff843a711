-- Due pages read rows without a delay (deliver_after IS NULL) through this index, in seq
-- order, so rows waiting for a later time never slow a page down however many there are.
-- Rows with a delay, a retry or a hold come from inbox_delayed once their time has come.
CREATE INDEX inbox_immediate ON inbox_messages (shard, status, seq) WHERE deliver_after IS NULL;
