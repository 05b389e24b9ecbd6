-- Back to full pages (for pages written from then on; nothing is rewritten).
SET LOCAL lock_timeout = '5s';
ALTER TABLE payment_attempts RESET (fillfactor);
