DROP INDEX IF EXISTS payment_attempts_gateway_charge_idx;
DROP INDEX IF EXISTS payment_attempts_customer_created_idx;
DROP INDEX IF EXISTS payment_attempts_order_created_idx;
