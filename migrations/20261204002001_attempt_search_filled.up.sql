-- Why (decision 214): the attempts inserted before the trigger of the previous migration
-- existed get their search row. Runs in one transaction that takes no lock writers wait for
-- (it reads payment_attempts and inserts into attempt_search, as intake does). An attempt
-- inserted since the trigger has its row already, committed with it: the statement's
-- snapshot holds both or neither, so `NOT EXISTS` never copies one twice.
--
-- At 10 million attempts this copies about a gigabyte and takes minutes (the time index is
-- probed once per attempt); the running instances go on meanwhile, searching by the old
-- indexes, which are dropped only after the check that follows.
INSERT INTO attempt_search (payment_attempt_id, created_at, order_id, customer_id)
SELECT a.payment_attempt_id, a.created_at, a.order_id, a.customer_id
FROM payment_attempts a
WHERE NOT EXISTS (SELECT FROM attempt_search s
                  WHERE s.created_at = a.created_at
                    AND s.payment_attempt_id = a.payment_attempt_id
                  OFFSET 0)
ORDER BY a.created_at, a.payment_attempt_id;
ANALYZE attempt_search;
