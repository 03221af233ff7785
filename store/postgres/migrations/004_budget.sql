-- Budget slices (store/budget.go): each replica leases slices of an account's balance and of a
-- key's monthly limit. A budget's row keeps the sum of every outstanding slice (leased), so a
-- lease is granted in one statement while balance - leased (limit - spent - leased) covers it;
-- budget_leases says whose each slice is, for settling, returning and reclaiming.
alter table accounts add column leased numeric not null default 0;
alter table spend_month add column leased numeric not null default 0;

-- account is set for an account's balance (key_id, month ''); key_id and month for a key's
-- limit in a month (account '').
create table budget_leases (
    replica text not null,
    account text not null default '',
    key_id  text not null default '',
    month   text not null default '',
    amount  numeric not null check (amount >= 0),
    primary key (replica, account, key_id, month)
);
