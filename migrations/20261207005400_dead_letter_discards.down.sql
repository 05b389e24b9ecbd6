DROP TABLE dead_letter_discards;
