-- The registry of the gateways sharing the database: each renews its row within its lease.
create table replicas (
    name         text primary key,
    version      text not null,
    started_ns   bigint not null,
    last_seen_ns bigint not null,
    lease_ns     bigint not null
);
