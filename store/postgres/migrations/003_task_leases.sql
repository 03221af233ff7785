-- Leases on running tasks: the replica that polls each (lease_owner) until lease_until_ns (the
-- database's clock, unix nanoseconds); a task nobody holds (null, or an expired lease) is
-- claimed by the first replica that asks (FOR UPDATE SKIP LOCKED). Callbacks need no column: a
-- claim moves a callback's next_ns past its lease, so it is due again only if unacknowledged.
alter table tasks add column lease_owner text;
alter table tasks add column lease_until_ns bigint;
create index tasks_lease on tasks (coalesce(lease_until_ns, 0)) where open;
