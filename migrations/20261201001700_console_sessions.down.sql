-- Dropping the sessions signs every operator out of the console; nothing else is lost.
DROP TABLE IF EXISTS console_sessions;
