-- Every claim becomes a transition row of its own again, under the id it took when it was
-- made (so an attempt's history keeps its order): those carried by the row of the move that
-- ended their flight, and the open ones, read from their attempt's row. Then the trigger,
-- the views and the columns go, and attempt_history is decision 219's again.
SET LOCAL lock_timeout = '5s';

INSERT INTO attempt_transitions (id, payment_attempt_id, from_status, to_status, cause, actor, detail, at)
    SELECT claim_id, payment_attempt_id, 'pending', 'in_flight', claim_cause, claim_actor,
           claim_detail, claim_at
    FROM attempt_transitions
    WHERE claim_id IS NOT NULL;
INSERT INTO attempt_transitions (id, payment_attempt_id, from_status, to_status, cause, actor, detail, at)
    SELECT id, payment_attempt_id, from_status, to_status, cause, actor, detail, at
    FROM attempt_open_claims;

DROP TRIGGER attempt_claim_written ON payment_attempts;
DROP FUNCTION onecharge_claim_written();
CREATE OR REPLACE VIEW attempt_history AS
    SELECT payment_attempt_id, 0::bigint AS id, NULL::text AS from_status,
           'pending'::text AS to_status, 'command_accepted'::text AS cause,
           accepted_by AS actor,
           'message ' || first_message_id || ' (stream sequence ' || first_stream_sequence
               || ')' AS detail,
           created_at AS at
    FROM payment_attempts
    WHERE accepted_by IS NOT NULL
    UNION ALL
    SELECT payment_attempt_id, id, from_status, to_status, cause, actor, detail, at
    FROM attempt_transitions;
COMMENT ON VIEW attempt_history IS
    'An attempt''s history: its creation, read from its row when the row records it (id 0), then its transitions (decision 219)';
DROP VIEW attempt_open_claims;
DROP FUNCTION onecharge_claim_entry(boolean, text, integer, bigint);
ALTER TABLE attempt_transitions
    DROP COLUMN claim_id,
    DROP COLUMN claim_at,
    DROP COLUMN claim_cause,
    DROP COLUMN claim_actor,
    DROP COLUMN claim_detail;
ALTER TABLE payment_attempts
    DROP COLUMN claim_id,
    DROP COLUMN claim_at,
    DROP COLUMN claim_hand_over;
