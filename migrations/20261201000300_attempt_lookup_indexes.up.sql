-- Operators look attempts up by order, customer or gateway charge (`attempts list
-- --order-id/--customer-id/--gateway-charge-id`, `GET /api/attempts?order_id=…`). Each
-- filter is answered from its own index, newest first, so a lookup never scans
-- payment_attempts however many attempts it holds. The charge id is set on settled attempts
-- only, so its index leaves out the rows without one.
CREATE INDEX IF NOT EXISTS payment_attempts_order_created_idx ON payment_attempts (order_id, created_at DESC);
CREATE INDEX IF NOT EXISTS payment_attempts_customer_created_idx ON payment_attempts (customer_id, created_at DESC);
CREATE INDEX IF NOT EXISTS payment_attempts_gateway_charge_idx ON payment_attempts (gateway_charge_id)
    WHERE gateway_charge_id IS NOT NULL;
