package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/postgres/pgtest"
	"github.com/tollway/tollway/store/settle"
)

// TestSettlePaidRecordRaced: a paid record (its settling locks no account) that another
// transaction is inserting meanwhile is not counted again: the batch's insert waits for that
// transaction, finds the id there once it commits, and counts only the others.
func TestSettlePaidRecordRaced(t *testing.T) {
	key := t.Name()
	s := open(t, key)
	defer s.Close()
	if _, err := s.CreateAccount("acct", decimal.RequireFromString("1")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.Database(t, key))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Another transaction holds the paid record's id, inserted and not committed: the batch's
	// insert waits for it, then finds it there.
	other, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `insert into usage_records (request_id, at_ns, key_id, account, model, provider, route, prompt_tokens,
		completion_tokens, cached_tokens, cost, overage, estimated, estimate_reason) values ('paid-1', 1, 'x402', 'x402:chat', 'm', 'p', '', 0, 0, 0, 0.2, 0, false, '')`); err != nil {
		t.Fatal(err)
	}
	cost := decimal.RequireFromString("0.2")
	paid := store.UsageRecord{RequestID: "paid-1", KeyID: "x402", Account: store.PaidAccountPrefix + "chat", Model: "m", Provider: "p", Cost: cost,
		Payment: &store.Payment{Endpoint: "chat", Scheme: "exact", Network: "eip155:84532", Asset: "0xa", Payer: "0xb",
			Amount: "200000", AmountUSD: cost, Status: store.PaymentSettled}}
	unpaid := store.UsageRecord{RequestID: "unpaid-1", KeyID: "key_1", Account: "acct", Model: "m", Provider: "p", Cost: cost}
	type result struct {
		errs []error
		err  error
	}
	done := make(chan result, 1)
	go func() {
		errs, err := s.SettleWith([]store.UsageRecord{paid, unpaid}, settle.HoldChanges{})
		done <- result{errs, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("the batch settled while another transaction held one of its ids: %v %v", r.errs, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.errs[0] != nil || r.errs[1] != nil {
		t.Fatalf("SettleWith: %v %v", r.errs, r.err)
	}
	sum, err := s.Usage(store.UsageFilter{})
	if err != nil || sum.Requests != 1 || !sum.Cost.Equal(cost) {
		t.Fatalf("usage counts the record another transaction inserted: %+v %v", sum, err)
	}
	if a, err := s.GetAccount("acct"); err != nil || !a.Balance.Equal(decimal.RequireFromString("0.8")) {
		t.Fatalf("balance %s %v, want 0.8", a.Balance, err)
	}
}

// TestShipmentsNeverScanTheRecords: a shipment's cost must not grow with usage_records. Each
// pool connection prepares its statements once; PostgreSQL plans a prepared statement's first
// five runs with their values, then may keep a generic plan made then, until the table is next
// analyzed. A lookup of the batch's request ids planned while the table was nearly empty kept a
// sequential scan of the whole table in every later batch (6-8 ms of the server's CPU for a
// 50-record batch over 16,000 records, the cluster bench's store cost at p50). The batches
// here run on an empty table first, then on 20,000 records; none may read the table by a scan.
func TestShipmentsNeverScanTheRecords(t *testing.T) {
	key := t.Name()
	dsn := pgtest.Database(t, key)
	s := open(t, key)
	if _, err := s.CreateAccount("acct", decimal.RequireFromString("1000")); err != nil {
		t.Fatal(err)
	}
	seq := 0
	ship := func(batches int) {
		for range batches {
			recs := make([]store.UsageRecord, 50)
			for i := range recs {
				seq++
				recs[i] = store.UsageRecord{RequestID: fmt.Sprintf("ship-%d", seq), KeyID: "key_1", Account: "acct", Model: "m",
					Provider: "p", PromptTokens: 10, Cost: decimal.RequireFromString("0.0001")}
			}
			errs, err := s.SettleWith(recs, settle.HoldChanges{})
			if err != nil || errors.Join(errs...) != nil {
				t.Fatalf("SettleWith: %v %v", errs, err)
			}
		}
	}
	ship(20) // every connection the shipper used has planned its statements on a small table
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const grown = 20000
	if _, err := conn.Exec(ctx, `insert into usage_records (request_id, at_ns, key_id, account, model, provider, route, prompt_tokens,
		completion_tokens, cached_tokens, cost, overage, estimated, estimate_reason)
		select 'old-' || i, i, 'key_1', 'acct', 'm', 'p', '', 0, 0, 0, 0, 0, false, '' from generate_series(1, $1) i`, grown); err != nil {
		t.Fatal(err)
	}
	ship(10)
	if err := s.Close(); err != nil { // the server's sessions end and publish their statistics
		t.Fatal(err)
	}
	// Tuples read by sequential scans of usage_records, once every session's counts are in (the
	// inserts all counted).
	var read, inserted int64
	want := int64(grown + seq)
	for deadline := time.Now().Add(15 * time.Second); inserted < want; {
		if time.Now().After(deadline) {
			t.Fatalf("the statistics count %d records inserted, want %d", inserted, want)
		}
		time.Sleep(200 * time.Millisecond)
		if _, err := conn.Exec(ctx, "select pg_stat_clear_snapshot()"); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, "select coalesce(seq_tup_read, 0), n_tup_ins from pg_stat_user_tables where relname = 'usage_records'").Scan(&read, &inserted); err != nil {
			t.Fatal(err)
		}
	}
	if read >= grown {
		t.Fatalf("the shipments read %d records of usage_records by sequential scans (%d batches over %d records): a batch scans the whole table", read, 10, grown)
	}
}
