-- Nothing to undo: the index this drops is not part of the schema.
SELECT 1;
