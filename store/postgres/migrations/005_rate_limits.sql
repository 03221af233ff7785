-- A key's rate limits (store.RateLimits): requests and tokens per minute; NULL is unset (the
-- configuration's default applies).
alter table api_keys add column rpm bigint check (rpm >= 1);
alter table api_keys add column tpm bigint check (tpm >= 1);
