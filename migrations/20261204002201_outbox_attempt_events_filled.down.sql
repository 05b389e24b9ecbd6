-- Nothing to take back: the rows go with the table (the previous migration's down).
SELECT 1;
