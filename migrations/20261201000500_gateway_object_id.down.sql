-- Reverting drops the evidence of create calls: the older check cannot hold them.
DELETE FROM gateway_calls WHERE operation = 'prepare';
ALTER TABLE gateway_calls DROP CONSTRAINT gateway_calls_operation_check;
ALTER TABLE gateway_calls ADD CONSTRAINT gateway_calls_operation_check
    CHECK (operation IN ('charge', 'lookup'));
ALTER TABLE payment_attempts DROP COLUMN gateway_object_id;
