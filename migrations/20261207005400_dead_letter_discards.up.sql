-- Dead letters a person discarded (`dlq discard`, docs/operations.md §5): a letter that
-- needs nothing more — a test message, a command the producer sent again correctly. It stays
-- in the dead-letter stream until the stream's max_age takes it (the stream audit still
-- reads it there, so its command never turns into a false "unrecorded" finding, and the
-- runtime NATS user needs no right to delete messages), but listings leave it out and a
-- replay of it is refused. One row per letter: the key refuses a second discard, and the
-- audit row is written in the same transaction.
CREATE TABLE dead_letter_discards (
    dlq_stream    text        NOT NULL CHECK (length(dlq_stream) BETWEEN 1 AND 255),
    dlq_sequence  bigint      NOT NULL CHECK (dlq_sequence > 0),
    discarded_at  timestamptz NOT NULL DEFAULT now(),
    actor         text        NOT NULL CHECK (length(actor) BETWEEN 1 AND 255),
    reason        text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 2048),
    PRIMARY KEY (dlq_stream, dlq_sequence)
);
