-- Reverting drops the evidence of cancel calls: the older check cannot hold them.
DELETE FROM gateway_calls WHERE operation = 'cancel';
ALTER TABLE gateway_calls DROP CONSTRAINT gateway_calls_operation_check;
ALTER TABLE gateway_calls ADD CONSTRAINT gateway_calls_operation_check
    CHECK (operation IN ('charge', 'lookup', 'prepare'));
ALTER TABLE payment_attempts DROP COLUMN confirm_key_seq, DROP COLUMN create_key_seq;
