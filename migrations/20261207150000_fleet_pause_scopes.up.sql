-- Why (issue 54, decision 265): a pause may hold back charges only, refunds only, or
-- either in one currency, beside the fleet-wide pause of before. `scope` defaults to 'all',
-- so the rows already there (and a pause written by the previous release during a rolling
-- deploy) keep meaning what they meant. Both checks are added NOT VALID (no scan under the
-- lock) and validated by 20261207150002; one open pause per scope and currency is the
-- unique index of 20261207150001, which replaces `fleet_pauses_one_open` in 20261207150003.
SET LOCAL lock_timeout = '5s';
ALTER TABLE fleet_pauses
    ADD COLUMN scope text NOT NULL DEFAULT 'all',
    ADD COLUMN currency text;
ALTER TABLE fleet_pauses
    ADD CONSTRAINT fleet_pauses_scope_check
        CHECK (scope IN ('all', 'charges', 'refunds')) NOT VALID;
ALTER TABLE fleet_pauses
    ADD CONSTRAINT fleet_pauses_currency_check CHECK (currency ~ '^[A-Z]{3}$') NOT VALID;
