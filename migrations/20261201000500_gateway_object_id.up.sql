-- Why: Stripe cannot be asked "what happened under this idempotency key", and its search is
-- only eventually consistent. So the stripe connector creates an unconfirmed PaymentIntent
-- first (it cannot charge), the executor stores its id here under its lease, and only then
-- confirms it. The reconciler retrieves the PaymentIntent by this id; NULL proves that no
-- confirm was ever sent. Set once per attempt and never changed (the store refuses another).
ALTER TABLE payment_attempts
    ADD COLUMN gateway_object_id text CHECK (length(gateway_object_id) BETWEEN 1 AND 255);

-- The create call is evidence too: gateway_calls.operation gains 'prepare'.
ALTER TABLE gateway_calls DROP CONSTRAINT gateway_calls_operation_check;
ALTER TABLE gateway_calls ADD CONSTRAINT gateway_calls_operation_check
    CHECK (operation IN ('charge', 'lookup', 'prepare'));
