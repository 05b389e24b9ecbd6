ALTER TABLE refunds DROP COLUMN failed_lookups;
