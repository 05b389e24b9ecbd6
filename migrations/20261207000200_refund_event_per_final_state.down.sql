DELETE FROM refund_final_events e USING refund_final_events s
    WHERE e.refund_id = s.refund_id AND e.status = 'succeeded' AND s.status = 'failed';
ALTER TABLE refund_final_events DROP CONSTRAINT refund_final_events_pkey;
ALTER TABLE refund_final_events ADD PRIMARY KEY (refund_id);
