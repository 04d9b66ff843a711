ALTER TABLE catch_ups DROP COLUMN spread;
