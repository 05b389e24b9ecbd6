-- Pausing charging across the fleet (issue 39, decision 145): a person's pause is a row
-- here, with who, why and when; resuming closes it. At most one pause is open at a time
-- (the partial unique index), so two operators pausing at once are one pause and one
-- refusal, decided by the database. Rows are kept after resuming: the history of pauses.
-- The executor's claim reads "is a pause open" in its own statement, so no attempt is
-- claimed once a pause has committed.
CREATE TABLE fleet_pauses (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    paused_by     text        NOT NULL CHECK (length(paused_by) BETWEEN 1 AND 255),
    reason        text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 4000),
    paused_at     timestamptz NOT NULL DEFAULT now(),
    resumed_by    text        CHECK (length(resumed_by) BETWEEN 1 AND 255),
    resume_reason text        CHECK (length(resume_reason) <= 4000),
    resumed_at    timestamptz,
    CHECK ((resumed_at IS NULL) = (resumed_by IS NULL))
);

CREATE UNIQUE INDEX fleet_pauses_one_open ON fleet_pauses ((true)) WHERE resumed_at IS NULL;
