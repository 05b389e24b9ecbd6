-- Reverses the first migration. Destroys all payment state: only for a fresh environment.
DROP TABLE IF EXISTS gateway_calls;
DROP TABLE IF EXISTS outbox;
DROP TABLE IF EXISTS attempt_transitions;
DROP TABLE IF EXISTS payment_attempts;
DROP TABLE IF EXISTS processed_messages;
