-- Why (issue 38, decision 220): every flight wrote two history rows, the claim's
-- (`pending -> in_flight`, `dispatched` or `claimed_for_hand_over`) and the one of the move
-- that ended it, each a heap record and an index entry: after decision 219, four of a §3
-- charge's 29.9 WAL records. The claim now records itself on the attempt's row (the history
-- id it takes from the history's sequence, its time and whether it was a hand-over; who
-- claimed, the try and the lease token are on the row already), and the settlement that
-- ends the flight writes one history row holding both moves (the claim_* columns). Every
-- other move out of `in_flight` (a hand back, an expired lease, a person's or the previous
-- build's write) gets the claim written as a row of its own by the trigger below, from the
-- row it left, so no claim is ever lost whoever ends the flight. The view attempt_history
-- lists every move as before, in the order of its id: a carried claim under the id it took
-- when it was made, an open claim (the attempt is in flight now) from the attempt's row.
--
-- Online, with attempts in flight: the new columns are nullable without a default, a
-- change of the catalogue only (ACCESS EXCLUSIVE on payment_attempts and on each month of
-- attempt_transitions for that moment, after waiting at most 5 s for the writers'
-- transactions; if it cannot have the locks in that time the migration fails and
-- `onecharge setup` can simply run again). An attempt claimed before has its claim as a row
-- and no claim_id, so nothing carries it twice. During a rolling upgrade an instance of the
-- previous build claims with a row of its own and leaves claim_id empty; when it ends a
-- flight this build claimed, the trigger writes that claim's row.
SET LOCAL lock_timeout = '5s';

ALTER TABLE payment_attempts
    ADD COLUMN claim_id bigint,
    ADD COLUMN claim_at timestamptz,
    ADD COLUMN claim_hand_over boolean;
COMMENT ON COLUMN payment_attempts.claim_id IS
    'The history id of the claim that put the attempt in flight, taken from attempt_transitions_id_seq when the claim was made; NULL once the claim is written to the history (decision 220)';
COMMENT ON COLUMN payment_attempts.claim_at IS
    'When the open claim was made (the database''s clock); NULL with claim_id';
COMMENT ON COLUMN payment_attempts.claim_hand_over IS
    'Whether the open claim is a hand-over (past the retry window: nothing is sent); NULL with claim_id';

ALTER TABLE attempt_transitions
    ADD COLUMN claim_id bigint,
    ADD COLUMN claim_at timestamptz,
    ADD COLUMN claim_cause text,
    ADD COLUMN claim_actor text,
    ADD COLUMN claim_detail text;
COMMENT ON COLUMN attempt_transitions.claim_id IS
    'When set, this row also records the claim (pending -> in_flight) of the flight its move ended, listed under this id before the row''s own move (decision 220)';

-- The one place a claim's history entry is worded, from the attempt's row as the claim left
-- it (nothing changes the owner, the try or the token while the attempt is in flight).
CREATE FUNCTION onecharge_claim_entry(
    hand_over boolean, lease_owner text, tries integer, lease_token bigint)
RETURNS TABLE (cause text, actor text, detail text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN hand_over THEN 'claimed_for_hand_over' ELSE 'dispatched' END,
           'executor:' || coalesce(lease_owner, '?'),
           CASE WHEN hand_over THEN 'past its retry window; lease token ' || lease_token
                ELSE 'try ' || tries || ', lease token ' || lease_token END
$$;

-- Claims not yet written to the history: the attempts in flight, claimed by this build.
CREATE VIEW attempt_open_claims AS
    SELECT a.payment_attempt_id, a.claim_id AS id, 'pending'::text AS from_status,
           'in_flight'::text AS to_status, e.cause, e.actor, e.detail, a.claim_at AS at
    FROM payment_attempts a
    CROSS JOIN LATERAL onecharge_claim_entry(a.claim_hand_over, a.lease_owner, a.tries,
                                             a.lease_token) e
    WHERE a.claim_id IS NOT NULL;
COMMENT ON VIEW attempt_open_claims IS
    'The claims recorded on their attempt''s row and not yet in attempt_transitions (decision 220)';

-- A move out of in_flight that does not carry its claim (the settlement clears claim_id
-- when its row holds the claim) gets the claim written as a row of its own, from the row it
-- left, and cleared from the attempt's row. An AFTER trigger, because a BEFORE row trigger
-- makes PostgreSQL lock every updated row first (a WAL record per update, whether or not
-- its WHEN holds); the WHEN is evaluated without calling the function, so the settlement,
-- which carries its claim, never fires it. The function's own update names no status, so it
-- does not fire it again.
CREATE FUNCTION onecharge_claim_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO attempt_transitions
        (id, payment_attempt_id, from_status, to_status, cause, actor, detail, at)
    SELECT OLD.claim_id, OLD.payment_attempt_id, 'pending', 'in_flight', e.cause, e.actor,
           e.detail, OLD.claim_at
    FROM onecharge_claim_entry(OLD.claim_hand_over, OLD.lease_owner, OLD.tries,
                               OLD.lease_token) e;
    UPDATE payment_attempts SET claim_id = NULL, claim_at = NULL, claim_hand_over = NULL
    WHERE payment_attempt_id = OLD.payment_attempt_id AND claim_id = OLD.claim_id;
    RETURN NULL;
END $$;
CREATE TRIGGER attempt_claim_written AFTER UPDATE OF status ON payment_attempts
    FOR EACH ROW
    WHEN (OLD.claim_id IS NOT NULL AND NEW.claim_id IS NOT DISTINCT FROM OLD.claim_id
          AND OLD.status = 'in_flight' AND NEW.status IS DISTINCT FROM 'in_flight')
    EXECUTE FUNCTION onecharge_claim_written();

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
    SELECT t.payment_attempt_id, m.id, m.from_status, m.to_status, m.cause, m.actor,
           m.detail, m.at
    FROM attempt_transitions t
    CROSS JOIN LATERAL (
        VALUES (t.claim_id, 'pending'::text, 'in_flight'::text, t.claim_cause, t.claim_actor,
                t.claim_detail, t.claim_at),
               (t.id, t.from_status, t.to_status, t.cause, t.actor, t.detail, t.at)
    ) AS m(id, from_status, to_status, cause, actor, detail, at)
    WHERE m.id IS NOT NULL
    UNION ALL
    SELECT payment_attempt_id, id, from_status, to_status, cause, actor, detail, at
    FROM attempt_open_claims;
COMMENT ON VIEW attempt_history IS
    'An attempt''s history, in the order of id: its creation, read from its row when the row records it (id 0), then its transitions, a flight''s claim listed from the row of the move that ended it, and an open claim from the attempt''s row (decisions 219, 220)';
