-- Not online: building the keys again takes a SHARE lock on each month while it is built,
-- so writers of history wait for the build (seconds per million rows).
ALTER TABLE attempt_transitions_default REPLICA IDENTITY DEFAULT;
ALTER TABLE gateway_calls_default REPLICA IDENTITY DEFAULT;
ALTER TABLE attempt_transitions ADD CONSTRAINT attempt_transitions_pkey PRIMARY KEY (id, at);
ALTER TABLE gateway_calls ADD CONSTRAINT gateway_calls_pkey PRIMARY KEY (id, started_at);
