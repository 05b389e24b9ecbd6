DROP FUNCTION onecharge_analyze_sweep_records();
DROP FUNCTION onecharge_history_drop_month(text, text);
DROP FUNCTION onecharge_history_detach_month(text, text);
DROP FUNCTION onecharge_history_create_month(text, text, timestamptz, timestamptz);
DROP FUNCTION onecharge_history_ensure_default(text);
DROP FUNCTION onecharge_history_grant_as_parent(text, text);
DROP FUNCTION onecharge_history_month_checked(text, text);
