-- Why: N instances × executor.concurrency can exceed the gateway's own rate limit, and a
-- gateway over its limit answers 429 to everyone. `gateway_max_rate` is enforced for the
-- whole fleet by one token bucket per gateway, kept here so that no new server is needed.
-- Every take is one atomic UPDATE that refills the bucket by the DATABASE clock
-- (clock_timestamp(), never a host's) and hands out what it holds (docs/decisions.md).
CREATE TABLE gateway_rate_buckets (
    -- `<gateway_kind> <gateway_url>` (URL without credentials): one bucket per API.
    gateway     text PRIMARY KEY CHECK (length(gateway) BETWEEN 1 AND 1024),
    -- Tokens held at `refilled_at`; fractional, since the refill is continuous.
    tokens      double precision NOT NULL CHECK (tokens >= 0),
    refilled_at timestamptz NOT NULL,
    -- What the last take handed out, so the one UPDATE can return it.
    granted     integer NOT NULL DEFAULT 0 CHECK (granted >= 0)
);
