-- The buckets hold nothing that outlives a second: dropping them loses nothing.
DROP TABLE gateway_rate_buckets;
