DROP INDEX IF EXISTS gateway_calls_started_at_brin;
DROP INDEX IF EXISTS attempt_transitions_at_brin;
