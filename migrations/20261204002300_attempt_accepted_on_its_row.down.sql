-- The creations recorded by their rows become transition rows again (id 0, so that a
-- reader ordering an attempt's transitions by id still finds the creation first; the
-- history has no primary key since decision 170), then the view and the columns go.
SET LOCAL lock_timeout = '5s';

INSERT INTO attempt_transitions (id, payment_attempt_id, from_status, to_status, cause, actor, detail, at)
    SELECT 0, payment_attempt_id, NULL, 'pending', 'command_accepted', accepted_by,
           left('message ' || first_message_id || ' (stream sequence ' || first_stream_sequence
                    || ')', 2048),
           created_at
    FROM payment_attempts
    WHERE accepted_by IS NOT NULL;
DROP VIEW attempt_history;
ALTER TABLE payment_attempts
    DROP COLUMN accepted_by,
    DROP COLUMN first_stream_sequence;
