DROP TABLE command_outcomes;
