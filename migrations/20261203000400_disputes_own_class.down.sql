-- Back to disputes as `recorded_not_charged` with evidence `disputed`: an older instance
-- knows neither the class nor a dispute's status. A won, lost and open dispute of one charge
-- then say the same: keep the newest of each.
UPDATE reconciliation_findings
   SET evidence = regexp_replace(evidence, '(^|=)dispute:(open|won|lost)(;|,|$)', '\1disputed\3', 'g')
 WHERE evidence ~ '(^|=)dispute:(open|won|lost)(;|,|$)';
UPDATE reconciliation_findings SET class = 'recorded_not_charged' WHERE class = 'disputed';
DELETE FROM reconciliation_findings f USING reconciliation_findings g
 WHERE f.subject_key = g.subject_key AND f.class = g.class AND f.evidence = g.evidence
   AND f.evidence <> '' AND f.id < g.id;
UPDATE reconciliation_findings
   SET dedupe_key = subject_key || '|' || evidence
 WHERE evidence ~ '(^|=)disputed(;|,|$)' AND subject_key IS NOT NULL;
ALTER TABLE reconciliation_findings DROP CONSTRAINT reconciliation_findings_class_check;
ALTER TABLE reconciliation_findings ADD CONSTRAINT reconciliation_findings_class_check
    CHECK (class IN ('charged_not_recorded', 'charged_twice', 'recorded_not_charged',
                     'mismatch', 'unknown_reference'));
