-- Fewer index writes per message. A delivered row (kept only for the deduplication window)
-- leaves the page index instead of moving inside it, and the full (shard, status, seq) index
-- goes: every row paid an entry there at insert, two more writes when delivered and one at
-- purge, while pages already read through inbox_immediate and inbox_delayed. The lookups it
-- still served get partial indexes that hold only their rare rows (blocked, to_catch_up), so
-- a live row pays nothing for them.
DROP INDEX inbox_due;
DROP INDEX inbox_immediate;
-- The page index holds only rows a page may read at once (no delay, not delivered; blocked
-- rows always carry a time): one range in seq order per page, whatever their status.
CREATE INDEX inbox_immediate ON inbox_messages (shard, seq)
    WHERE deliver_after IS NULL AND status <> 'delivered';
CREATE INDEX inbox_blocked_by_shard ON inbox_messages (shard, seq) WHERE status = 'blocked';
CREATE INDEX inbox_catching_up ON inbox_messages (shard, target_kind, tenant)
    WHERE status = 'to_catch_up';
-- The deduplication key leads with the signal id: fresh ids are time-ordered (UUID v7), so a
-- batch of new rows lands on a few pages at the end of the index instead of one page per
-- target. The key is the same set of columns, so ON CONFLICT finds it as before.
DROP INDEX inbox_dedup;
CREATE UNIQUE INDEX inbox_dedup ON inbox_messages (signal_id, tenant, target_kind, target_id);
