-- Why: the console overview's charts (src/store/charts.rs) read the last hours of
-- attempt_transitions (by `at`) and gateway_calls (by `started_at`). With no index on those
-- columns every overview load would scan the whole current month's partition. A BRIN index
-- (one small summary per 128 blocks) fits these append-mostly tables: rows arrive in time
-- order, so the window's blocks are found from a few summaries, and an insert costs almost
-- nothing, where a B-tree would add a write to the hottest path. Declared on the
-- partitioned parents, so every month partition (and those the retention job creates
-- later) gets its own. autosummarize: new ranges are summarised as they fill, not only by
-- VACUUM (an unsummarised range is always read, so this only saves reads).
CREATE INDEX attempt_transitions_at_brin ON attempt_transitions
    USING brin (at) WITH (autosummarize = on);
CREATE INDEX gateway_calls_started_at_brin ON gateway_calls
    USING brin (started_at) WITH (autosummarize = on);
