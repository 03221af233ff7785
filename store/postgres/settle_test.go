package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/postgres/pgtest"
	"github.com/tollway/tollway/store/settle"
)

// TestSettlePaidRecordRaced: a batch is written in one pipeline as if every record it read as
// unsettled inserts; a paid record (its settling locks no account) that another transaction
// inserts meanwhile is not counted again: the batch runs again and counts only the others.
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
