-- Disputes are findings of their own class, `disputed` (issue 35, decision 131). A disputed
-- charge was `recorded_not_charged` with evidence `disputed`, which is false once the
-- dispute is won (the money was reinstated) and says nothing of whether it was lost. Now a
-- dispute's evidence says where it stands, `dispute:open`, `dispute:won` or `dispute:lost`
-- (with `;refunded:N` as before), and the three are one charge's history: a dispute keeps
-- the subject of the charge's `recorded_not_charged` findings (its refunds), so
-- `subject_key` is unchanged here; only the class, the evidence and the dedupe key move.
-- Every stored dispute was read before disputes had a status: it is `dispute:open`; the
-- next sweep or webhook that sees it won or lost opens that finding with this one as its
-- history.
ALTER TABLE reconciliation_findings DROP CONSTRAINT reconciliation_findings_class_check;
ALTER TABLE reconciliation_findings ADD CONSTRAINT reconciliation_findings_class_check
    CHECK (class IN ('charged_not_recorded', 'charged_twice', 'recorded_not_charged',
                     'disputed', 'mismatch', 'unknown_reference'));

-- The word `disputed` in any finding's evidence (a class's own, or one charge's among a
-- `charged_not_recorded`'s `id=evidence,…`) becomes `dispute:open`; the key follows it.
UPDATE reconciliation_findings
   SET evidence = regexp_replace(evidence, '(^|=)disputed(;|,|$)', '\1dispute:open\2', 'g')
 WHERE evidence ~ '(^|=)disputed(;|,|$)';
UPDATE reconciliation_findings
   SET class = 'disputed'
 WHERE class = 'recorded_not_charged' AND evidence LIKE 'dispute:%';
UPDATE reconciliation_findings
   SET dedupe_key = subject_key || '|' || evidence
 WHERE evidence ~ '(^|=)dispute:open(;|,|$)' AND subject_key IS NOT NULL;
