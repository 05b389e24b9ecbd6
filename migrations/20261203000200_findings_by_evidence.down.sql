ALTER TABLE reconciliation_sweep_records DROP COLUMN amount_refunded;
DROP TABLE gateway_object_checks;
ALTER TABLE outbox DROP CONSTRAINT outbox_attempt_unless_finding;
DELETE FROM outbox WHERE payment_attempt_id IS NULL;
ALTER TABLE outbox ALTER COLUMN payment_attempt_id SET NOT NULL;
DROP INDEX reconciliation_findings_subject_idx;
-- Findings that differ only by evidence would collide on the old key: keep the newest.
DELETE FROM reconciliation_findings f USING reconciliation_findings g
 WHERE f.subject_key = g.subject_key AND f.id < g.id;
UPDATE reconciliation_findings SET dedupe_key = subject_key WHERE subject_key IS NOT NULL;
ALTER TABLE reconciliation_findings DROP COLUMN evidence, DROP COLUMN subject_key;
