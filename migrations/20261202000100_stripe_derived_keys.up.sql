-- Why: Stripe saves the answer of every request that began executing, 500s included, and
-- replays it for 24 h to every request with the same Idempotency-Key. A create or confirm
-- answered 5xx would get that 500 back on every retry. An unconfirmed PaymentIntent cannot
-- charge, and a PaymentIntent succeeds at most once, so the executor may move on to the
-- next derived key (`<key>-create-2`, `<key>-confirm-2`, …) after such an answer. The
-- sequence numbers live with the attempt, written under its lease or claim (fenced), so
-- every instance and every restart sends the same key for the same step.
ALTER TABLE payment_attempts
    ADD COLUMN create_key_seq integer NOT NULL DEFAULT 1 CHECK (create_key_seq >= 1),
    ADD COLUMN confirm_key_seq integer NOT NULL DEFAULT 1 CHECK (confirm_key_seq >= 1);

-- Cancelling a PaymentIntent (the proof behind "not charged") is evidence too.
ALTER TABLE gateway_calls DROP CONSTRAINT gateway_calls_operation_check;
ALTER TABLE gateway_calls ADD CONSTRAINT gateway_calls_operation_check
    CHECK (operation IN ('charge', 'lookup', 'prepare', 'cancel'));
