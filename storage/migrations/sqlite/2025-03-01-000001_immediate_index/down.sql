DROP INDEX inbox_immediate;
