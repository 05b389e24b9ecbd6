DROP TABLE intake_unrecorded_messages;
DROP TABLE stream_audit_watermarks;
