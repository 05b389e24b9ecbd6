-- Console sign-in sessions, shared by every admin instance on this database: an operator
-- whose requests reach another instance behind a load balancer, or an instance restarted
-- mid-incident, stays signed in, and a form's CSRF token from one instance is accepted by
-- another. Signing out deletes the row, so the session ends at once everywhere.
--
-- Only the SHA-256 of the session id is kept (the id itself is in the browser's HttpOnly,
-- SameSite=Strict cookie alone), and of the principal only its actor (`operator:<name>`,
-- `admin-api` or `console`) and a labelled digest of the credential it signed in with
-- (`binding_sha256`): never a token nor a token's hash. The role and the binding are looked
-- up in the configuration on every request, so an operator removed from it, or whose token
-- was replaced after a leak, is refused at once.
-- Expiry is measured by the DATABASE clock; an expired row is never honoured and is
-- deleted (when it is presented, and in bounded batches at every sign-in).
CREATE TABLE console_sessions (
    id_sha256  bytea       PRIMARY KEY CHECK (length(id_sha256) = 32),
    actor      text        NOT NULL CHECK (length(actor) BETWEEN 1 AND 255),
    -- The token every POST form of the session carries: 32 random bytes as hex. Stored,
    -- not derived, since deriving it would need a secret shared by every instance.
    csrf       text        NOT NULL CHECK (csrf ~ '^[0-9a-f]{64}$'),
    -- SHA-256 over a label, the actor and the digest of the credential signed in with.
    binding_sha256 bytea   NOT NULL CHECK (length(binding_sha256) = 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    CHECK (expires_at > created_at)
);
-- The per-actor bound: each sign-in keeps the actor's newest sessions and deletes the rest.
CREATE INDEX console_sessions_actor_idx ON console_sessions (actor, created_at DESC);
-- The sweep of expired sessions at sign-in.
CREATE INDEX console_sessions_expires_idx ON console_sessions (expires_at);
