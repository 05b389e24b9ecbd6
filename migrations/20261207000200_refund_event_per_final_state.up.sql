-- Why (issue 51, decision 234): a refund the gateway reported succeeded can fail there later
-- (Stripe: a closed card, a bank that returns the money). A person resolves it `failed` once
-- the gateway shows it so (`refunds resolve --as failed`): its amount goes back to the charge
-- and its `refund.failed` event is published. The key of `refund_final_events` allowed one
-- event per refund; it now allows one per refund and final state, so a refund has at most a
-- `succeeded` and then a `failed` event, each once.
SET LOCAL lock_timeout = '5s';

ALTER TABLE refund_final_events DROP CONSTRAINT refund_final_events_pkey;
ALTER TABLE refund_final_events ADD PRIMARY KEY (refund_id, status);
