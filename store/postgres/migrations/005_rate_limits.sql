-- A key's rate limits (store.RateLimits): requests and tokens per minute; NULL is unset (the
-- configuration's default applies).
alter table api_keys add column rpm bigint check (rpm >= 1);
alter table api_keys add column tpm bigint check (tpm >= 1);

-- Rate limits shared by replicas (store.RateShares): each replica's share of each limited
-- owner's rates, in parts per million, live until expires_ns (Unix nanoseconds).
create table rate_shares (
    id         text not null,
    replica    text not null,
    want       bigint not null check (want >= 0 and want <= 1000000),
    share      bigint not null check (share >= 0 and share <= 1000000),
    expires_ns bigint not null,
    primary key (id, replica)
);
