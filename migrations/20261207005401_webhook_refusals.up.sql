-- What the webhook listener refused, by reason (`bad_signature`, `stale`, `wrong_mode`, …):
-- how often, first and last, and the last one's words, for the console's webhook page
-- (docs/operations.md §20). One row per reason, so the table stays as small as the set of
-- reasons however many requests anyone sends; the listener tallies in memory and writes
-- here at most every few seconds, never once per request.
CREATE TABLE webhook_refusals (
    result    text        PRIMARY KEY CHECK (length(result) BETWEEN 1 AND 64),
    refused   bigint      NOT NULL CHECK (refused > 0),
    first_at  timestamptz NOT NULL DEFAULT now(),
    last_at   timestamptz NOT NULL DEFAULT now(),
    last_why  text        NOT NULL CHECK (length(last_why) BETWEEN 1 AND 500)
);
