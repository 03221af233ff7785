-- Tollway's shared store, version 1: the records store/bbolt keeps, as tables. Money is
-- NUMERIC (exact decimal), never float; times of usage records, holds, callbacks and
-- credentials are unix nanoseconds (BIGINT), as exact as the records the gateway writes and
-- ordered the same way bbolt's keys are.

-- The catalog: each record is the JSON the admin API and the config file write (json, not
-- jsonb: a model's pricing keeps the text it was validated as), keyed and sourced in columns.
create table providers (
    name   text primary key,
    source text not null,
    doc    json not null
);
create table models (
    id     text primary key,
    source text not null,
    doc    json not null
);
create table routes (
    id     text primary key,
    source text not null,
    doc    json not null
);

create table accounts (
    id         text primary key,
    balance    numeric not null,
    created_ns bigint not null
);

-- API keys: only the SHA-256 of the secret (hex), as bbolt keeps it.
create table api_keys (
    id            text primary key,
    hash          text not null,
    prefix        text not null,
    account       text not null,
    name          text not null default '',
    created_ns    bigint, -- null: no creation time
    revoked_ns    bigint,
    monthly_limit numeric,
    models        text[],
    last_used_ns  bigint
);
create index api_keys_created on api_keys (created_ns nulls first, id);

-- Usage records, once per request id (the primary key is the idempotency index).
create table usage_records (
    request_id        text primary key,
    at_ns             bigint not null,
    key_id            text not null,
    account           text not null,
    model             text not null,
    provider          text not null,
    route             text not null,
    prompt_tokens     bigint not null,
    completion_tokens bigint not null,
    cached_tokens     bigint not null,
    cost              numeric not null,
    overage           numeric not null,
    estimated         boolean not null,
    estimate_reason   text not null,
    payment           json
);
create index usage_records_at on usage_records (at_ns, request_id);

-- The aggregates settling keeps for good: per day, key, account and model; per route and
-- model; each key's spend per month.
create table usage_daily (
    day                text not null,
    key_id             text not null,
    account            text not null,
    model              text not null,
    requests           bigint not null,
    prompt_tokens      bigint not null,
    completion_tokens  bigint not null,
    cached_tokens      bigint not null,
    estimated_requests bigint not null,
    cost               numeric not null,
    paid               numeric,
    pending            numeric,
    unpaid             numeric,
    primary key (day, key_id, account, model)
);
create table usage_route (
    route              text not null,
    model              text not null,
    requests           bigint not null,
    prompt_tokens      bigint not null,
    completion_tokens  bigint not null,
    cached_tokens      bigint not null,
    estimated_requests bigint not null,
    cost               numeric not null,
    paid               numeric,
    pending            numeric,
    unpaid             numeric,
    primary key (route, model)
);
create table spend_month (
    month  text not null,
    key_id text not null,
    spent  numeric not null,
    primary key (month, key_id)
);

-- Durable holds: the record a restart bills for a request admitted and never settled.
create table holds (
    request_id text primary key,
    record     json not null
);

-- Media tasks: the task object as JSON, with what the queries select on in columns; images a
-- provider sent inline are kept beside it until they expire.
create table tasks (
    id      text primary key,
    open    boolean not null,
    done_ns bigint, -- when a finished task ended, for retention
    doc     json not null
);
create index tasks_open on tasks (id) where open;
create index tasks_done on tasks (done_ns) where done_ns is not null;
create table task_images (
    blob       text primary key,
    task_id    text not null,
    expires_ns bigint not null,
    data       bytea not null
);
create index task_images_expiry on task_images (expires_ns);
create index task_images_task on task_images (task_id);

-- The outbox of task callbacks, by when each is due.
create table callbacks (
    id      text primary key,
    task_id text not null,
    next_ns bigint not null,
    doc     json not null
);
create index callbacks_due on callbacks (next_ns, id);
create index callbacks_task on callbacks (task_id);
create table callback_secrets (
    account text primary key,
    secret  text not null
);

-- x402: settlements whose outcome is being learned, and used credentials (single use: the
-- primary key; kept until they could no longer settle).
create table pending_payments (
    request_id text primary key,
    doc        json not null
);
create table credentials (
    key      text primary key,
    until_ns bigint not null
);
create index credentials_until on credentials (until_ns);
