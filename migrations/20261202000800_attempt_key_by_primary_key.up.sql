-- Why: every write of an attempt row is a new row version (the claim and the settlement
-- change `status`, so none is a HOT update), and each version puts an entry into every
-- index of payment_attempts. payment_attempts_idempotency_key_idx cost three index
-- entries per charge (insert, claim, settlement) — about one in twelve of a charge's index
-- entries (issue 28) — for a lookup the primary key already answers: the key is
-- `'onecharge-' || payment_attempt_id` (CHECK payment_attempts_idempotency_key_derived), so
-- the operators' search by key (`attempts list --idempotency-key`, `GET /api/attempts`,
-- the console filter) now looks up the attempt id it names (IdempotencyKey::attempt_of,
-- decision 122).
DROP INDEX payment_attempts_idempotency_key_idx;
