-- Why (issue 38, decision 219): intake wrote every new attempt twice, once as the attempt's
-- row and once as its first transition (`new -> pending`, `command_accepted`, by the intake,
-- "message … (stream sequence …)"), a history row and its index entry: two of a §3
-- charge's 32 WAL records, for facts the attempt's row already holds (its id, its first
-- message, its creation time) but for two: the intake's name and the message's stream
-- sequence. Those two now live on the row, and an accepted attempt's creation is read from
-- it: the view attempt_history is the history as before, the creation of an accepted
-- attempt first (id 0), then its transitions. A stale command's attempt (`new -> expired`)
-- keeps its transition row: the charts count final states from attempt_transitions by time.
--
-- Online, with attempts in flight: two nullable columns without a default are a change of
-- the catalogue only (ACCESS EXCLUSIVE on payment_attempts for that moment, after waiting at
-- most 5 s for the writers' transactions; if it cannot have the lock in that time the
-- migration fails and `onecharge setup` can simply run again). Attempts written before keep
-- their transition row and no accepted_by, so the view shows each creation once, whichever
-- build wrote it; during a rolling upgrade an instance of the previous build still writes
-- the transition row and leaves accepted_by empty.
SET LOCAL lock_timeout = '5s';

ALTER TABLE payment_attempts
    ADD COLUMN accepted_by text,
    ADD COLUMN first_stream_sequence bigint;
COMMENT ON COLUMN payment_attempts.accepted_by IS
    'The intake that accepted the command (its actor), when this row is the record of the attempt''s creation: then it has no transition row of its own (decision 219)';
COMMENT ON COLUMN payment_attempts.first_stream_sequence IS
    'The stream sequence of first_message_id, the message the attempt was created from';

CREATE VIEW attempt_history AS
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
