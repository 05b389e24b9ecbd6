DELETE FROM gateway_calls WHERE operation = 'list';
ALTER TABLE gateway_calls DROP CONSTRAINT gateway_calls_operation_check;
ALTER TABLE gateway_calls ADD CONSTRAINT gateway_calls_operation_check
    CHECK (operation IN ('charge', 'lookup', 'prepare', 'cancel'));
DROP TABLE reconciliation_sweep_schedule;
DROP TABLE reconciliation_sweep_records;
DROP TABLE reconciliation_sweeps;
DROP TABLE reconciliation_findings;
